"""Unit tests of the grading package: specs, comparison messages, check(), the generator."""

from __future__ import annotations

import json

import pytest
import torch
from grading_helpers import solution_namespace

from attention_course import kernel_regression as kr
from attention_course.grading import Case, Exercise, Question, check, run_checks
from attention_course.grading.compare import NotPlainData, compare, rows_sum_to_one, validate_plain
from attention_course.grading.make_learner import learner_notebook, strip_solutions
from attention_course.grading.registry import all_exercises, get_exercise
from attention_course.grading.results import evaluate
from attention_course.grading.spec import Mistake

EX = "01_attention_pooling"


def test_registry_discovers_exercise_one():
    assert EX in all_exercises()
    ex = get_exercise(EX)
    assert len(ex.questions) >= 3
    assert ex.max_score == sum(q.points for q in ex.questions)
    with pytest.raises(KeyError, match="known exercises"):
        get_exercise("99_nothing")


def test_spec_validation():
    with pytest.raises(ValueError, match="question id"):
        Question(id="bad id", symbol="f", points=1, reference=abs, cases=list)
    with pytest.raises(ValueError, match="identifier"):
        Question(id="q1", symbol="not a name", points=1, reference=abs, cases=list)
    q = Question(id="q1", symbol="f", points=1, reference=abs, cases=list)
    with pytest.raises(ValueError, match="unique"):
        Exercise(id="09_twice", title="t", questions=(q, q))
    with pytest.raises(ValueError, match="exercise id"):
        Exercise(id="nine", title="t", questions=(q,))


def test_compare_messages_teach():
    e = torch.zeros(2, 3, 4)
    assert compare(e, torch.zeros(2, 3, 4)) is None
    message = compare(e, torch.zeros(2, 4, 3))
    assert "expected shape (2, 3, 4), got (2, 4, 3)" in message and "swapped" in message
    assert "values differ" in compare(e, torch.ones(2, 3, 4))
    assert "nan" in compare(e, torch.full((2, 3, 4), float("nan"))).lower()
    assert "expected a tensor" in compare(e, [1, 2])
    assert compare(0.5, torch.tensor(0.5)) is None  # a number may come back as a tensor
    assert compare(torch.tensor(2.0), 2.0) is None
    assert "expected 0.5, got 0.3" in compare(0.5, 0.3)
    assert compare((e, 1.0), (e.clone(), 1.0)) is None
    assert "output[1]" in compare((e, 1.0), (e, 2.0))
    assert "floating-point" in compare(torch.tensor([0.5]), torch.tensor([1]))
    # a list of floats may come back as a 1-D float tensor, of the right length and values
    assert compare([0.5, 2.0], torch.tensor([0.5, 2.0])) is None
    assert "output[1]" in compare([0.5, 2.0], torch.tensor([0.5, 3.0]))
    assert "expected a list of length 2" in compare([0.5, 2.0], torch.tensor([0.5, 2.0, 1.0]))
    assert "expected a list of length 2" in compare([0.5, 2.0], torch.ones(2, 1))
    assert "expected a list of length 2" in compare([0.5, 2.0], torch.tensor([1, 2]))
    assert "expected a list of length 2" in compare([1, 2], torch.tensor([1.0, 2.0]))
    assert "expected a tuple of length 2" in compare((e, 1.0), torch.ones(2))


def test_rows_sum_to_one_diagnosis():
    diagnose = rows_sum_to_one()
    weights = torch.tensor([[0.5, 0.23], [0.5, 0.5]])
    message = diagnose(None, None, weights)
    assert "row 0" in message and "0.73" in message and "sum to 1" in message
    assert diagnose(None, None, torch.tensor([[0.5, 0.5]])) is None


def test_validate_plain_rejects_objects():
    assert validate_plain([torch.ones(2), {"a": 1.0}, None, "s"])[1] == {"a": 1.0}
    for bad in (object(), {1: 2}, torch.ones(2).to_sparse(), torch.nn.Linear(2, 2)):
        with pytest.raises(NotPlainData):
            validate_plain(bad)


