"""Training with validation curves, timing a training step, and curves over seeds."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest
import torch
from matplotlib.collections import PolyCollection
from torch import nn

from attention_course import plotting
from attention_course.training import (
    evaluate_loss,
    time_train_step,
    train,
    train_with_validation,
)

matplotlib.use("Agg")


def _regression(n_batches: int = 10) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16 * n_batches, 3, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3
    return [(x[i : i + 16], y[i : i + 16]) for i in range(0, len(x), 16)]


def _mse(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return ((model(batch[0]).squeeze(-1) - batch[1]) ** 2).mean()


def test_train_with_validation_equals_train_and_records_every_few_steps() -> None:
    batches = _regression()
    val = _regression(2)
    torch.manual_seed(0)
    plain = nn.Linear(3, 1)
    torch.manual_seed(0)
    watched = nn.Linear(3, 1)
    history = train(plain, _mse, batches, max_steps=7, lr=0.05, device="cpu", progress=False)
    curves = train_with_validation(
        watched, _mse, batches, lambda m: {"val": evaluate_loss(m, _mse, val)},
        max_steps=7, eval_every=3, optimizer=torch.optim.Adam(watched.parameters(), lr=0.05),
        device="cpu", progress=False,
    )
    # evaluating in between changes nothing: same losses, same weights
    assert curves.train == pytest.approx(history)
    torch.testing.assert_close(watched.weight, plain.weight)
    assert curves.steps == [0, 3, 6, 7]
    assert len(curves.val["val"]) == 4
    assert curves.val["val"][-1] == pytest.approx(evaluate_loss(plain, _mse, val))
    assert curves.val["val"][-1] < curves.val["val"][0]


def test_train_with_validation_passes_over_the_data_as_often_as_needed() -> None:
    batches = _regression(3)
    seen = []
    curves = train_with_validation(
        nn.Linear(3, 1), lambda m, b: seen.append(b) or _mse(m, b), batches,
        lambda m: {}, max_steps=8, eval_every=5, device="cpu", progress=False,
    )
    assert len(curves.train) == 8 and curves.steps == [0, 5, 8] and curves.val == {}
    assert [b[0] for b in seen] == [batches[i % 3][0] for i in range(8)]
    with pytest.raises(ValueError, match="eval_every"):
        train_with_validation(nn.Linear(3, 1), _mse, batches, lambda m: {}, max_steps=5,
                              eval_every=0, progress=False)


def test_evaluate_loss_is_the_mean_and_keeps_the_mode() -> None:
    model = nn.Sequential(nn.Linear(3, 1), nn.Dropout(0.5))
    batches = _regression(2)
    model.train()
    value = evaluate_loss(model, _mse, batches)
    assert model.training
    with torch.no_grad():
        model.eval()
        expected = (_mse(model, batches[0]) + _mse(model, batches[1])).item() / 2
    assert value == pytest.approx(expected)
    with pytest.raises(ValueError, match="at least one batch"):
        evaluate_loss(model, _mse, [])


def test_time_train_step_takes_real_steps() -> None:
    model = nn.Linear(3, 1)
    before = model.weight.clone()
    seconds = time_train_step(model, _mse, _regression(1)[0], repeats=2, warmup=1)
    assert 0 < seconds < 5
    assert not torch.equal(before, model.weight)
    with pytest.raises(ValueError, match="repeats"):
        time_train_step(model, _mse, _regression(1)[0], repeats=0)


def test_plot_mean_std_smooths_takes_x_per_curve_and_a_log_axis() -> None:
    fig, axes = matplotlib.pyplot.subplots(1, 2)
    plotting.plot_mean_std({"a": np.ones((2, 10))}, ax=axes[1], smooth=4,
                           legend=False)
    mean = axes[1].get_lines()[-1]  # the runs first, faintly, then the mean
    assert len(mean.get_xdata()) == 7 and mean.get_xdata()[0] == 4
    assert axes[1].get_legend() is None and not axes[0].get_lines()
    plotting.plot_mean_std({"a": np.ones((2, 3)), "b": np.full((1, 2), 2.0)},
                           ax=axes[0], x={"a": [1, 2, 3], "b": [5, 6]},
                           log=True)
    assert list(axes[0].get_lines()[-1].get_xdata()) == [5, 6]
    assert axes[0].get_yscale() == "log"
    labels = [t.get_text() for t in axes[0].get_legend().get_texts()]
    assert labels == ["a (2 runs)", "b"]
    bands = [c for c in axes[0].collections if isinstance(c, PolyCollection)]
    assert all(np.all(band.get_paths()[0].vertices[:, 1] > 0)
               for band in bands)  # clipped above 0 on the log axis
    with pytest.raises(ValueError, match="x has 2 points"):
        plotting.plot_mean_std({"a": [[1.0, 2.0, 3.0]]}, x={"a": [0, 1]})
    matplotlib.pyplot.close("all")


def test_show_alignments_draws_maps_of_different_shapes() -> None:
    a, b = torch.softmax(torch.randn(3, 4), -1), torch.softmax(torch.randn(5, 4), -1)
    fig = plotting.show_alignments(
        [a, b], [list("abcd"), list("abcd")], [list("xyz"), list("vwxyz")], ["one", "two"]
    )
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.images[0].get_array().shape for ax in panels] == [(3, 4), (5, 4)]
    assert [ax.get_title() for ax in panels] == ["one", "two"]
    assert panels[1].images[0].get_clim() == (0.0, 1.0)
    matplotlib.pyplot.close(fig)
    with pytest.raises(ValueError, match="map 1 has shape"):
        plotting.show_alignments([a, b], [list("abcd")] * 2, [list("xyz")] * 2, ["1", "2"])
    with pytest.raises(ValueError, match="as many"):
        plotting.show_alignments([a], [], [], [])
