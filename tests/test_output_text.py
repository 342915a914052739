"""The chapters' printed outputs in the Chinese edition: how a printed text becomes
messages (its numbers as fields) and how a translation is laid out on its columns
(``book/_ext/output_text.py``), and the output catalogs (``scripts/output_catalogs.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
sys.path.insert(0, str(ROOT / "scripts"))

import output_catalogs  # noqa: E402
import output_text  # noqa: E402


@pytest.mark.parametrize("text, message, values", [
    ("held-out MSE of the true curve itself: 0.235",
     "held-out MSE of the true curve itself: {0}", ["0.235"]),
    ("-0.2906 ± 0.0838; lower on 20, within 0.001 on 0",
     "{0} ± {1}; lower on {2}, within {3} on {4}", ["-0.2906", "0.0838", "20", "0.001", "0"]),
    ("3-6 words: 12,345 pairs, 4.3e-05 apart, 1.52x", "{0}-{1} words: {2} pairs, {3} apart, {4}x",
     ["3", "6", "12,345", "4.3e-05", "1.52"]),
    # digits inside a name stay: float16, W_1, x0, 3x3
    ("float16 W_1 x0 3x3", "float16 W_1 x0 {0}x3", ["3"]),
    ("a dict {'a': 1}", "a dict {{'a': {0}}}", ["1"]),
])
def test_a_printed_cell_becomes_a_message_with_its_numbers_as_fields(text, message, values):
    assert output_text.template(text) == (message, values)
    assert message.format(*values) == text


@pytest.mark.parametrize("text, words", [
    ("held-out MSE", True), ("running on cpu", True), ("Var(q.k / sqrt(d)) = 1.030", False),
    ("W_q.weight: (16, 3)", False), ("[0.733, 1.497] True", False), ("<eos> <pad>", False),
    ("tensor([1., 2.])", False), ("d =", False), ("1.080 ± 0.123", False),
])
def test_only_cells_with_words_are_translated(text, words):
    assert output_text.needs_translation(text) is words


def test_a_line_is_cut_at_wide_gaps_and_at_table_bars_not_at_absolute_values():
    assert output_text.cells("    d | largest weight: raw  scaled | grad") == [
        (4, "d"), (6, "|"), (8, "largest weight: raw"), (29, "scaled"), (36, "|"),
        (38, "grad")]
    assert output_text.cells("max |ours - PyTorch| = 1e-07") == [
        (0, "max |ours - PyTorch| = 1e-07")]
    # an array printed by NumPy is one cell, its padding and all
    assert output_text.cells("argmax, tau=0.1: [0.493 0.29  0.111]  done") == [
        (0, "argmax, tau=0.1: [0.493 0.29  0.111]"), (38, "done")]
    # columns, not characters: a Chinese character takes two
    assert output_text.cells("猫  is a cat") == [(0, "猫"), (4, "is a cat")]


ZH = {
    "pooling": "汇聚方式", "held-out MSE": "留出 MSE", "bandwidth": "带宽",
    "average pooling": "平均汇聚", "Gaussian, h = {0}": "高斯核，h = {0}",
    "score": "评分", "accuracy": "准确率", "dot": "点积", "scaled dot": "缩放点积",
    "lower on {0}, higher on {1}": "{1} 次更高，{0} 次更低",
}


def test_a_translated_table_keeps_its_columns():
    """Left-aligned cells keep their start, right-aligned ones (a header over numbers)
    their end; cells that were not translated stay where they were."""
    english = ("pooling                  held-out MSE     bandwidth\n"
               "average pooling         1.080 ± 0.123             -\n"
               "Gaussian, h = 1         0.617 ± 0.079 1.000 ± 0.000")
    missing: list[str] = []
    chinese = output_text.translate_text(english, ZH.get, missing).split("\n")
    assert missing == []
    assert chinese[0].startswith("汇聚方式 ") and chinese[1].startswith("平均汇聚 ")
    assert chinese[2].startswith("高斯核，h = 1 ")
    for line, original in zip(chinese, english.split("\n"), strict=True):
        # the numbers' columns and the right edge of the table are where they were
        assert output_text.columns(line) == len(original)
        assert line.endswith(original[-13:].lstrip()) or line.endswith("带宽")
    assert output_text.columns(chinese[0].split("留出 MSE")[0] + "留出 MSE") == 37


def test_right_aligned_labels_stay_right_aligned_and_numbers_move_back():
    english = ("          score  accuracy\n"
               "            dot  0.114 ± 0.021\n"
               "     scaled dot  0.114 ± 0.021")
    chinese = output_text.translate_text(english, ZH.get, []).split("\n")
    ends = [start + output_text.columns(text)
            for start, text in (output_text.cells(line)[0] for line in chinese)]
    assert ends == [15, 15, 15], chinese
    assert chinese[1].endswith("点积  0.114 ± 0.021")
    assert chinese[0] == " " * 11 + "评分  准确率"


def test_fields_may_change_places_and_what_has_no_translation_is_listed():
    missing: list[str] = []
    assert output_text.translate_text("lower on 6, higher on 4", ZH.get, missing) == (
        "4 次更高，6 次更低")
    assert output_text.translate_text("  something new: 3\n0.5", ZH.get, missing) == (
        "  something new: 3\n0.5")
    assert missing == ["something new: {0}"]


def _notebook(*outputs, **metadata) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell("print()", metadata=metadata)
    cell.outputs = list(outputs)
    return nbformat.v4.new_notebook(cells=[cell])


def test_the_catalog_holds_what_the_page_shows():
    """stdout and a plain-text result are the page's; stderr, a figure's text/plain twin
    and removed outputs are not; a Markdown table's cells are texts of their own."""
    out = nbformat.v4.new_output
    shown = _notebook(
        out("stream", name="stdout", text="held-out MSE: 0.3\nd =   2\n"),
        out("stream", name="stderr", text="a warning of some kind\n"),
        out("display_data", data={"image/png": "", "text/plain": "<Figure size 10>"}),
        out("execute_result", data={"text/plain": "fitted bandwidth 0.2"},
            execution_count=1),
        out("display_data", data={"text/markdown": "| path | bound by |\n|---|---|\n"
                                                   "| explicit | memory |",
                                  "text/plain": "<IPython.core.display.Markdown>"}),
        mystnb={"markdown_format": "myst"})
    assert list(output_catalogs.page_messages(shown)) == [
        "held-out MSE: {0}", "fitted bandwidth {0}", "path", "bound by", "explicit",
        "memory"]
    removed = _notebook(out("stream", name="stdout", text="held-out MSE: 0.3\n"),
                        tags=["remove-output"])
    assert output_catalogs.page_messages(removed) == {}
    # a model's samples differ from run to run: kept as printed, in no catalog
    sampled = _notebook(out("stream", name="stdout", text="def forward(self, x):\n"),
                        tags=[output_text.AS_PRINTED])
    assert output_catalogs.page_messages(sampled) == {}