def test_run_checks_full_marks_and_messages():
    ns = solution_namespace(EX)
    results = run_checks(EX, namespace=ns)
    assert all(r.passed for r in results)
    assert sum(r.points for r in results) == get_exercise(EX).max_score

    def transposed(q, k, h):
        return kr.attention_weights(q, k, h).T

    def unnormalised(q, k, h):
        return kr.attention_weights(q, k, h) * 0.73

    def stub(q, k, h):
        raise NotImplementedError

    def broken(q, k, h):
        raise ValueError("boom")

    for fn, status, words in [
        (transposed, "failed", "expected shape (3, 5), got (5, 3)"),
        (unnormalised, "failed", "row 0 of the attention weights sums to 0.73"),
        (stub, "not_implemented", "not implemented yet"),
        (broken, "error", "ValueError: boom"),
    ]:
        fn.__name__ = "gaussian_weights"
        (r,) = run_checks(EX, fn)
        assert r.status == status and words in r.message and r.points == 0


def test_module_question_reports_parameter_shape():
    class LearnableBandwidthPooling(torch.nn.Module):
        def __init__(self, init_bandwidth=1.0):
            super().__init__()
            self.log_bandwidth = torch.nn.Parameter(torch.zeros(1))

        def forward(self, q, k, v):
            return v[: q.shape[0]]

    (r,) = run_checks(EX, LearnableBandwidthPooling)
    assert r.status == "error" and "has shape (1,)" in r.message and "shape ()" in r.message


def test_check_prints_and_never_raises(capsys):
    def gaussian_weights(q, k, h):
        raise NotImplementedError

    check(EX, gaussian_weights)
    check(EX, "no_such_question")
    check("99_unknown")
    check(EX)  # nothing defined here: every question is "not defined"
    out = capsys.readouterr().out
    assert "not implemented yet" in out
    assert "has no question 'no_such_question'" in out
    assert "unknown exercise" in out
    assert "Total: 0/10 points" in out and "is not defined" in out


def test_strip_solutions():
    source = "def f(x):\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION\n"
    assert strip_solutions(source) == (
        "def f(x):\n    # YOUR CODE HERE\n"
        '    raise NotImplementedError("replace this line with your code")\n'
    )
    with pytest.raises(ValueError, match="without END"):
        strip_solutions("# BEGIN SOLUTION\nx = 1\n")
    with pytest.raises(ValueError, match="without BEGIN"):
        strip_solutions("x = 1\n# END SOLUTION\n")


def test_learner_notebook_drops_solution_only_cells():
    nb = {
        "cells": [
            {"cell_type": "code", "metadata": {"tags": ["solution-only"]}, "source": "x = 1",
             "outputs": [], "execution_count": None},
            {"cell_type": "code", "metadata": {}, "source": "y = 2", "outputs": [{"a": 1}],
             "execution_count": 3},
        ],
        "metadata": {},
    }
    learner = learner_notebook(nb)
    assert [c["source"] for c in learner["cells"]] == ["y = 2"]
    assert learner["cells"][0]["outputs"] == [] and learner["cells"][0]["execution_count"] is None
    assert json.dumps(nb["cells"][1]["outputs"]) == '[{"a": 1}]'  # the input is untouched


def test_case_to_plain_holds_only_data():
    case = Case(args=(torch.ones(2), 0.5), label="x")
    plain = case.to_plain()
    assert set(plain) == {"args", "kwargs", "init_args", "init_kwargs", "params"}
    validate_plain(plain)


def test_not_a_regular_file_is_refused(tmp_path):
    import os

    from attention_course.grading.grader import grade_notebook

    fifo = tmp_path / f"pipe_{EX}.ipynb"
    os.mkfifo(fifo)
    record = grade_notebook(fifo)
    assert record.score == 0 and "not a regular file" in record.error
    assert record.max_score == get_exercise(EX).max_score


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_check_accepts_answers_computed_on_the_gpu():
    def gaussian_weights(q, k, h):
        return kr.attention_weights(q.cuda(), k.cuda(), h)

    (r,) = run_checks(EX, gaussian_weights)
    assert r.passed, r.message


