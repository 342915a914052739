"""Tests for the regression-fit and run-spread figures of attention_course.plotting."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attention_course.data import make_regression_data  # noqa: E402
from attention_course.plotting import (  # noqa: E402
    FIT_STYLES,
    plot_query_weights,
    plot_regression_fit,
    plot_runs,
)


@pytest.fixture
def data():
    return make_regression_data(n_train=12, n_test=9, seed=1)


def test_regression_fit_draws_the_curve_points_and_each_prediction(data) -> None:
    fig, ax = plt.subplots()
    preds = {"one": torch.zeros(9), "two": torch.ones(9, requires_grad=True)}
    plot_regression_fit(ax, data, preds, title="t", held_out=True)
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["true curve", "one", "two"]
    styles = [(line.get_color(), line.get_linestyle()) for line in ax.get_lines()[1:]]
    assert styles == [(c, s) for c, s in FIT_STYLES[:2]]
    assert len(ax.collections) == 2  # training and held-out pairs
    assert ax.get_title() == "t" and ax.get_legend() is not None
    plt.close(fig)


def test_regression_fit_takes_one_tensor_or_none(data) -> None:
    fig, (a, b) = plt.subplots(1, 2)
    plot_regression_fit(a, data, torch.zeros(9), legend=False)
    assert [line.get_label() for line in a.get_lines()] == ["true curve", "prediction"]
    assert a.get_legend() is None
    plot_regression_fit(b, data)
    assert len(b.get_lines()) == 1 and len(b.collections) == 1
    plt.close(fig)


def test_regression_fit_rejects_wrong_predictions(data) -> None:
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match=r"shape \(9,\).*\(8,\)"):
        plot_regression_fit(ax, data, torch.zeros(8))
    too_many = {str(i): torch.zeros(9) for i in range(len(FIT_STYLES) + 1)}
    with pytest.raises(ValueError, match="at most"):
        plot_regression_fit(ax, data, too_many)
    plt.close(fig)


def test_query_weights_are_bars_at_the_keys() -> None:
    fig, ax = plt.subplots()
    keys, weights = torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0.2, 0.5, 0.3])
    plot_query_weights(ax, keys, weights, 1.2)
    heights = [patch.get_height() for patch in ax.patches]
    assert heights == pytest.approx([0.2, 0.5, 0.3])
    assert ax.get_lines()[0].get_xdata()[0] == 1.2
    with pytest.raises(ValueError, match=r"\(3,\).*\(2,\)"):
        plot_query_weights(ax, keys, weights[:2], 1.0)
    plt.close(fig)


def test_runs_show_every_run_and_the_mean() -> None:
    runs = {"a": [1.0, 2.0, 3.0], "b": [0.5, 0.7]}
    fig = plot_runs(runs, xlabel="MSE", reference=0.25, reference_label="floor")
    ax = fig.axes[0]
    dots = [c for c in ax.collections if c.get_offsets().shape[0] in (2, 3)]
    assert sorted(d.get_offsets().shape[0] for d in dots) == [2, 3]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    assert ax.get_xlabel() == "MSE"
    plt.close(fig)
    with pytest.raises(ValueError, match="no runs"):
        plot_runs({"a": []}, xlabel="x")
    with pytest.raises(ValueError, match="at least one"):
        plot_runs({}, xlabel="x")
