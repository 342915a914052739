"""Tests for attention_course.kernel_regression (chapter 1)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_course.data import make_regression_data
from attention_course.kernel_regression import (
    KERNELS,
    NWKernelRegression,
    attention_weights,
    average_pooling,
    choose_bandwidth,
    gaussian_score_parts,
    gaussian_scores,
    kernel_scores,
    learn_bandwidth,
    leave_one_out_mse,
    nadaraya_watson,
    pooling_predictions,
    scaled_distances,
    squared_distances,
)
from attention_course.training import train


@pytest.fixture
def points() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    keys = torch.sort(torch.rand(20, generator=g) * 5).values
    values = torch.randn(20, generator=g)
    queries = torch.linspace(-0.5, 5.5, 13)
    return queries, keys, values


# --- the contract ------------------------------------------------------------------------


def test_nadaraya_watson_shapes_and_rows(points):
    queries, keys, values = points
    predictions, weights = nadaraya_watson(queries, keys, values)
    assert predictions.shape == (13,)
    assert weights.shape == (13, 20)
    assert torch.all(weights >= 0)
    torch.testing.assert_close(weights.sum(dim=1), torch.ones(13))
    torch.testing.assert_close(predictions, weights @ values)


def test_gaussian_weights_match_the_formula(points):
    queries, keys, values = points
    h = 0.7
    kernel = torch.exp(-((queries[:, None] - keys[None, :]) ** 2) / (2 * h**2))
    expected = kernel / kernel.sum(dim=1, keepdim=True)
    _, weights = nadaraya_watson(queries, keys, values, bandwidth=h)
    torch.testing.assert_close(weights, expected)


def test_default_bandwidth_is_one(points):
    queries, keys, values = points
    torch.testing.assert_close(
        nadaraya_watson(queries, keys, values)[1],
        nadaraya_watson(queries, keys, values, bandwidth=1.0)[1],
    )


def test_vector_queries_and_values():
    g = torch.Generator().manual_seed(1)
    queries, keys, values = (torch.randn(4, 3, generator=g), torch.randn(6, 3, generator=g),
                             torch.randn(6, 2, generator=g))
    predictions, weights = nadaraya_watson(queries, keys, values, bandwidth=0.5)
    assert predictions.shape == (4, 2) and weights.shape == (4, 6)
    torch.testing.assert_close(predictions, weights @ values)


def test_integer_inputs_are_accepted():
    predictions, weights = nadaraya_watson(torch.arange(3), torch.arange(4), torch.arange(4))
    assert predictions.dtype.is_floating_point
    torch.testing.assert_close(weights.sum(dim=1), torch.ones(3))


def test_wide_bandwidth_is_average_pooling(points):
    queries, keys, values = points
    predictions, weights = nadaraya_watson(queries, keys, values, bandwidth=1e4)
    torch.testing.assert_close(weights, torch.full((13, 20), 1 / 20))
    torch.testing.assert_close(predictions, average_pooling(queries, values))


def test_narrow_bandwidth_is_nearest_neighbour(points):
    queries, keys, values = points
    predictions, weights = nadaraya_watson(queries, keys, values, bandwidth=1e-3)
    nearest = (queries[:, None] - keys[None, :]).abs().argmin(dim=1)
    torch.testing.assert_close(weights, torch.eye(20)[nearest])
    torch.testing.assert_close(predictions, values[nearest])


def test_query_on_a_key_is_answered_by_that_key_when_narrow(points):
    _, keys, values = points
    predictions, _ = nadaraya_watson(keys, keys, values, bandwidth=1e-4)
    torch.testing.assert_close(predictions, values)


def test_weights_move_with_the_query():
    keys = torch.tensor([0.0, 1.0, 2.0, 3.0])
    _, weights = nadaraya_watson(torch.tensor([0.0, 3.0]), keys, torch.zeros(4))
    assert weights[0].argmax() == 0 and weights[1].argmax() == 3
    # A key's weight falls as it gets further from the query.
    assert torch.all(weights[0, :-1] > weights[0, 1:])


def test_extreme_distances_do_not_give_nan():
    _, weights = nadaraya_watson(torch.tensor([1e4]), torch.tensor([0.0, 1.0]),
                                 torch.tensor([1.0, 2.0]), bandwidth=1e-2)
    assert torch.isfinite(weights).all()
    torch.testing.assert_close(weights, torch.tensor([[0.0, 1.0]]))


# --- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("queries", "keys", "values", "shapes"),
    [
        (torch.zeros(3, 2), torch.zeros(5, 3), torch.zeros(5), ["(3, 2)", "(5, 3)"]),
        (torch.zeros(3), torch.zeros(5), torch.zeros(4), ["(4,)", "(5,)"]),
        (torch.zeros(3), torch.zeros(5), torch.zeros(5, 2, 2), ["(5, 2, 2)"]),
        (torch.zeros(3, 1, 1), torch.zeros(5), torch.zeros(5), ["(3, 1, 1)"]),
        (torch.zeros(3), torch.zeros(5, 1, 1), torch.zeros(5), ["(5, 1, 1)"]),
    ],
)
def test_wrong_shapes_raise_value_error_naming_them(queries, keys, values, shapes):
    with pytest.raises(ValueError) as info:
        nadaraya_watson(queries, keys, values)
    for shape in shapes:
        assert shape in str(info.value)


@pytest.mark.parametrize("bandwidth", [0.0, -1.0, torch.tensor(-0.5)])
def test_non_positive_bandwidth_raises(points, bandwidth):
    queries, keys, values = points
    with pytest.raises(ValueError, match="bandwidth"):
        nadaraya_watson(queries, keys, values, bandwidth=bandwidth)


def test_unknown_kernel_raises(points):
    queries, keys, values = points
    with pytest.raises(ValueError, match="kernel"):
        nadaraya_watson(queries, keys, values, kernel="triangle")


def test_non_tensor_input_raises_type_error():
    with pytest.raises(TypeError, match="queries"):
        nadaraya_watson([1.0, 2.0], torch.zeros(2), torch.zeros(2))


# --- other kernels -----------------------------------------------------------------------


def test_kernel_scores_values():
    u = torch.tensor([0.0, 0.5, 1.0, 1.5])
    torch.testing.assert_close(kernel_scores(u, "gaussian"), torch.exp(-0.5 * u**2))
    torch.testing.assert_close(kernel_scores(u, "boxcar"), torch.tensor([1.0, 1.0, 1.0, 0.0]))
    torch.testing.assert_close(kernel_scores(u, "epanechnikov"),
                               torch.tensor([1.0, 0.75, 0.0, 0.0]))


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_kernel_gives_rows_summing_to_one(points, kernel):
    queries, keys, values = points
    predictions, weights = nadaraya_watson(queries, keys, values, bandwidth=0.8, kernel=kernel)
    assert torch.all(weights >= 0)
    torch.testing.assert_close(weights.sum(dim=1), torch.ones(13))
    torch.testing.assert_close(predictions, weights @ values)


def test_boxcar_is_the_mean_of_the_keys_inside_the_window():
    keys = torch.tensor([0.0, 0.5, 1.0, 3.0])
    values = torch.tensor([1.0, 2.0, 3.0, 10.0])
    predictions, weights = nadaraya_watson(torch.tensor([0.4]), keys, values, bandwidth=1.0,
                                           kernel="boxcar")
    torch.testing.assert_close(weights, torch.tensor([[1 / 3, 1 / 3, 1 / 3, 0.0]]))
    torch.testing.assert_close(predictions, torch.tensor([2.0]))


def test_compact_kernels_give_exact_zeros_outside_the_window(points):
    queries, keys, values = points
    for kernel in ("boxcar", "epanechnikov"):
        weights = attention_weights(queries, keys, 0.5, kernel)
        u = scaled_distances(queries, keys, 0.5)
        covered = (u < 1).any(dim=1)  # queries with at least one key inside the window
        assert covered.sum() >= 10
        assert torch.all(weights[covered][u[covered] >= 1] == 0)
        assert torch.all(weights[covered][u[covered] < 1] > 0)


@pytest.mark.parametrize("kernel", ["boxcar", "epanechnikov"])
def test_compact_kernel_with_no_key_in_reach_falls_back_to_nearest(kernel):
    keys = torch.tensor([0.0, 1.0, 2.0])
    _, weights = nadaraya_watson(torch.tensor([10.0]), keys, torch.zeros(3), bandwidth=0.5,
                                 kernel=kernel)
    torch.testing.assert_close(weights, torch.tensor([[0.0, 0.0, 1.0]]))


def test_squared_distances_are_exact_for_close_points():
    q = torch.tensor([4.0, 4.0 + 1e-3])
    d2 = squared_distances(q, q)
    assert d2[0, 0] == 0 and d2[1, 1] == 0
    torch.testing.assert_close(d2[0, 1], torch.tensor(1e-6), rtol=1e-3, atol=0)


# --- a property --------------------------------------------------------------------------

finite = st.floats(min_value=-50, max_value=50, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(
    queries=st.lists(finite, min_size=1, max_size=8),
    keys_values=st.lists(st.tuples(finite, finite), min_size=1, max_size=8),
    bandwidth=st.floats(min_value=1e-2, max_value=1e2),
    kernel=st.sampled_from(KERNELS),
)
def test_predictions_are_convex_combinations_of_the_values(queries, keys_values, bandwidth,
                                                           kernel):
    q = torch.tensor(queries, dtype=torch.float64)
    k = torch.tensor([kv[0] for kv in keys_values], dtype=torch.float64)
    v = torch.tensor([kv[1] for kv in keys_values], dtype=torch.float64)
    predictions, weights = nadaraya_watson(q, k, v, bandwidth=bandwidth, kernel=kernel)
    assert weights.shape == (len(queries), len(keys_values))
    assert torch.all(weights >= 0)
    torch.testing.assert_close(weights.sum(dim=1), torch.ones(len(queries), dtype=torch.float64))
    # A weighted average never leaves the range of what it averages.
    assert torch.all(predictions >= v.min() - 1e-9) and torch.all(predictions <= v.max() + 1e-9)
    # Shifting queries and keys together changes nothing: only distances matter.
    shifted = nadaraya_watson(q + 3.0, k + 3.0, v, bandwidth=bandwidth, kernel=kernel)[1]
    torch.testing.assert_close(shifted, weights, atol=1e-6, rtol=1e-6)


# --- bandwidth selection and the learnable model -----------------------------------------


def test_leave_one_out_prefers_a_moderate_bandwidth():
    data = make_regression_data(n_train=60, seed=3)
    tiny, good, huge = (leave_one_out_mse(data.x_train, data.y_train, h) for h in (0.01, 0.3, 50))
    assert good < tiny and good < huge
    chosen = choose_bandwidth(data.x_train, data.y_train, [0.01, 0.3, 50])
    assert chosen == 0.3


def test_leave_one_out_never_uses_the_point_itself():
    x = torch.tensor([0.0, 1.0, 2.0])
    y = torch.tensor([0.0, 6.0, 0.0])
    # With a tiny bandwidth each point is predicted by its nearest other point(s).
    expected = ((0 - 6) ** 2 + (6 - 0) ** 2 + (0 - 6) ** 2) / 3
    assert math.isclose(leave_one_out_mse(x, y, 1e-2), expected, rel_tol=1e-6)


def test_leave_one_out_with_compact_kernel_and_no_neighbour_is_nan():
    x = torch.tensor([0.0, 0.1, 5.0])
    assert math.isnan(leave_one_out_mse(x, torch.zeros(3), 0.5, kernel="boxcar"))
    assert choose_bandwidth(x, torch.zeros(3), [0.5, 10.0], kernel="boxcar") == 10.0
    with pytest.raises(ValueError, match="no neighbour"):
        choose_bandwidth(x, torch.zeros(3), [0.5], kernel="epanechnikov")


def test_choose_bandwidth_needs_candidates():
    with pytest.raises(ValueError, match="candidates"):
        choose_bandwidth(torch.zeros(3), torch.zeros(3), [])


def test_module_matches_the_function(points):
    queries, keys, values = points
    model = NWKernelRegression(init_bandwidth=0.6)
    torch.testing.assert_close(model.bandwidth, torch.tensor(0.6))
    predictions = model(queries, keys, values)
    expected, weights = nadaraya_watson(queries, keys, values, bandwidth=0.6)
    torch.testing.assert_close(predictions, expected)
    torch.testing.assert_close(model.attention_weights, weights)


def test_exclude_self_puts_zero_on_the_diagonal(points):
    _, keys, values = points
    model = NWKernelRegression()
    model(keys, keys, values, exclude_self=True)
    assert torch.all(model.attention_weights.diagonal() == 0)
    torch.testing.assert_close(model.attention_weights.sum(dim=1), torch.ones(20))
    with pytest.raises(ValueError, match=r"\(13,\).*\(20,\)"):
        model(torch.zeros(13), keys, values, exclude_self=True)


def test_init_bandwidth_must_be_positive():
    with pytest.raises(ValueError, match="init_bandwidth"):
        NWKernelRegression(init_bandwidth=0.0)


def test_training_lowers_the_loss_and_the_held_out_error():
    data = make_regression_data(seed=0)
    model = NWKernelRegression(init_bandwidth=1.0)

    def loss_fn(m, batch):
        x, y = batch
        return torch.mean((m(x, x, y, exclude_self=True) - y) ** 2)

    with torch.no_grad():
        before = torch.mean((model(data.x_test, data.x_train, data.y_train) - data.y_test) ** 2)
    history = train(model, loss_fn, [(data.x_train, data.y_train)], epochs=100, lr=0.05,
                    device="cpu", progress=False)
    assert len(history) == 100
    assert history[-1] < 0.8 * history[0]
    assert model.bandwidth.item() < 1.0
    with torch.no_grad():
        after = torch.mean((model(data.x_test, data.x_train, data.y_train) - data.y_test) ** 2)
    assert after < before
    assert model.log_bandwidth.grad is not None


# --- the Gaussian score as a dot product plus biases --------------------------------------


@pytest.mark.parametrize("d", [1, 3, 16])
def test_gaussian_score_parts_add_up_to_the_score(d):
    g = torch.Generator().manual_seed(d)
    queries = torch.randn(5, d, generator=g, dtype=torch.float64)
    keys = torch.randn(7, d, generator=g, dtype=torch.float64)
    h = 0.7
    parts = gaussian_score_parts(queries, keys, h)
    assert parts.dot.shape == (5, 7)
    assert parts.key_bias.shape == (7,) and parts.query_term.shape == (5,)
    expected = -((queries[:, None] - keys[None]) ** 2).sum(-1) / (2 * h**2)
    torch.testing.assert_close(gaussian_scores(queries, keys, h), expected)
    total = parts.dot + parts.key_bias[None, :] + parts.query_term[:, None]
    torch.testing.assert_close(total, expected)
    torch.testing.assert_close(parts.dot, queries @ keys.T / h**2)


def test_softmax_of_dot_plus_key_bias_is_the_gaussian_weights(points):
    queries, keys, _ = points
    parts = gaussian_score_parts(queries, keys, 0.8)
    weights = torch.softmax(parts.dot + parts.key_bias, dim=-1)
    torch.testing.assert_close(weights, attention_weights(queries, keys, 0.8))
    # without the key bias it is a different attention (keys differ in norm)
    assert not torch.allclose(torch.softmax(parts.dot, dim=-1), weights, atol=1e-3)


def test_keys_of_equal_norm_make_gaussian_attention_pure_dot_product():
    g = torch.Generator().manual_seed(2)
    keys = torch.nn.functional.normalize(torch.randn(9, 4, generator=g), dim=-1)
    queries = torch.randn(3, 4, generator=g)
    parts = gaussian_score_parts(queries, keys, 1.5)
    torch.testing.assert_close(parts.key_bias, torch.full((9,), -0.5 / 1.5**2))
    torch.testing.assert_close(torch.softmax(queries @ keys.T / 1.5**2, dim=-1),
                               attention_weights(queries, keys, 1.5))


def test_gaussian_score_parts_check_their_inputs():
    with pytest.raises(ValueError, match="bandwidth"):
        gaussian_score_parts(torch.zeros(2), torch.zeros(3), 0.0)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 2\)"):
        gaussian_score_parts(torch.zeros(2, 3), torch.zeros(4, 2))


# --- learning the bandwidth and comparing the poolings -----------------------------------


def test_learn_bandwidth_records_every_step_and_finds_the_leave_one_out_minimum():
    data = make_regression_data(seed=0)
    fit = learn_bandwidth(data.x_train, data.y_train, steps=200,
                          validation=(data.x_test, data.y_test), progress=False)
    assert len(fit.losses) == len(fit.bandwidths) == len(fit.validation) == 200
    assert fit.bandwidths[0] == pytest.approx(1.0)
    assert fit.losses[-1] < 0.8 * fit.losses[0]
    assert fit.validation[-1] < fit.validation[0]
    grid = [float(h) for h in torch.logspace(-1.7, 1.0, 40)]
    best = choose_bandwidth(data.x_train, data.y_train, grid)
    assert fit.model.bandwidth.item() == pytest.approx(best, rel=0.1)
    # the loss is the leave-one-out error at the bandwidth of that step
    h = fit.bandwidths[-1]
    assert fit.losses[-1] == pytest.approx(
        leave_one_out_mse(data.x_train, data.y_train, h), rel=1e-4)
    assert learn_bandwidth(data.x_train, data.y_train, steps=3,
                           progress=False).validation == []


def test_pooling_predictions_holds_every_pooling():
    data = make_regression_data(n_train=30, n_test=20, seed=4)
    grid = [0.05, 0.1, 0.2, 0.4, 0.8, 1.6]
    results = pooling_predictions(data.x_train, data.y_train, data.x_test, grid,
                                  fixed_bandwidth=0.4, steps=50)
    assert list(results) == [
        "average pooling", "Gaussian, h = 0.4", "Gaussian, h by leave-one-out",
        "boxcar, h by leave-one-out", "Epanechnikov, h by leave-one-out",
        "Gaussian, h learned",
    ]
    for predictions, _ in results.values():
        assert predictions.shape == (20,)
    mean, h = results["average pooling"]
    assert h is None
    torch.testing.assert_close(mean, data.y_train.mean().expand(20))
    torch.testing.assert_close(results["Gaussian, h = 0.4"][0],
                               nadaraya_watson(data.x_test, data.x_train, data.y_train, 0.4)[0])
    h = results["boxcar, h by leave-one-out"][1]
    assert h == choose_bandwidth(data.x_train, data.y_train, grid, "boxcar")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_runs_on_cuda(points):
    queries, keys, values = (t.cuda() for t in points)
    predictions, weights = nadaraya_watson(queries, keys, values, bandwidth=0.5)
    assert predictions.is_cuda and weights.is_cuda
    expected, _ = nadaraya_watson(*points, bandwidth=0.5)
    torch.testing.assert_close(predictions.cpu(), expected)
    model = NWKernelRegression().cuda()
    assert model(queries, keys, values).is_cuda
    assert model(keys, keys, values, exclude_self=True).is_cuda
    h_cpu = leave_one_out_mse(points[1], points[2], 0.5)
    assert math.isclose(leave_one_out_mse(keys, values, 0.5), h_cpu, rel_tol=1e-4)
    assert choose_bandwidth(keys, values, [0.1, 0.5, 2.0]) == choose_bandwidth(
        points[1], points[2], [0.1, 0.5, 2.0])
    parts = gaussian_score_parts(queries, keys, 0.5)
    assert parts.dot.is_cuda and parts.key_bias.is_cuda
    fit = learn_bandwidth(keys, values, steps=20, validation=(queries, queries),
                          progress=False)
    assert next(fit.model.parameters()).is_cuda and len(fit.validation) == 20
    cpu_fit = learn_bandwidth(points[1], points[2], steps=20, progress=False)
    assert math.isclose(fit.bandwidths[-1], cpu_fit.bandwidths[-1], rel_tol=1e-3)