def test_cells_run_as_jupyter_runs_them():
    """IPython's own transformation, then the sandbox's ``get_ipython()``: magics that run
    code run it once, the rest do nothing, shell escapes run no shell."""
    from attention_course.grading._driver import Shell
    from attention_course.grading.grader import _as_python

    source = ("%%time\nx = 1\n", "%timeit -n 10 -r 3 y = x + 1\n", "%matplotlib inline\n",
              "!pip install y\nfiles = !ls\n", "ok = (\n    x\n    != 2\n)\n",
              "%%bash\nrm -rf /\n")
    namespace: dict = {}
    shell = Shell(namespace)
    namespace["get_ipython"] = lambda: shell
    for cell in source:
        exec(compile(_as_python(cell), "<cell>", "exec"), namespace)
    assert namespace["x"] == 1 and namespace["y"] == 2 and namespace["ok"] is True
    assert namespace["files"] == []
    assert _as_python("ok = (\n    x\n    != 2\n)\n") == "ok = (\n    x\n    != 2\n)\n"


# --------------------------------------------------------------------------- teaching
# feedback: known mistakes, held-back cases, parts, choices, gradients, dependencies
def _scaled(q, k):
    return q @ k.transpose(1, 2) / q.shape[-1] ** 0.5


def _unscaled(q, k):
    return q @ k.transpose(1, 2)


def _judge(question, target):
    from attention_course.grading.checking import _answers

    cases = list(question.cases())
    wrong = {m.name: _answers(question, m.wrong, cases) for m in question.mistakes}
    expected = _answers(question, question.reference, cases)
    return evaluate(question, cases, expected, _answers(question, target, cases), wrong)


def _qk_cases():
    g = torch.Generator().manual_seed(0)
    return [Case(args=(torch.randn(1, 2, 4, generator=g), torch.randn(1, 3, 4, generator=g)),
                 label="d=4"),
            Case(args=(torch.randn(2, 3, 9, generator=g), torch.randn(2, 2, 9, generator=g)),
                 hidden=True)]


SCALED = Question(id="q1", symbol="scaled", points=2, reference=_scaled, cases=_qk_cases,
                  mistakes=(Mistake("unscaled", _unscaled, "forgot the square root of d"),),
                  hint="the spread", section="Scaling")


def test_a_known_mistake_is_named():
    r = _judge(SCALED, _unscaled)
    assert r.status == "failed" and r.message == "case 1 (d=4): forgot the square root of d"
    assert "Reread the chapter's section \"Scaling\"" in r.hint
    r = _judge(SCALED, lambda q, k: _scaled(q, k) * 5)  # an unknown mistake: generic message
    assert "values differ" in r.message and "square root" not in r.message


def test_held_back_cases_count_but_stay_hidden():
    def fitted(q, k):  # right on the visible case only
        return _scaled(q, k) if q.shape[-1] == 4 else torch.zeros(q.shape[0], q.shape[1],
                                                                  k.shape[1])

    r = _judge(SCALED, fitted)
    assert r.points == 0 and r.message.startswith("held-back case 2 (the check does not show")


def test_parts_earn_points_separately_and_choices_are_checked():
    question = Question(
        id="q2", symbol="predict", points=3, kind="predict",
        reference=lambda: {"a": "dot", "b": "cosine"}, cases=lambda: [Case()],
        parts={"a": 1, "b": 2}, choices=("dot", "cosine"),
        mistakes=(Mistake("swapped", lambda: {"a": "cosine", "b": "dot"}, "lengths matter"),))
    r = _judge(question, lambda: {"a": "dot", "b": "dot"})
    assert (r.points, r.status) == (1, "failed") and "'b' in case 1: lengths matter" in r.message
    assert r.line().startswith("[PART] q2 (predict) `predict`: 1/3 points")
    r = _judge(question, lambda: {"a": "Dot", "b": "cosine"})
    assert r.points == 2 and "'Dot' is not one of the choices: 'dot', 'cosine'" in r.message
    r = _judge(question, lambda: "dot")
    assert r.points == 0 and "return a dict with the keys 'a', 'b'" in r.message
    assert _judge(question, question.reference).points == 3


def test_gradients_must_flow_when_asked():
    question = Question(id="q3", symbol="scaled", points=1, reference=_scaled,
                        cases=_qk_cases, grad=True)
    assert _judge(question, _scaled).passed
    with pytest.raises(Exception, match="does not carry gradients"):
        _judge(question, lambda q, k: _scaled(q, k).detach())
    r = _judge(question, lambda q, k: _scaled(q, k.detach()))  # no gradient reaches k
    assert "the output is right, but not its gradient" in r.message
    assert "gradient of input 2" in r.message


