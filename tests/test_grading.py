"""Unit tests of the grading package: specs, comparison messages, check(), the generator."""

from __future__ import annotations

import json

import pytest
import torch

from attention_course import kernel_regression as kr
from attention_course.grading import Case, Exercise, Question, check, run_checks
from attention_course.grading.compare import NotPlainData, compare, rows_sum_to_one, validate_plain
from attention_course.grading.make_learner import learner_notebook, strip_solutions
from attention_course.grading.registry import all_exercises, get_exercise

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


def _solution_namespace() -> dict:
    ns = {}

    def gaussian_weights(q, k, h):
        return kr.attention_weights(q, k, h)

    def nadaraya_watson_predict(q, k, v, h):
        return kr.nadaraya_watson(q, k, v, h)[0]

    class LearnableBandwidthPooling(kr.NWKernelRegression):
        pass

    ns.update(
        gaussian_weights=gaussian_weights,
        nadaraya_watson_predict=nadaraya_watson_predict,
        LearnableBandwidthPooling=LearnableBandwidthPooling,
        choose_bandwidth=kr.choose_bandwidth,
    )
    return ns


def test_run_checks_full_marks_and_messages():
    ns = _solution_namespace()
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


def test_magics_become_no_ops():
    from attention_course.grading._driver import strip_magics

    assert strip_magics("x = 1\n  %matplotlib inline\n!pip install y\n") == (
        "x = 1\n  pass\npass\n"
    )
    assert strip_magics("%%time\nx = 1\n") == ""
