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


# --------------------------------------------------------------------------- choices
def _predictions():
    return [(e.id, q) for e in sorted(all_exercises().values(), key=lambda e: e.id)
            for q in e.questions if q.choices]


def _answered(question, answer, write):
    """``answer`` (one choice or a dict of them) with every choice written by ``write``
    (choice, its index) instead."""
    def one(choice):
        return write(choice, question.choices.index(choice))
    return {k: one(v) for k, v in answer.items()} if isinstance(answer, dict) else one(answer)


def _judged(exercise_id, question, answer):
    [result] = run_checks(exercise_id, question.id,
                          namespace={question.symbol: lambda: answer})
    return result


def _english_choices_in(question, text: str) -> list[str]:
    """The English choices of ``question`` that ``text`` holds as words, leaving out those
    whose Chinese is the English word itself (BLEU, NaN)."""
    zh = i18n.translations("zh_CN").gettext
    return [c for c in question.choices if zh(c) != c
            and re.search(rf"(?<![A-Za-z_]){re.escape(c)}(?![A-Za-z_])", text)]


def test_every_choice_has_chinese_words_of_its_own() -> None:
    """The choices a learner can write: each one's Chinese, none of two choices of one
    question the same once spaces, case and full-width forms are set aside (only a name,
    BLEU, NaN, stays as it is)."""
    from attention_course.grading.choices import _key

    zh = i18n.translations("zh_CN").gettext
    predictions = _predictions()
    assert len(predictions) >= 12
    for exercise_id, q in predictions:
        for c in q.choices:
            assert CJK.search(zh(c)) or (zh(c) == c and not re.search(r"\b[a-z]{2,}", c)), (
                exercise_id, q.id, c, zh(c))
        keys = [k for c in q.choices for k in {_key(c), _key(zh(c))}]
        assert len(keys) == len(set(keys)), (exercise_id, q.id, keys)


@pytest.mark.parametrize("exercise_id, question", _predictions(),
                         ids=[f"{e}-{q.id}" for e, q in _predictions()])
def test_a_chinese_learner_answers_by_words_letter_or_number(exercise_id, question) -> None:
    """In Chinese, a prediction may name its choices by their Chinese words, their letters
    (A for the first choice) or their numbers (1 for the first): full points. In English
    only the English words count, as before (a part whose Chinese is its English, NaN,
    scores there too)."""
    zh = i18n.translations("zh_CN").gettext
    right = question.reference()
    forms = {
        "chinese": lambda c, i: zh(c),
        "chinese, spaced and with ASCII commas": lambda c, i: " " + zh(c).replace("，", ", "),
        "letter": lambda c, i: "ABCDEFGH"[i],
        "lower-case letter in brackets": lambda c, i: f"({'abcdefgh'[i]})",
        "number": lambda c, i: i + 1,
        "number as text": lambda c, i: f"{i + 1}.",
        "english": lambda c, i: c,
    }
    for form, write in forms.items():
        answer = _answered(question, right, write)
        with i18n.using("zh_CN"):
            result = _judged(exercise_id, question, answer)
        assert result.passed, (form, answer, result.message)
        if form == "english":
            continue
        with i18n.using("en"):
            english = _judged(exercise_id, question, answer)
        assert english.points < question.points, (form, answer, english.message)


@pytest.mark.parametrize("exercise_id, question", _predictions(),
                         ids=[f"{e}-{q.id}" for e, q in _predictions()])
def test_chinese_feedback_names_the_choices_in_chinese(exercise_id, question) -> None:
    """Every wrong choice, answered in Chinese, gets its own mistake's Chinese message
    (the same points as in English), and no message quotes an English choice: neither a
    mistake's words nor the list of choices a stray answer gets."""
    zh = i18n.translations("zh_CN").gettext
    for mistake in question.mistakes:
        wrong = mistake.wrong()
        chosen = wrong.values() if isinstance(wrong, dict) else [wrong]
        if not all(isinstance(c, str) and c in question.choices for c in chosen):
            continue  # an answer that is no choice (None, True, a number)
        answer = _answered(question, wrong, lambda c, i: zh(c))
        with i18n.using("en"):
            english = _judged(exercise_id, question, wrong)
        with i18n.using("zh_CN"):
            chinese = _judged(exercise_id, question, answer)
        assert chinese.points == english.points < question.points, mistake.name
        assert zh(mistake.message) in chinese.message, (mistake.name, chinese.message)
        assert not _english_choices_in(question, chinese.message), (mistake.name,
                                                                    chinese.message)
    stray = {k: "都不是" for k in question.parts} if question.parts else "都不是"
    with i18n.using("zh_CN"):
        result = _judged(exercise_id, question, stray)
    assert result.points == 0 and "'都不是'" in result.message
    for c in question.choices:
        letter = "ABCDEFGH"[question.choices.index(c)]
        assert f"{letter} {zh(c)!r}" in result.message, result.message
    assert not _english_choices_in(question, result.message), result.message


def test_the_grader_takes_a_chinese_answer_with_lang_zh_cn(tmp_path, server) -> None:
    """Graded in the sandbox, exercise 1's prediction written as its letter or its Chinese
    words earns its point with ``--lang zh_CN`` (and only the English words do without)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from grading_helpers import graded_record, replace_in_solution

    right = 'return "training down, held-out up"'
    for answer, points in (('"B"', {"zh_CN": 1, "en": 0}),
                           ('"训练误差下降，留出误差上升"', {"zh_CN": 1, "en": 0}),
                           ('"training down, held-out up"', {"zh_CN": 1, "en": 1})):
        cells = replace_in_solution("01_attention_pooling", (right, f"return {answer}"))
        for lang, wanted in points.items():
            folder = tmp_path / f"{lang}-{len(answer)}"
            folder.mkdir()
            with i18n.using(lang):
                record = graded_record("01_attention_pooling", folder, cells, server)
            [q5] = [q for q in record.questions if q.id == "q5_narrow"]
            assert q5.points == wanted, (answer, lang, q5.message)
