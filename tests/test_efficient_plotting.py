"""The figures of chapter 10: labelled lines against a size, the roofline, the block
schedule."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest

from attention_course import plotting
from attention_course.efficient import block_schedule
from attention_course.masking import causal_mask


def test_labelled_lines_label_each_line_at_its_last_point():
    fig, ax = plt.subplots()
    plotting.plot_labelled_lines(ax, [256, 512, 1024], {"a": [1.0, 2.0, 4.0],
                                                        "b": [1.0, None, float("nan")]},
                                 xlabel="N", ylabel="seconds")
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["a", "b"]
    np.testing.assert_array_equal(lines[1].get_xdata(), [256])  # missing points left out
    assert {line.get_marker() for line in lines} == {"o", "s"}  # not told apart by colour only
    labels = {t.get_text(): t.xy for t in ax.texts}
    assert labels == {"a": (1024.0, 4.0), "b": (256.0, 1.0)}
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    plt.close(fig)


def test_labelled_lines_refuse_mismatched_series():
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="series 'a' has 2 values for 3 x values"):
        plotting.plot_labelled_lines(ax, [1, 2, 3], {"a": [1, 2]}, xlabel="", ylabel="")
    with pytest.raises(ValueError, match="at most 6 series"):
        plotting.plot_labelled_lines(ax, [1], {str(i): [1] for i in range(7)}, xlabel="",
                                     ylabel="")
    plt.close(fig)


def test_roofline_bends_at_the_ridge_point():
    fig, ax = plt.subplots()
    plotting.plot_roofline(ax, 300e9, 10e9, {"explicit": (16, 50e9), "fused": (64, 250e9)})
    roof = ax.get_lines()[0]
    x, y = roof.get_xdata(), roof.get_ydata()
    np.testing.assert_allclose(y, np.minimum(300, 10 * x))  # GFLOP/s
    assert x.min() < 16 and x.max() > 64
    assert any("ridge 30" in t.get_text() for t in ax.texts)
    assert {"explicit", "fused"} <= {t.get_text() for t in ax.texts}
    with pytest.raises(ValueError, match="must be positive"):
        plotting.plot_roofline(ax, 0, 1, {})
    plt.close(fig)


def test_block_schedule_shades_skipped_masked_and_used_scores():
    schedule = block_schedule(6, 6, 4, is_causal=True)
    fig = plotting.show_block_schedule(schedule, 6, 6, causal_mask(6), title="causal")
    ax = fig.axes[0]
    shade = np.asarray(ax.images[0].get_array())
    assert shade[0, 5] == 0  # above the diagonal, in no block: not computed
    assert shade[0, 3] == 1  # in the first block but above the diagonal: computed, masked
    assert shade[5, 0] == 2 and shade[4, 4] == 2  # computed and used
    assert len(ax.patches) == len(schedule) == 2
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "not computed", "computed, masked", "computed, used"]
    plt.close(fig)
    with pytest.raises(ValueError, match=r"allowed has shape \(5, 5\)"):
        plotting.show_block_schedule(schedule, 6, 6, causal_mask(5))


def test_labels_of_lines_ending_together_do_not_overlap():
    fig, ax = plt.subplots(figsize=(5, 4))
    plotting.plot_labelled_lines(ax, [1, 2], {"a": [1.0, 10.0], "b": [1.0, 10.2],
                                              "c": [1.0, 10.1]}, xlabel="", ylabel="")
    fig.canvas.draw()
    boxes = sorted((t.get_window_extent() for t in ax.texts), key=lambda b: b.y0)
    for lower, upper in zip(boxes, boxes[1:], strict=False):
        assert upper.y0 >= lower.y1 - 1  # stacked, not on top of each other
    plt.close(fig)


def test_block_schedule_legend_can_be_left_out():
    fig = plotting.show_block_schedule(block_schedule(4, 4, 2), 4, 4, legend=False)
    assert fig.axes[0].get_legend() is None
    plt.close(fig)
