"""The shared helpers: device choice, plotting, the training loop, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from torch import nn

from attention_course import plotting
from attention_course.cli import collect_info, main
from attention_course.device import ENV_VAR, get_device
from attention_course.training import to_device, train, train_with_validation

matplotlib.use("Agg")


def test_device_defaults_to_an_available_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    device = get_device()
    expected = "cuda" if torch.cuda.is_available() else device.type
    assert device.type == expected
    torch.zeros(1, device=device)


def test_device_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "cpu")
    assert get_device() == torch.device("cpu")
    if not torch.cuda.is_available():
        monkeypatch.setenv(ENV_VAR, "cuda")
        with pytest.raises(ValueError, match="CUDA is not available"):
            get_device()


@pytest.mark.gpu
def test_device_picks_cuda_when_present(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert get_device().type == "cuda"


@pytest.mark.parametrize(
    ("shape", "panels"), [((4, 5), 1), ((3, 4, 5), 3), ((2, 3, 4, 5), 6)]
)
def test_heatmaps_draw_one_panel_per_map(shape: tuple[int, ...], panels: int) -> None:
    fig = plotting.show_heatmaps(torch.rand(shape), titles=[f"p{i}" for i in range(panels)])
    images = [ax for ax in fig.axes if ax.images]
    assert len(images) == panels
    assert images[-1].images[0].get_array().shape == shape[-2:]
    matplotlib.pyplot.close(fig)


def test_heatmap_labels_and_errors() -> None:
    weights = torch.softmax(torch.randn(3, 4), dim=-1)
    fig = plotting.show_heatmaps(weights, xlabels=list("abcd"), ylabels=list("xyz"))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == list("abcd")
    assert [t.get_text() for t in ax.get_yticklabels()] == list("xyz")
    np.testing.assert_allclose(ax.images[0].get_array(), weights.numpy(), rtol=1e-6)
    matplotlib.pyplot.close(fig)
    with pytest.raises(ValueError, match=r"xlabels has 3 entries but weights have Nk=4"):
        plotting.show_heatmaps(weights, xlabels=list("abc"))
    with pytest.raises(ValueError, match=r"got shape \(4,\)"):
        plotting.show_heatmaps(torch.rand(4))


def test_cjk_labels_fall_back_to_positions_without_a_font(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(plotting.labels, "cjk_font_name", lambda: None)
    assert plotting.safe_labels(["我", "想", "eat"]) == ["#0", "#1", "#2"]
    assert plotting.safe_labels(["Tom", "chases"]) == ["Tom", "chases"]
    assert plotting.safe_text("汤姆", "Tom") == "Tom"


def test_cjk_labels_kept_with_a_font(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plotting.labels, "cjk_font_name", lambda: "Noto Sans CJK SC")
    assert plotting.safe_labels(["我", "想"]) == ["我", "想"]


def test_plot_losses_accepts_a_list_or_a_dict() -> None:
    fig = plotting.plot_losses({"a": [3, 2, 1, 0.5], "b": [2, 1]}, smooth=2)
    assert len(fig.axes[0].get_legend().get_texts()) == 2
    matplotlib.pyplot.close(fig)


def test_plot_curves_draws_every_run_and_names_each_condition() -> None:
    runs = {"a": [([0, 1, 2], [3, 2, 1]), ([0, 1, 2], [3, 2.5, 1.5])],
            "b": [([0, 2], [1, 0.1])]}
    fig = plotting.plot_curves(runs, log=True, title="t")
    ax = fig.axes[0]
    assert len(ax.lines) == 3 and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]
    assert {t.get_text() for t in ax.texts} == {"a", "b"}  # named at their ends
    a_lines, b_line = ax.lines[:2], ax.lines[2]
    assert a_lines[0].get_linestyle() != b_line.get_linestyle()
    assert a_lines[0].get_marker() != b_line.get_marker()
    matplotlib.pyplot.close(fig)
    with pytest.raises(ValueError, match="at least one"):
        plotting.plot_curves({"a": []})
    with pytest.raises(ValueError, match="run 0 of 'a'"):
        plotting.plot_curves({"a": [([0, 1], [1.0])]})


def test_train_lowers_the_loss_and_returns_every_step() -> None:
    torch.manual_seed(0)
    x = torch.randn(64, 3)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3
    batches = [(x[i : i + 16], y[i : i + 16]) for i in range(0, 64, 16)]
    model = nn.Linear(3, 1)
    history = train(
        model,
        lambda m, b: ((m(b[0]).squeeze(-1) - b[1]) ** 2).mean(),
        batches,
        epochs=30,
        lr=0.05,
        device="cpu",
        progress=False,
    )
    assert len(history) == 30 * len(batches)
    assert history[-1] < 0.01 * history[0]
    assert not model.training


def test_train_stops_at_max_steps_and_takes_a_data_factory() -> None:
    model = nn.Linear(2, 1)
    calls = []

    def data():
        calls.append(1)
        return [torch.randn(4, 2) for _ in range(5)]

    history = train(model, lambda m, b: m(b).pow(2).mean(), data, epochs=10, max_steps=7,
                    device="cpu", progress=False)
    assert len(history) == 7 and len(calls) == 2


def test_train_rejects_bad_arguments_and_divergence() -> None:
    model = nn.Linear(2, 1)
    with pytest.raises(ValueError, match="epochs"):
        train(model, lambda m, b: m(b).sum(), [torch.ones(1, 2)], epochs=0, progress=False)
    with pytest.raises(FloatingPointError, match="step 0"):
        train(model, lambda m, b: m(b).sum() * float("nan"), [torch.ones(1, 2)],
              device="cpu", progress=False)


def test_train_with_validation_records_curves_at_the_right_steps() -> None:
    torch.manual_seed(0)
    x = torch.randn(48, 3)
    y = x @ torch.tensor([1.0, -2.0, 0.5])
    batches = [(x[i : i + 16], y[i : i + 16]) for i in range(0, 48, 16)]  # 3 a pass
    model = nn.Linear(3, 1)
    modes = []

    def validate(m: nn.Module) -> dict[str, float]:
        modes.append(m.training)
        return {"mse": ((m(x).squeeze(-1) - y) ** 2).mean().item(), "one": 1.0}

    curves = train_with_validation(
        model, lambda m, b: ((m(b[0]).squeeze(-1) - b[1]) ** 2).mean(), batches,
        validate, max_steps=10, eval_every=4, lr=0.05, device="cpu",
        progress=False)
    assert len(curves.train) == 10  # more steps than one pass over the data
    assert curves.steps == [0, 4, 8, 10] and curves.val["one"] == [1.0] * 4
    assert curves.val["mse"][-1] < 0.5 * curves.val["mse"][0]
    assert not any(modes) and not model.training
    with pytest.raises(ValueError, match="eval_every"):
        train_with_validation(model, lambda m, b: m(b).sum(), batches, validate,
                              max_steps=3, eval_every=0, progress=False)
    with pytest.raises(ValueError, match="no batch"):
        train_with_validation(model, lambda m, b: m(b).sum(), [], validate,
                              max_steps=3, eval_every=1, device="cpu",
                              progress=False)


def test_to_device_moves_nested_batches() -> None:
    batch = {"a": (torch.ones(1), [torch.zeros(2)]), "b": 3}
    moved = to_device(batch, "cpu")
    assert moved["b"] == 3 and isinstance(moved["a"], tuple)
    assert moved["a"][1][0].device.type == "cpu"


def test_cli_info_reports_versions_and_device(capsys: pytest.CaptureFixture[str]) -> None:
    info = collect_info()
    assert info["torch"] == torch.__version__
    assert info["device"] == str(get_device())
    assert main(["info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["package"] == info["package"]


def test_console_script_runs() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "attention_course.cli", "info"],
        capture_output=True, text=True, check=True,
    )
    assert "torch" in result.stdout and "device" in result.stdout


def test_plot_mean_std_draws_a_mean_and_a_sample_std_band_per_group() -> None:
    x = [0, 10, 20]
    runs = {"a": torch.tensor([[0.0, 1.0, 2.0], [2.0, 3.0, 4.0]]),
            "b": np.ones((3, 3))}
    fig = plotting.plot_mean_std(runs, x=x, ylabel="accuracy", title="t")
    ax = fig.axes[0]
    means = [line for line in ax.lines if line.get_label() in ("a (2 runs)", "b (3 runs)")]
    np.testing.assert_allclose(means[0].get_ydata(), [1.0, 2.0, 3.0])
    assert means[0].get_linestyle() != means[1].get_linestyle()
    assert means[0].get_marker() != means[1].get_marker()
    assert len(ax.collections) == 2  # one band per group
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    # the sample standard deviation of (0, 2) is sqrt(2)
    np.testing.assert_allclose([band.min(), band.max()],
                               [1 - 2**0.5, 3 + 2**0.5], rtol=1e-6)
    fig2, axes = plt.subplots(1, 2)
    assert plotting.plot_mean_std(runs, x=x, ax=axes[1]) is fig2
    with pytest.raises(ValueError, match="x has 3 points but curves"):
        plotting.plot_mean_std({"c": np.ones((2, 4))}, x=x)
    plt.close("all")

def test_show_channels_draws_a_panel_per_channel_and_the_maps() -> None:
    images = torch.rand(2, 3, 6, 7)
    boxes = torch.tensor([[0, 0, 2, 2], [1, 1, 4, 5]])
    maps = torch.rand(2, 6, 7)
    fig = plotting.show_channels(images, boxes=boxes, maps=maps, map_name="m",
                                 row_names=["a", "b"])
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 2 * 4
    np.testing.assert_allclose(panels[1].images[0].get_array(), images[0, 1].numpy())
    np.testing.assert_allclose(panels[7].images[0].get_array(), maps[1].numpy())
    assert panels[7].images[0].get_cmap().name == "viridis"
    assert all(len(ax.patches) == 1 for ax in panels)
    assert [ax.get_title() for ax in panels[:4]] == ["ch 0", "ch 1", "ch 2", "m"]
    matplotlib.pyplot.close(fig)
    fig = plotting.show_channels(images)
    assert len([ax for ax in fig.axes if ax.images]) == 6
    matplotlib.pyplot.close(fig)
    with pytest.raises(ValueError, match=r"maps must be \(N, H, W\)"):
        plotting.show_channels(images, maps=torch.rand(2, 7, 6))
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        plotting.show_channels(torch.rand(3, 6, 7))
