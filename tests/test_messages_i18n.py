"""The learner's feedback, the grader's messages and the figures' words in Chinese when
asked (``ATTENTION_COURSE_LANG=zh_CN``, ``--lang zh_CN``), from gettext catalogs; English
by default."""

from __future__ import annotations

import gettext
import io
import json
import re
import sys
from pathlib import Path

import pytest

from attention_course import i18n
from attention_course.grading import get_exercise
from attention_course.grading.checking import run_checks
from attention_course.grading.registry import all_exercises

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import i18n as book_i18n  # noqa: E402  (scripts/i18n.py: the catalogs' tooling)

CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture
def chinese():
    with i18n.using("zh_CN"):
        yield


def test_language_names_and_the_environment(monkeypatch) -> None:
    assert i18n.normalise("zh-CN.UTF-8") == i18n.normalise("zh") == "zh_CN"
    assert i18n.normalise("") == i18n.normalise("C") == i18n.normalise("en_US") == "en"
    with pytest.raises(ValueError, match="language must be one of en, zh_CN, got 'fr'"):
        i18n.normalise("fr")
    monkeypatch.delenv(i18n.ENV, raising=False)
    assert i18n.language() == "en"
    monkeypatch.setenv(i18n.ENV, "zh_CN")
    assert i18n.language() == "zh_CN"
    with i18n.using("en"):
        assert i18n.language() == "en"
    assert i18n.language() == "zh_CN"
    monkeypatch.setenv(i18n.ENV, "klingon")
    with pytest.raises(ValueError, match="ATTENTION_COURSE_LANG: language must be"):
        i18n.language()


def test_a_po_file_is_read_and_compiled_for_gettext() -> None:
    text = "\n".join([
        'msgid ""', 'msgstr ""', '"Content-Type: text/plain; charset=UTF-8\\n"', "",
        "#: a.py:1", 'msgid "got {value}"', 'msgstr "得到 {value}"', "",
        "#, fuzzy", 'msgid "old"', 'msgstr "旧"', "",
        'msgid ""', '"two "', '"lines \\"quoted\\""', 'msgstr "两行"', "",
        '#~ msgid "gone"', '#~ msgstr "没了"', ""])
    entries = i18n.read_po(text)
    assert entries["got {value}"] == ("得到 {value}", False)
    assert entries["old"] == ("旧", True)
    assert entries['two lines "quoted"'] == ("两行", False)
    assert "gone" not in entries
    usable = {k: s for k, (s, fuzzy) in entries.items() if k and not fuzzy}
    catalog = gettext.GNUTranslations(io.BytesIO(i18n.compile_mo(usable)))
    assert catalog.gettext("got {value}") == "得到 {value}"
    assert catalog.gettext("old") == "old"  # a fuzzy translation is never shown
    assert catalog.gettext("unknown") == "unknown"


def test_the_package_catalogs_are_complete_and_keep_fields_and_code() -> None:
    found = book_i18n.message_problems()
    assert not found, (
        "the package's Chinese catalogs are behind its code:\n  " + "\n  ".join(found)
        + "\nrun 'python scripts/i18n.py messages', translate the empty and fuzzy entries "
        "in attention_course/locales/zh_CN/LC_MESSAGES/ (the exercise is the file's name; "
        "keep every {field} and `code`), remove their fuzzy flags, and run "
        "'python scripts/i18n.py check'")


def test_every_word_of_every_exercise_has_a_chinese_translation(chinese) -> None:
    untranslated = []
    for exercise in all_exercises().values():
        for q in exercise.questions:
            for text in (q.title, q.hint, *(m.message for m in q.mistakes)):
                if text and not CJK.search(i18n._(text)):
                    untranslated.append(f"{exercise.id} {q.id}: {text[:60]!r}")
    assert not untranslated, "\n".join(untranslated)


def test_a_hint_names_the_section_as_the_chinese_edition_titles_it(chinese) -> None:
    book = book_i18n._book_translations()
    sections = {q.section for e in all_exercises().values() for q in e.questions
                if q.section}
    assert sections
    for section in sections:
        if section in book:
            assert i18n._(section) == book[section], section


