"""Tests for attention_course.scoring: every score against its formula, soft vs. hard."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_course.experiments.scoring import (
    compare_on_matching,
    make_matching_task,
    matching_loss,
    random_rotation,
    train_matching,
)
from attention_course.scoring import (
    AdditiveScore,
    BilinearScore,
    MLPScore,
    cosine_score,
    dot_score,
    gumbel_softmax_weights,
    hard_attention_weights,
    sample_hard_attention,
    scaled_dot_score,
)


def _qk(b=2, nq=3, nk=4, dq=5, dk=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, nq, dq, generator=g), torch.randn(b, nk, dk, generator=g)


def _pairwise(q, k, fn):
    """Apply ``fn(q_i, k_j)`` to every pair, the slow and obvious way: ``(B, Nq, Nk)``."""
    b, nq, nk = q.shape[0], q.shape[1], k.shape[1]
    out = torch.empty(b, nq, nk)
    for n in range(b):
        for i in range(nq):
            for j in range(nk):
                out[n, i, j] = fn(q[n, i], k[n, j])
    return out


def test_dot_score_formula():
    q, k = _qk()
    expected = _pairwise(q, k, lambda a, c: (a * c).sum())
    torch.testing.assert_close(dot_score(q, k), expected)


def test_scaled_dot_score_formula():
    q, k = _qk(dq=16, dk=16, seed=1)
    expected = _pairwise(q, k, lambda a, c: (a * c).sum() / 4.0)
    torch.testing.assert_close(scaled_dot_score(q, k), expected)


def test_cosine_score_formula_and_range():
    q, k = _qk(seed=2)
    expected = _pairwise(q, k, lambda a, c: (a @ c) / (a.norm() * c.norm()))
    scores = cosine_score(q, k)
    torch.testing.assert_close(scores, expected)
    assert scores.abs().max() <= 1 + 1e-6
    # Lengths do not matter, only directions; a zero vector scores 0 (no NaN).
    torch.testing.assert_close(cosine_score(3 * q, 0.5 * k), scores)
    zero = cosine_score(torch.zeros(1, 1, 5), k[:1])
    assert torch.equal(zero, torch.zeros(1, 1, 4))


@pytest.mark.parametrize("dq,dk", [(5, 5), (3, 7)])
def test_additive_score_formula(dq, dk):
    q, k = _qk(dq=dq, dk=dk, seed=3)
    torch.manual_seed(0)
    score = AdditiveScore(dq, dk, hidden_dim=6)
    w_q, w_k, w_v = score.W_q.weight, score.W_k.weight, score.w_v.weight[0]
    assert w_q.shape == (6, dq) and w_k.shape == (6, dk) and w_v.shape == (6,)
    expected = _pairwise(q, k, lambda a, c: w_v @ torch.tanh(w_q @ a + w_k @ c))
    torch.testing.assert_close(score(q, k), expected.detach())


@pytest.mark.parametrize("dq,dk", [(5, 5), (3, 7)])
def test_bilinear_score_formula(dq, dk):
    q, k = _qk(dq=dq, dk=dk, seed=4)
    torch.manual_seed(1)
    score = BilinearScore(dq, dk)
    assert score.W.shape == (dq, dk)
    expected = _pairwise(q, k, lambda a, c: a @ score.W @ c)
    torch.testing.assert_close(score(q, k), expected.detach())


def test_bilinear_score_is_asymmetric_and_dot_is_its_identity_case():
    x, _ = _qk(b=1, nq=4, dq=5, seed=5)
    torch.manual_seed(2)
    score = BilinearScore(5, 5)
    s = score(x, x)[0]
    assert not torch.allclose(s, s.T)  # a(x_i, x_j) != a(x_j, x_i)
    with torch.no_grad():
        score.W.copy_(torch.eye(5))
    torch.testing.assert_close(score(x, x), dot_score(x, x))


@pytest.mark.parametrize("dq,dk", [(5, 5), (3, 7)])
def test_mlp_score_formula(dq, dk):
    q, k = _qk(dq=dq, dk=dk, seed=6)
    torch.manual_seed(3)
    score = MLPScore(dq, dk, hidden_dim=8)
    first, last = score.net[0], score.net[2]

    def formula(a, c):
        hidden = torch.relu(first.weight @ torch.cat([a, c]) + first.bias)
        return last.weight[0] @ hidden + last.bias[0]

    torch.testing.assert_close(score(q, k), _pairwise(q, k, formula).detach())


@pytest.mark.parametrize("module", [AdditiveScore(3, 7, 4), BilinearScore(3, 7), MLPScore(3, 7, 4)])
def test_learned_scores_have_gradients_and_check_sizes(module):
    q, k = _qk(dq=3, dk=7, seed=7)
    module(q, k).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters())
    with pytest.raises(ValueError, match=r"q \(2, 3, 7\) and k \(2, 3, 3\)"):
        module(k[:, :3], q[:, :4])


def test_bad_shapes_raise_value_errors_naming_shapes():
    q, k = _qk(dq=5, dk=6)
    with pytest.raises(ValueError, match=r"q \(2, 3, 5\) and k \(2, 4, 6\)"):
        dot_score(q, k)
    with pytest.raises(ValueError, match=r"batch"):
        scaled_dot_score(q, k[:1, :, :5])
    with pytest.raises(ValueError, match=r"\(3, 5\)"):
        cosine_score(q[0], k[0, :, :5])


@settings(max_examples=30, deadline=None)
@given(d=st.integers(1, 64), seed=st.integers(0, 10_000))
def test_property_scaled_dot_is_dot_over_sqrt_d(d, seed):
    q, k = _qk(dq=d, dk=d, seed=seed)
    torch.testing.assert_close(scaled_dot_score(q, k) * math.sqrt(d), dot_score(q, k))


def test_scaling_keeps_variance_near_one_for_large_d():
    q, k = _qk(b=1, nq=200, nk=200, dq=256, dk=256, seed=8)
    raw, scaled = dot_score(q, k), scaled_dot_score(q, k)
    assert 200 < raw.var().item() < 310  # Var(q . k) = d = 256
    assert 0.8 < scaled.var().item() < 1.2


# ---------------------------------------------------------------- soft vs. hard


def test_hard_attention_is_one_hot_and_blocks_gradients():
    scores = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 1.0]], requires_grad=True)
    weights = hard_attention_weights(scores)
    assert torch.equal(weights, torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]))
    assert not weights.requires_grad  # argmax cuts the graph: no gradient reaches scores


def test_gumbel_softmax_is_a_distribution_and_reproducible():
    scores = torch.randn(4, 6, generator=torch.Generator().manual_seed(9))
    a = gumbel_softmax_weights(scores, 0.5, generator=torch.Generator().manual_seed(1))
    b = gumbel_softmax_weights(scores, 0.5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and torch.all(a >= 0)
    torch.testing.assert_close(a.sum(-1), torch.ones(4))


def test_gumbel_softmax_low_temperature_is_nearly_one_hot_and_samples_softmax():
    scores = torch.tensor([1.0, 0.0, -1.0]).repeat(20_000, 1)
    g = torch.Generator().manual_seed(10)
    samples = gumbel_softmax_weights(scores, temperature=0.01, generator=g)
    assert samples.max(-1).values.mean() > 0.99
    frequencies = samples.argmax(-1).bincount(minlength=3) / 20_000
    torch.testing.assert_close(frequencies, torch.softmax(scores[0], -1), atol=0.015, rtol=0)


def test_gumbel_softmax_hard_is_one_hot_with_soft_gradient():
    scores = torch.randn(3, 5, generator=torch.Generator().manual_seed(11), requires_grad=True)
    weights = gumbel_softmax_weights(scores, 1.0, hard=True, generator=torch.Generator())
    assert torch.equal(weights.detach().sum(-1), torch.ones(3))
    assert set(weights.detach().unique().tolist()) <= {0.0, 1.0}
    (weights * torch.arange(5.0)).sum().backward()
    assert scores.grad is not None and scores.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="temperature"):
        gumbel_softmax_weights(scores, 0.0)


def test_gumbel_softmax_argmax_does_not_depend_on_the_temperature():
    scores = torch.randn(500, 6, generator=torch.Generator().manual_seed(12))
    picks = [
        gumbel_softmax_weights(scores, tau, generator=torch.Generator().manual_seed(3))
        .argmax(-1)
        for tau in (0.05, 1.0, 20.0)
    ]
    assert torch.equal(picks[0], picks[1]) and torch.equal(picks[1], picks[2])


def test_stochastic_hard_attention_draws_values_and_averages_to_soft():
    weights = torch.softmax(torch.tensor([[0.5, 0.0, 0.2], [3.0, -1.0, 0.0]]), -1)
    values = torch.tensor([[1.0, 0.0], [3.0, 1.0], [-2.0, 2.0]])
    draws = sample_hard_attention(weights, values, 40_000, torch.Generator().manual_seed(0))
    assert draws.shape == (40_000, 2, 2)
    # Every draw is one of the values, never a mix.
    is_a_value = (draws[..., None, :] == values).all(-1).any(-1)
    assert is_a_value.all()
    torch.testing.assert_close(draws.mean(0), weights @ values, atol=0.03, rtol=0)
    with pytest.raises(ValueError, match=r"agree on Nk"):
        sample_hard_attention(weights, values[:2], 5)
    with pytest.raises(ValueError, match=r"num_samples"):
        sample_hard_attention(weights, values, 0)


# ------------------------------------------------------- the matching task


def test_random_rotation_is_orthogonal_and_seeded():
    m = random_rotation(6, torch.Generator().manual_seed(0))
    torch.testing.assert_close(m @ m.T, torch.eye(6), atol=1e-5, rtol=0)
    assert torch.equal(m, random_rotation(6, torch.Generator().manual_seed(0)))


def test_matching_task_queries_are_transformed_target_keys():
    transform = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(2)
    q, k, target = make_matching_task(50, 7, transform, noise=0.0, generator=g)
    assert q.shape == (50, 1, 3) and k.shape == (50, 7, 5) and target.shape == (50,)
    expected = k[torch.arange(50), target] @ transform.T
    torch.testing.assert_close(q[:, 0], expected)
    q_noisy, k_same, _ = make_matching_task(
        50, 7, transform, noise=0.5, generator=torch.Generator().manual_seed(2))
    assert torch.equal(k_same, k)
    assert 0.2 < (q_noisy - q).std() < 1.0  # noise of standard deviation 0.5
    with pytest.raises(ValueError, match=r"transform"):
        make_matching_task(5, 3, torch.ones(3))


def test_matching_loss_is_cross_entropy_of_the_weights():
    q, k, target = make_matching_task(20, 4, torch.eye(3), 0.1, torch.Generator())
    weights = torch.softmax(dot_score(q, k)[:, 0], -1)
    expected = -weights[torch.arange(20), target].log().mean()
    torch.testing.assert_close(matching_loss(dot_score, q, k, target), expected)


def test_additive_score_is_odd_without_bias_and_not_with_it():
    q, k = _qk(seed=13)
    torch.manual_seed(4)
    plain, biased = AdditiveScore(5, 5, 8), AdditiveScore(5, 5, 8, bias=True)
    torch.testing.assert_close(plain(-q, -k), -plain(q, k))
    assert not torch.allclose(biased(-q, -k), -biased(q, k))
    assert biased.W_q.bias.shape == (8,) and plain.W_q.bias is None


def test_train_matching_learns_the_rotation_with_a_bilinear_score():
    transform = random_rotation(4, torch.Generator().manual_seed(5))
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    run = train_matching(BilinearScore(4, 4), transform, steps=150, eval_every=50,
                         num_keys=4, num_val=500, generator=torch.Generator().manual_seed(6))
    assert run.step.tolist() == [0, 50, 100, 150]
    assert run.accuracy.shape == run.loss.shape == (4,)
    assert run.accuracy[-1] > 0.8 and run.loss[-1] < run.loss[0]
    assert torch.get_num_threads() == threads  # one thread inside, restored after
    with pytest.raises(ValueError, match=r"eval_every"):
        train_matching(dot_score, transform, steps=100, eval_every=30)


def test_compare_on_matching_gives_every_score_the_same_task():
    makers = {"dot": lambda: dot_score, "scaled dot": lambda: scaled_dot_score}
    runs = compare_on_matching(makers, seeds=[0, 1], dim=4, steps=20, eval_every=10,
                               num_val=300)
    assert [len(r) for r in runs.values()] == [2, 2]
    for a, b in zip(runs["dot"], runs["scaled dot"], strict=True):
        # Same episodes, same ranking: identical accuracy, different loss.
        assert torch.equal(a.accuracy, b.accuracy) and not torch.equal(a.loss, b.loss)
        assert torch.equal(a.transform, b.transform)
    assert not torch.equal(runs["dot"][0].transform, runs["dot"][1].transform)


def test_compare_on_matching_starts_the_learned_scores_at_chance():
    # The initial parameters must not share random numbers with the rotation.
    runs = compare_on_matching({"bilinear": lambda: BilinearScore(6, 6)}, seeds=[0, 1, 2],
                               dim=6, num_keys=4, steps=10, eval_every=10, num_val=2000)
    start = torch.stack([r.accuracy[0] for r in runs["bilinear"]])
    assert start.max() < 0.5, start  # chance is 0.25; sharing gave 0.7 to 0.84