def test_a_boolean_answer_must_be_boolean():
    e = torch.ones(3, 3, dtype=torch.bool).tril()
    assert "expected a boolean tensor" in compare(e, e.float())
    assert "expected a boolean tensor" in compare(e, e.long())
    assert "expected an integer tensor" in compare(torch.arange(3), torch.arange(3.0))
    assert compare(e, e.clone()) is None


def test_a_failure_that_builds_on_a_failed_question_says_so():
    from attention_course.grading.results import builds_on_failed, result

    first = Question(id="q1_split", symbol="split", points=1, reference=abs, cases=list)
    second = Question(id="q2_mha", symbol="MHA", points=2, reference=abs, cases=list,
                      builds_on=("q1_split",))
    results = [result(first, "failed", "wrong"), result(second, "failed", "values differ")]
    out = builds_on_failed([first, second], results)
    assert out[1].message.startswith("this question calls your answer to q1_split (`split`)")
    assert out[1].message.endswith("values differ")
    passed = builds_on_failed([first, second], [result(first, "passed", ""), results[1]])
    assert passed[1].message == "values differ"
    with pytest.raises(ValueError, match="not earlier questions"):
        Exercise(id="09_order", title="t", questions=(second, first))


def test_starter_regions_give_the_learner_the_broken_code():
    source = ("def f(x):\n    # BEGIN SOLUTION\n    return x + 1\n    # END SOLUTION\n"
              "    # BEGIN STARTER\n    # y = x\n    #\n    # return y - 1\n    # END STARTER\n")
    assert strip_solutions(source) == "def f(x):\n    y = x\n\n    return y - 1\n"
    with pytest.raises(ValueError, match="commented out"):
        strip_solutions("# BEGIN SOLUTION\nx\n# END SOLUTION\n# BEGIN STARTER\ny = 1\n"
                        "# END STARTER\n")
    with pytest.raises(ValueError, match="must follow a SOLUTION"):
        strip_solutions("# BEGIN STARTER\n# y = 1\n# END STARTER\n")


def test_the_learner_cell_is_not_folded():
    nb = {"metadata": {}, "cells": [
        {"cell_type": "code", "metadata": {"tags": ["hide-input"]}, "outputs": [],
         "execution_count": None,
         "source": "def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n"},
        {"cell_type": "code", "metadata": {"tags": ["hide-input"]}, "outputs": [],
         "execution_count": None, "source": "import matplotlib"}]}
    cells = learner_notebook(nb)["cells"]
    assert "tags" not in cells[0]["metadata"] and cells[1]["metadata"]["tags"] == ["hide-input"]


def test_a_derived_number_or_a_prediction_is_never_given_away():
    derive = Question(id="q4", symbol="variance", points=1, kind="derive",
                      reference=lambda d: d * 0.3, cases=lambda: [Case(args=(4,))])
    r = _judge(derive, lambda d: d * 0.6)
    assert "got 2.4, which is 2 times too large" in r.message
    assert "1.2" not in r.message and "expected" not in r.message
    predict = Question(id="q5", symbol="guess", points=1, kind="predict", reference=lambda: "dot",
                       cases=lambda: [Case()], choices=("dot", "cosine"))
    r = _judge(predict, lambda: "cosine")
    assert "'cosine' is not the right answer" in r.message and "dot" not in r.message
    r = _judge(SCALED, lambda q, k: _scaled(q, k) * 5)  # implement: an entry may be shown
    assert "expected" in r.message
    negative = Question(id="q7", symbol="bias", points=1, kind="derive",
                        reference=lambda: -0.5, cases=lambda: [Case()])
    r = _judge(negative, lambda: 0.0)  # a zero answer to a negative number
    assert r.points == 0 and "got 0, which is not the answer" in r.message


def test_a_mistake_that_changes_nothing_on_a_case_is_not_named_there():
    question = Question(
        id="q6", symbol="f", points=1, reference=lambda x: x.abs(), cases=lambda: [
            Case(args=(torch.tensor([1.0, 2.0]),)), Case(args=(torch.tensor([-1.0]),))],
        mistakes=(Mistake("identity", lambda x: x, "negative inputs must turn positive"),))
    r = _judge(question, lambda x: x.abs() * (x > 1.5))  # wrong on case 1, where x > 0
    assert "negative inputs" not in r.message
    assert "negative inputs" in _judge(question, lambda x: x).message