def test_check_gives_its_feedback_in_chinese_when_asked(capsys) -> None:
    exercise = get_exercise("01_attention_pooling")
    question = next(q for q in exercise.questions if q.mistakes)
    mistake = question.mistakes[0]
    namespace = {question.symbol: mistake.wrong}
    [english] = run_checks(exercise.id, question.id, namespace=namespace)
    assert mistake.message in english.message and not CJK.search(english.line())
    with i18n.using("zh_CN"):
        [chinese] = run_checks(exercise.id, question.id, namespace=namespace)
        line = chinese.line()
    assert i18n.translations("zh_CN").gettext(mistake.message) in chinese.message
    assert mistake.message not in line and CJK.search(line)
    assert chinese.points == english.points == 0
    assert line.startswith(f"[FAIL] {question.id} (")  # the marks and ids stay as they are


def test_the_grader_writes_chinese_feedback_with_lang(tmp_path) -> None:
    from attention_course.cli import main

    learner = ROOT / "exercises" / "01_attention_pooling.ipynb"
    folder = tmp_path / "class" / "lin"
    folder.mkdir(parents=True)
    (folder / learner.name).write_bytes(learner.read_bytes())
    out = tmp_path / "out"
    assert main(["grade", str(tmp_path / "class"), "--lang", "zh_CN", "--out", str(out),
                 "--timeout", "30"]) == 0
    feedback = (out / "lin" / "01_attention_pooling.feedback.txt").read_text("utf-8")
    record = json.loads((out / "lin" / "01_attention_pooling.json").read_text("utf-8"))
    zh = i18n.translations("zh_CN").gettext
    assert feedback.startswith(zh("Student:")) and CJK.search(feedback)
    assert "NotImplementedError" in feedback and "not implemented yet" not in feedback
    # what the sandboxed notebook itself prints comes in the grader's language too
    assert zh("(check skipped: this notebook is being graded)") in feedback
    assert all(CJK.search(q["message"]) for q in record["questions"])
    assert i18n.language() == "en"  # --lang changed nothing beyond its own run


def test_figures_label_their_axes_in_the_language_asked() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    from attention_course import plotting

    weights = torch.softmax(torch.randn(3, 4), dim=-1)
    fig = plotting.show_heatmaps(weights)
    assert fig.axes[0].get_xlabel() == "Keys"
    plt.close(fig)
    with i18n.using("zh_CN"):
        fig = plotting.show_heatmaps(weights)
        labels = fig.axes[0].get_xlabel(), fig.axes[0].get_ylabel()
        plt.close(fig)
        fig = plotting.show_heatmaps(weights, xlabel="tokens")
        assert fig.axes[0].get_xlabel() == "tokens"  # a label given is kept
        plt.close(fig)
    assert all(CJK.search(label) for label in labels), labels


def test_chinese_feedback_wraps_by_display_width() -> None:
    from attention_course.grading.results import WIDTH, _columns, wrap_indented

    text = ("用例 1（3 个查询，5 个键，h = 0.8）：注意力权重中行 0 的和为 5；每一行都是在键上的 "
            "softmax，和必须为 1。" * 3)
    lines = wrap_indented(text)
    assert len(lines) > 3
    assert all(_columns(line) <= WIDTH for line in lines[:-1])
    assert all(_columns(line) > WIDTH - 4 for line in lines[:-1])  # full, not ragged
    assert not any(line.strip()[0] in "，。：；）" for line in lines)
    assert "".join(line.strip() for line in lines).replace(" ", "") == text.replace(" ", "")


def test_hints_write_a_section_s_maths_as_plain_text_and_lines_keep_brackets() -> None:
    from attention_course.grading.results import plain_maths, wrap_indented

    assert plain_maths("3.4 $-\\infty$ and $\\sqrt{d}$, $N \\times N$") == "3.4 -∞ and √d, N × N"
    for shift in range(40):  # an opening bracket at every place a line could end
        lines = wrap_indented("字" * shift + "（请重读“3.4 节”）。" * 6)
        assert not any(line.rstrip()[-1] in "（“" for line in lines), lines