def test_a_translation_must_keep_its_number_fields():
    assert output_catalogs.fields("lower on {0}, higher on {1} ({{x}})") == ["0", "1"]
    assert output_catalogs.fields("{1} 次更高，{0} 次更低") == ["0", "1"]


def test_a_number_lined_up_with_another_line_s_number_follows_it():
    """``largest difference, scores:  4.3e-05`` lines its number up with the next line's;
    translated, it goes under that number where the translation put it (or just after
    its own words), not to the English column."""
    zh = {"largest difference, scores:": "最大差异，评分：",
          "largest difference, weights: {0}": "最大差异，权重：{0}"}
    english = ("largest difference, scores:  4.3e-05\n"
               "largest difference, weights: 4.4e-06")
    assert output_text.translate_text(english, zh.get, []).split("\n") == [
        "最大差异，评分： 4.3e-05", "最大差异，权重：4.4e-06"]


def test_a_number_left_as_it_was_in_a_table_keeps_its_column():
    """In a table a cell without words stays where it was, a number wider than the
    others of its column included."""
    zh = {"matrix product:": "矩阵乘法：", "memory copy:": "内存复制：",
          "ridge point:": "屋脊点：", "{0} FLOP per byte": "{0} FLOP/字节"}
    english = ("matrix product:     42 GFLOP/s\n"
               "memory copy:       8.9 GB/s\n"
               "ridge point:       4.7 FLOP per byte")
    chinese = output_text.translate_text(english, zh.get, []).split("\n")
    assert chinese[0] == "矩阵乘法：" + " " * 10 + "42 GFLOP/s"
    assert chinese[1] == "内存复制：" + " " * 9 + "8.9 GB/s"
    assert chinese[2] == "屋脊点：" + " " * 11 + "4.7 FLOP/字节"


def test_a_cell_left_as_it_was_outside_a_table_keeps_the_gap_it_had():
    """Tokens printed in columns of their own after a translated label keep their gaps
    (the next line's numbers line up with them again)."""
    zh = {"writes:": "写入： ", "targets:": "目标：  ",
          "empty empty": "   空    空"}
    english = ("writes:  <bos>   C=1   A=1   A=7\n"
               "targets:       empty empty     1")
    chinese = output_text.translate_text(english, zh.get, []).split("\n")
    assert chinese[0] == "写入：   <bos>   C=1   A=1   A=7"
    assert output_text.columns(chinese[1]) == len(english.split("\n")[1])


def test_right_aligned_labels_keep_their_colons_in_one_column():
    zh = {"Q split into heads: ({0}, {1})": "Q 拆分成多个头：({0}, {1})",
          "Gaussian: h = {0}": "高斯核：h = {0}", "boxcar: h = {0}": "均匀核：h = {0}",
          "Epanechnikov: h = {0}": "Epanechnikov 核：h = {0}"}
    english = ("                 X: (1, 6)\n"
               "Q split into heads: (1, 3)")
    chinese = output_text.translate_text(english, zh.get, []).split("\n")
    assert chinese[0] == english.split("\n")[0]  # left as it was
    assert output_text.columns(chinese[1].split("：")[0]) == 18  # the colon's column
    labels = ("    Gaussian: h = 0.26\n"
              "      boxcar: h = 0.57\n"
              "Epanechnikov: h = 0.67")
    chinese = output_text.translate_text(labels, zh.get, []).split("\n")
    assert {output_text.columns(line.split("：")[0]) for line in chinese} == {15}
    assert chinese[2].startswith("Epanechnikov 核")  # the longest is not indented


def test_the_build_leaves_a_cell_tagged_as_printed_alone():
    """In the built page MyST-NB gives a cell's container a ``tag_<tag>`` class per tag:
    the outputs under a cell tagged ``output-as-printed`` are not translated."""
    from docutils import nodes

    block = nodes.literal_block("def forward(self, x):", "def forward(self, x):",
                                classes=["output", "stream"])
    cell = nodes.container("", nodes.container("", block),
                           classes=["cell", f"tag_{output_text.AS_PRINTED}"])
    assert output_text._as_printed(block)
    cell["classes"] = ["cell", "tag_remove-input"]
    assert not output_text._as_printed(block)
