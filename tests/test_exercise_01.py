"""Exercise 1: the mistakes learners make, applied to the reference solution, each lose
points with a message that names them.

Most are written here as a learner would write them (a function, or the solution
notebook with a line changed); some are listed in the spec as known mistakes, others are
not, and their feedback must still point somewhere useful (a shape, a row sum, the case
that fails, the exception). A few right answers written differently must still pass.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from grading_helpers import (
    assert_named,
    graded_record,
    learner_path,
    notebook_cells,
    replace_in_solution,
    run_cells,
    solution_namespace,
    solution_path,
)

from attention_course.grading import get_exercise, run_checks
from attention_course.grading.exercises import ex01_attention_pooling as spec

EX = "01_attention_pooling"
SOLUTION, LEARNER = solution_path(EX), learner_path(EX)


@pytest.fixture(scope="module")
def solution() -> dict:
    """The names the reference solution defines (its cells run once)."""
    return solution_namespace(EX)


def _judge(solution: dict, question: str, answer=None, **names):
    """The feedback ``check`` gives on one question, the other names from the solution."""
    namespace = dict(solution, **names)
    if answer is not None:
        namespace[get_exercise(EX).question(question).symbol] = answer
    (result,) = run_checks(EX, question, namespace=namespace)
    return result


def _d2(queries, keys):
    return (queries[:, None] - keys[None, :]) ** 2


# --------------------------------------------------------------------------- question 1
WEIGHT_MISTAKES = {
    # listed in the spec
    "2h": (lambda q, k, h: torch.softmax(-_d2(q, k) / (2 * h), dim=-1), "not by 2h squared"),
    "h^2": (lambda q, k, h: torch.softmax(-_d2(q, k) / h**2, dim=-1), "factor 2 is missing"),
    "h": (lambda q, k, h: torch.softmax(-_d2(q, k) / h, dim=-1),
          "divide the squared distance by h"),
    "(2h)^2": (lambda q, k, h: torch.softmax(-_d2(q, k) / (2 * h) ** 2, dim=-1), "4h squared"),
    "times h^2": (lambda q, k, h: torch.softmax(-_d2(q, k) * h**2 / 2, dim=-1),
                  "multiply by the squared bandwidth"),
    "dim=0": (lambda q, k, h: torch.softmax(-_d2(q, k) / (2 * h**2), dim=0),
              "normalised over the queries"),
    "sign": (lambda q, k, h: torch.softmax(_d2(q, k) / (2 * h**2), dim=-1),
             "grow with the distance"),
    "abs": (lambda q, k, h: torch.softmax(-(q[:, None] - k[None, :]).abs() / (2 * h**2), -1),
            "distance itself"),
    "exp only": (lambda q, k, h: torch.exp(-_d2(q, k) / (2 * h**2)), "before normalisation"),
    # listed since the red-team pass
    "log-softmax": (lambda q, k, h: torch.log_softmax(-_d2(q, k) / (2 * h**2), dim=-1),
                    "logarithms of the weights"),
    "scores without softmax": (lambda q, k, h: -_d2(q, k) / (2 * h**2), "before the softmax"),
    "q^2 - k^2": (lambda q, k, h: torch.softmax(-(q[:, None] ** 2 - k[None, :] ** 2)
                                                / (2 * h**2), dim=-1), "subtract the squares"),
    "square forgotten": (lambda q, k, h: torch.softmax(-(q[:, None] - k[None, :]) / (2 * h**2),
                                                       dim=-1), "signed difference"),
    # not listed: the framework's own diagnosis must still say what is wrong
    "keys by queries": (lambda q, k, h: torch.softmax(-_d2(k, q) / (2 * h**2), dim=-1),
                        "expected shape (3, 5), got (5, 3)"),
    "divided by the total": (lambda q, k, h: (e := torch.exp(-_d2(q, k) / (2 * h**2))) / e.sum(),
                             "row 0 of the attention weights sums to"),
    "divided by the row's largest": (
        lambda q, k, h: (e := torch.exp(-_d2(q, k) / (2 * h**2))) / e.amax(-1, keepdim=True),
        "must sum to 1"),
    "a density, not normalised": (
        lambda q, k, h: torch.exp(-_d2(q, k) / (2 * h**2)) / (math.sqrt(2 * math.pi) * h),
        "row 0 of the attention weights sums to 0.829"),
    "a trailing axis": (lambda q, k, h: torch.softmax(-_d2(q, k) / (2 * h**2), -1)[..., None],
                        "expected shape (3, 5), got (3, 5, 1)"),
    "a list": (lambda q, k, h: torch.softmax(-_d2(q, k) / (2 * h**2), -1).tolist(),
               "expected a tensor of shape (3, 5), got a list"),
}


def test_weights_fitted_to_the_visible_cases_fail_a_held_back_one(solution):
    def fitted(q, k, h):  # right only where the check shows the inputs
        if h in (0.8, 0.45, 1.3):
            return torch.softmax(-_d2(q, k) / (2 * h**2), dim=-1)
        return torch.full((len(q), len(k)), 1 / len(k))

    assert_named(_judge(solution, "q1_weights", fitted),
                 "held-back case 4 (the check does not show")


# --------------------------------------------------------------------------- question 2
def _weights(q, k, h):
    return torch.softmax(-_d2(q, k) / (2 * h**2), dim=-1)


PREDICT_MISTAKES = {
    "average pooling": (lambda q, k, v, h: v.mean(0).expand(len(q), *v.shape[1:]),
                        "average pooling"),
    "nearest key": (lambda q, k, v, h: v[_weights(q, k, h).argmax(dim=1)], "hard attention"),
    "kernel values": (lambda q, k, v, h: torch.exp(-_d2(q, k) / (2 * h**2)) @ v,
                      "weights do not sum to 1"),
    "over queries": (lambda q, k, v, h: torch.softmax(-_d2(q, k) / (2 * h**2), 0) @ v,
                     "normalised over the queries instead of over the keys"),
    "divided by n": (lambda q, k, v, h: _weights(q, k, h) @ v / len(k),
                     "as many times too small as there are keys"),
    "averages the keys": (lambda q, k, v, h: _weights(q, k, h) @ k, "average the keys"),
    "keys and values swapped": (lambda q, k, v, h: _weights(q, v, h) @ k,
                                "keys and values are swapped"),
    # not listed
    "the weights themselves": (lambda q, k, v, h: _weights(q, k, h),
                               "expected shape (5,), got (5, 10)"),
    "values made a column": (lambda q, k, v, h: _weights(q, k, h) @ (v if v.dim() > 1 else
                                                                      v[:, None]),
                             "expected shape (5,), got (5, 1)"),
    # not listed: right for numbers, wrong for vector values, where it cannot broadcast
    "elementwise": (lambda q, k, v, h: (_weights(q, k, h) * v).sum(dim=1),
                    "must match the size of tensor b (2)"),
}


def test_a_broken_q1_is_named_as_the_cause_of_q2(solution):
    def gaussian_weights(q, k, h):  # the sign dropped
        return torch.softmax(_d2(q, k) / (2 * h**2), dim=-1)

    def nadaraya_watson_predict(q, k, v, h):
        return gaussian_weights(q, k, h) @ v

    result = _judge(solution, "q2_predict", nadaraya_watson_predict,
                    gaussian_weights=gaussian_weights)
    assert_named(result, "this question calls your answer to q1_weights (`gaussian_weights`), "
                         "which did not pass")


# --------------------------------------------------------------------------- question 3
FORWARD = (
    "        bandwidth = self.log_bandwidth.exp()\n"
    "        scores = -((queries[:, None] - keys[None, :]) ** 2) / (2 * bandwidth**2)\n"
    "        if exclude_self:\n"
    "            itself = torch.eye(len(queries), dtype=torch.bool)\n"
    "            scores = scores.masked_fill(itself, -math.inf)\n"
    "        return torch.softmax(scores, dim=-1) @ values\n"
)
EXP = "self.log_bandwidth.exp()\n        scores"  # the bandwidth, in forward
INIT = (
    "        self.log_bandwidth = nn.Parameter(\n"
    "            torch.tensor(math.log(init_bandwidth))\n"
    "        )\n"
)
WEIGHTS_THEN_LEAVE_OUT = (
    "        bandwidth = self.log_bandwidth.exp()\n"
    "        weights = gaussian_weights(queries, keys, bandwidth)\n"
    "        if exclude_self:\n"
    "            weights = weights * (1 - torch.eye(len(queries)))\n"
)
STORES_H = ("torch.tensor(math.log(init_bandwidth))", "torch.tensor(init_bandwidth)")
MODULE_MISTAKES = {
    # the starter's three bugs, one at a time, and the typical half-fixes (listed)
    "item": ([(EXP, "self.log_bandwidth.exp().item()\n        scores")],
             "raised RuntimeError: element 0 of tensors does not require grad"),
    "plain tensor": ([(INIT, INIT.replace("nn.Parameter(", "(", 1))],
                     "has no parameter or buffer named 'log_bandwidth'"),
    "stores h": ([STORES_H], "__init__ stores init_bandwidth itself"),
    "no exp": ([(EXP, "self.log_bandwidth\n        scores")],
               "uses log_bandwidth itself as the bandwidth"),
    "learns h itself": ([(EXP, "self.log_bandwidth\n        scores"), STORES_H],
                        "uses log_bandwidth itself as the bandwidth"),
    "not renormalised": ([(FORWARD, WEIGHTS_THEN_LEAVE_OUT + "        return weights @ values\n")],
                         "not renormalised"),
    "exclude_self ignored": ([("            scores = scores.masked_fill(itself, -math.inf)\n",
                               "            pass\n")], "exclude_self changes nothing"),
    "dim=0": ([("return torch.softmax(scores, dim=-1) @ values",
                "return torch.softmax(scores, dim=0) @ values")], "normalised over the queries"),
    "2h": ([("/ (2 * bandwidth**2)\n        if exclude_self", "/ (2 * bandwidth)\n        if "
             "exclude_self")], "by 2h, not by 2h squared"),
    "h^2": ([("/ (2 * bandwidth**2)\n        if exclude_self", "/ bandwidth**2\n        if "
              "exclude_self")], "the factor 2 of 2h squared is missing"),
    "renormalised over the queries": ([(
        "            scores = scores.masked_fill(itself, -math.inf)\n"
        "        return torch.softmax(scores, dim=-1) @ values\n",
        "            pass\n        weights = torch.softmax(scores, dim=-1)\n"
        "        if exclude_self:\n            weights = weights * (1 - torch.eye(len(queries)))\n"
        "            weights = weights / weights.sum(dim=0, keepdim=True)\n"
        "        return weights @ values\n")], "divide by the sums over the queries"),
    # not listed: the diagnosis of the starting bandwidth names __init__
    "log10": ([("math.log(init_bandwidth)", "math.log10(init_bandwidth)")],
              "before training your module's bandwidth is 0.7401, where init_bandwidth is 0.5"),
    "log of h squared": ([("math.log(init_bandwidth)", "math.log(init_bandwidth**2)")],
                         "__init__ must store the logarithm of init_bandwidth"),
    "requires_grad=False": ([("torch.tensor(math.log(init_bandwidth))\n        )",
                              "torch.tensor(math.log(init_bandwidth)), "
                              "requires_grad=False\n        )")], "does not require grad"),
    "masked with +inf": ([("masked_fill(itself, -math.inf)", "masked_fill(itself, math.inf)")],
                         "look for a division by zero or an overflow"),
    "renamed parameter": ([("self.log_bandwidth = nn.Parameter", "self.log_h = nn.Parameter"),
                           (EXP, "self.log_h.exp()\n        scores")],
                          "has no parameter or buffer named 'log_bandwidth'"),
    # not listed
    "diagonal of the weights zeroed": ([(
        "            scores = scores.masked_fill(itself, -math.inf)\n"
        "        return torch.softmax(scores, dim=-1) @ values\n",
        "            pass\n        weights = torch.softmax(scores, dim=-1)\n"
        "        if exclude_self:\n            weights = weights.clone().fill_diagonal_(0)\n"
        "        return weights @ values\n")], "not renormalised"),
    "masked with 0": ([("masked_fill(itself, -math.inf)", "masked_fill(itself, 0.0)")],
                      "exclude_self changes nothing"),
    "detached": ([(EXP, "self.log_bandwidth.exp().detach()\n        scores")],
                 "does not require grad"),
    "buffer": ([(INIT, "        self.register_buffer('log_bandwidth', "
                       "torch.tensor(math.log(init_bandwidth)))\n")], "does not require grad"),
    "shape (1,)": ([("torch.tensor(math.log(init_bandwidth))",
                     "torch.tensor([math.log(init_bandwidth)])")],
                   "has shape (1,), but the exercise asks for shape ()"),
}


def _up_to_the_module(cells: list[str]) -> list[str]:
    """The cells that define the module and what it builds on (the checks, the training
    and the later questions are not needed to judge it)."""
    (index,) = [i for i, c in enumerate(cells) if "class LearnableBandwidthPooling" in c]
    return [c for c in cells[:index + 1] if not c.lstrip().startswith("check(")]


def _module_namespace(changes) -> dict:
    cells = notebook_cells(SOLUTION)
    for old, new in changes:
        joined = "\n\x00\n".join(cells)
        assert joined.count(old) == 1, old
        cells = joined.replace(old, new).split("\n\x00\n")
    return run_cells(_up_to_the_module(cells))


@pytest.mark.parametrize("name", MODULE_MISTAKES)
def test_module_mistakes_are_named(name):
    changes, words = MODULE_MISTAKES[name]
    (result,) = run_checks(EX, "q3_module", namespace=_module_namespace(changes))
    assert_named(result, words)


def test_the_starter_fixed_by_renormalising_the_weights_passes(solution):
    """A right fix that differs from the reference: keep the starter's weights, divide the
    left-out rows by their sums."""
    fixed = (WEIGHTS_THEN_LEAVE_OUT
             + "            weights = weights / weights.sum(dim=-1, keepdim=True)\n"
             + "        return weights @ values\n")
    (result,) = run_checks(EX, "q3_module", namespace=_module_namespace([(FORWARD, fixed)]))
    assert result.passed, result.message


def _learner_with_q1_solved() -> list[str]:
    cells = notebook_cells(LEARNER)
    cells[1] = notebook_cells(SOLUTION)[1]
    return cells


STARTER_STAGES = [
    # the learner's path through the debugging question, one fix after another
    ([], "has no parameter or buffer named 'log_bandwidth'"),
    ([(".exp().item()", ".exp()")], "has no parameter or buffer named 'log_bandwidth'"),
    ([(".exp().item()", ".exp()"), ("torch.tensor(init_bandwidth)",
                                    "nn.Parameter(torch.tensor(init_bandwidth))")],
     "not renormalised"),
    ([(".exp().item()", ".exp()"), ("torch.tensor(init_bandwidth)",
                                    "nn.Parameter(torch.tensor(init_bandwidth))"),
      ("weights * (1 - torch.eye(len(queries)))", "weights.masked_fill(torch.eye(len(queries), "
       "dtype=torch.bool), 0.0)\n            weights = weights / weights.sum(-1, keepdim=True)")],
     "__init__ stores init_bandwidth itself"),
]


@pytest.mark.parametrize("stage", range(len(STARTER_STAGES)))
def test_each_bug_of_the_starter_is_caught(stage):
    changes, words = STARTER_STAGES[stage]
    cells = _learner_with_q1_solved()
    (index,) = [i for i, c in enumerate(cells) if "class LearnableBandwidthPooling" in c]
    source = cells[index]
    for old, new in [('        raise NotImplementedError('
                      '"delete this line, then run the cell below")\n', ""), *changes]:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    cells[index] = source
    (result,) = run_checks(EX, "q3_module", namespace=run_cells(_up_to_the_module(cells)))
    assert_named(result, words)


# --------------------------------------------------------------------------- question 4
def _loo(x, y, h, leave_out="mask"):
    """Leave-one-out residuals as a learner writes them (on purpose not the spec's code)."""
    scores = -_d2(x, x) / (2 * h**2)
    itself = torch.eye(len(x), dtype=torch.bool)
    if leave_out == "mask":
        scores = scores.masked_fill(itself, -math.inf)
    weights = torch.softmax(scores, dim=-1)
    if leave_out == "zero":
        weights = weights.masked_fill(itself, 0.0)
    if leave_out == "renormalise":
        weights = weights.masked_fill(itself, 0.0)
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights @ y - y


def _errors(x, y, candidates, leave_out="mask"):
    return torch.stack([torch.mean(_loo(x, y, h, leave_out) ** 2) for h in candidates])


BANDWIDTH_MISTAKES = {
    "itself included": (lambda x, y, c: c[int(_errors(x, y, c, "none").argmin())],
                        "each point included in its own prediction"),
    "not renormalised": (lambda x, y, c: c[int(_errors(x, y, c, "zero").argmin())],
                         "without renormalising"),
    "h not squared": (lambda x, y, c: c[int(torch.stack([torch.mean(
        (torch.softmax((-_d2(x, x) / (2 * h)).fill_diagonal_(-math.inf), -1) @ y - y) ** 2)
        for h in c]).argmin())], "is the bandwidth squared"),
    "square of the mean": (
        lambda x, y, c: c[int(torch.stack([torch.mean(_loo(x, y, h)) ** 2 for h in c]).argmin())],
        "the square of the mean error"),
    "argmax": (lambda x, y, c: c[int(_errors(x, y, c).argmax())], "largest leave-one-out error"),
    "index": (lambda x, y, c: int(_errors(x, y, c).argmin()), "position of the best candidate"),
    "error": (lambda x, y, c: float(_errors(x, y, c).min()), "smallest leave-one-out error itself"),
    "mean of the signed errors": (
        lambda x, y, c: c[int(torch.stack([torch.mean(_loo(x, y, h)) for h in c]).argmin())],
        "mean of the signed errors"),
    # not listed
    "all the errors": (lambda x, y, c: _errors(x, y, c), "expected a number, got a tensor of "
                                                         "shape (9,)"),
}


def test_other_right_ways_to_choose_pass(solution):
    def renormalised(x, y, c):  # leaves out by zeroing and renormalising
        return c[int(_errors(x, y, c, "renormalise").argmin())]

    def as_tensor(x, y, c):  # a 0-dimensional tensor counts as a number
        return torch.tensor(c)[_errors(x, y, c).argmin()]

    def summed(x, y, c):  # the sum of the squared errors ranks the candidates alike
        return c[int(torch.stack([torch.sum(_loo(x, y, h) ** 2) for h in c]).argmin())]

    for answer in (renormalised, as_tensor, summed):
        assert _judge(solution, "q4_bandwidth", answer).passed


FUNCTION_MISTAKES = [(question, name, table[name]) for question, table in [
    ("q1_weights", WEIGHT_MISTAKES), ("q2_predict", PREDICT_MISTAKES),
    ("q4_bandwidth", BANDWIDTH_MISTAKES)] for name in table]


@pytest.mark.parametrize("question, name, mistake", FUNCTION_MISTAKES,
                         ids=[f"{q}-{n}" for q, n, _ in FUNCTION_MISTAKES])
def test_mistakes_in_functions_are_named(solution, question, name, mistake):
    answer, words = mistake
    assert_named(_judge(solution, question, answer), words)


# --------------------------------------------------------------------------- question 5
@pytest.mark.parametrize("answer, words", [
    ("training down, held-out down", "the held-out error rises"),
    ("training up, held-out down", "training error falls towards 0"),
    ("training up, held-out up", "the held-out error does rise, but the training error falls"),
    (None, "gives back nothing"),
    (1, "the number 1"),
    (True, "you answered True"),
    ("Training down, held-out up", "is not one of the choices"),  # not listed
    ("down, up", "is not one of the choices"),  # not listed
])
def test_wrong_predictions_are_explained_without_giving_the_answer(solution, answer, words):
    result = _judge(solution, "q5_narrow", lambda: answer)
    assert_named(result, words)
    if answer is not None and not isinstance(answer, str):
        assert "training down, held-out up" not in result.message


def test_the_prediction_comes_before_the_experiment():
    cells = [c for c in json.loads(LEARNER.read_text())["cells"] if c["cell_type"] == "code"]
    sources = ["".join(c["source"]) for c in cells]
    answer = next(i for i, s in enumerate(sources) if "def narrow_bandwidth_errors" in s)
    experiment = next(i for i, s in enumerate(sources) if "leave-one-out" in s and "for h in" in s)
    verdict = next(i for i, s in enumerate(sources) if "narrow_bandwidth_errors)" in s)
    assert answer < experiment < verdict


# --------------------------------------------------------------------------- question 6
def _form(scale, bias):
    return lambda keys, h: {"scale": scale(h), "bias": bias(keys, h)}


RIGHT_SCALE = lambda h: 1 / h**2  # noqa: E731
RIGHT_BIAS = lambda k, h: -(k**2 / (2 * h**2)).sum(-1)  # noqa: E731
DOT_MISTAKES = {
    "scale 1/(2h^2)": (_form(lambda h: 1 / (2 * h**2), RIGHT_BIAS), "'scale'", "half the right"),
    "scale 1/h": (_form(lambda h: 1 / h, RIGHT_BIAS), "'scale'", "1 over each bandwidth;"),
    "scale -1/h^2": (_form(lambda h: -1 / h**2, RIGHT_BIAS), "'scale'", "wrong sign"),
    "scale h^2": (_form(lambda h: h**2, RIGHT_BIAS), "'scale'", "grows with the bandwidth"),
    "scale matrix": (_form(lambda h: torch.diag(1 / h**2), RIGHT_BIAS), "'scale'",
                     "whole diagonal matrix"),
    "bias +": (_form(RIGHT_SCALE, lambda k, h: (k**2 / (2 * h**2)).sum(-1)), "'bias'",
               "wrong sign"),
    "bias without 1/2": (_form(RIGHT_SCALE, lambda k, h: -((k / h) ** 2).sum(-1)), "'bias'",
                         "twice"),
    "bias over 2h": (_form(RIGHT_SCALE, lambda k, h: -(k**2 / (2 * h)).sum(-1)), "'bias'",
                     "by 2 h_f:"),
    "bias over (2h)^2": (_form(RIGHT_SCALE, lambda k, h: -((k / (2 * h)) ** 2).sum(-1)),
                         "'bias'", "4 h_f squared"),
    "bias of k": (_form(RIGHT_SCALE, lambda k, h: -(k / (2 * h**2)).sum(-1)), "'bias'",
                  "features themselves"),
    "bias without h": (_form(RIGHT_SCALE, lambda k, h: -0.5 * (k**2).sum(-1)), "'bias'",
                       "with no bandwidth"),
    "bias over summed h^2": (_form(RIGHT_SCALE, lambda k, h: -(k**2).sum(-1) / (2 * (h**2).sum())),
                             "'bias'", "one sum of the squared bandwidths"),
    "bias over mean h^2": (_form(RIGHT_SCALE,
                                 lambda k, h: -(k**2).sum(-1) / (2 * (h**2).mean())),
                           "'bias'", "one average squared bandwidth"),
    "bias averaged": (_form(RIGHT_SCALE, lambda k, h: -(k**2 / (2 * h**2)).mean(-1)), "'bias'",
                      "averages the features' terms"),
    "bias per feature": (_form(RIGHT_SCALE, lambda k, h: -(k**2 / (2 * h**2))), "'bias'",
                         "one entry per key and feature"),
    "bias over the keys": (_form(RIGHT_SCALE, lambda k, h: -(k**2 / (2 * h**2)).sum(0)),
                           "'bias'", "summed over the keys"),
    # not listed
    "one scale for all": (_form(lambda h: float(1 / (h**2).mean()), RIGHT_BIAS), "'scale'",
                          "expected a tensor of shape (3,), got a float"),
    "scale as a list": (_form(lambda h: (1 / h**2).tolist(), RIGHT_BIAS), "'scale'",
                        "expected a tensor of shape (3,), got a list of length 3"),
    "bias over the product": (_form(RIGHT_SCALE, lambda k, h: -(k**2).sum(-1) / (2 * h.prod()**2)),
                              "'bias'", "values differ"),
}


@pytest.mark.parametrize("name", DOT_MISTAKES)
def test_derivation_mistakes_cost_their_part_and_are_named(solution, name):
    answer, part, words = DOT_MISTAKES[name]
    result = _judge(solution, "q6_dot_product", answer)
    assert result.points == 1 and result.line().startswith("[PART]")
    assert_named(result, f"{part} in case 1 (4 keys in 3 dimensions", words)


def test_the_one_bandwidth_answer_of_the_chapter_fails(solution):
    """Section 1.8's answer with one squared bandwidth, the mean of the h_f squared: both
    parts wrong."""
    def chapter(keys, h):
        squared = (h**2).mean()
        return {"scale": 1 / squared, "bias": -(keys**2).sum(-1) / (2 * squared)}

    result = _judge(solution, "q6_dot_product", chapter)
    assert result.points == 0
    assert_named(result, "'scale' in case 1", "expected shape (3,), got ()", "one average squared")


def test_derivation_fitted_to_the_visible_cases_fails_a_held_back_one(solution):
    def fitted(keys, h):
        right = {"scale": RIGHT_SCALE(h), "bias": RIGHT_BIAS(keys, h)}
        return right if keys.shape[1] < 4 else {"scale": h * 0 + 1, "bias": keys.sum(-1)}

    result = _judge(solution, "q6_dot_product", fitted)
    assert_named(result, "held-back case 3 (the check does not show its inputs)")


def test_a_tuple_is_not_the_dict_asked_for(solution):
    result = _judge(solution, "q6_dot_product", lambda k, h: (RIGHT_SCALE(h), RIGHT_BIAS(k, h)))
    assert_named(result, "return a dict with the keys 'scale', 'bias' (got tuple)")
    assert result.points == 0


def test_other_right_derivations_pass(solution):
    def through_a_matrix(keys, h):  # H^-1 as a matrix, the bias as a quadratic form
        inverse = torch.diag(1 / h**2)
        return {"scale": torch.diagonal(inverse),
                "bias": -0.5 * torch.einsum("jf,fg,jg->j", keys, inverse, keys)}

    def rescaled(keys, h):  # divide every feature by its bandwidth: one bandwidth of 1
        return {"scale": (1 / h) * (1 / h), "bias": -(keys / h).pow(2).sum(-1) / 2}

    for answer in (through_a_matrix, rescaled):
        assert _judge(solution, "q6_dot_product", answer).passed


# --------------------------------------------------------------------------- the spec
def test_every_listed_mistake_gets_its_own_message():
    """The grader recognises each listed mistake as itself, not as an earlier one."""
    from attention_course.grading.checking import prepare
    from attention_course.grading.results import evaluate

    prepared = prepare(EX)
    for question in get_exercise(EX).questions:
        p = prepared[question.id]
        for mistake in question.mistakes:
            result = evaluate(question, p.cases, p.expected, p.wrong[mistake.name], p.wrong)
            assert result.points < question.points
            assert mistake.message in result.message, (question.id, mistake.name)


def test_the_given_fit_is_the_one_the_grader_uses(solution):
    module = solution["LearnableBandwidthPooling"](0.6)
    reference = spec.Pooling(0.6)
    g = torch.Generator().manual_seed(0)
    x, y, queries = torch.rand(10, generator=g) * 5, torch.randn(10, generator=g), torch.rand(3)
    mine, theirs = module.fit(x, y, queries, steps=5), reference.fit(x, y, queries, steps=5)
    torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-6)


def test_the_grader_names_the_mistakes_too(tmp_path):
    """Through the sandboxed grader: a module that turns the bandwidth into a number and a
    wrong prediction lose exactly their points, with the same messages."""
    cells = replace_in_solution(
        EX, ("self.log_bandwidth.exp()\n        scores",
             "self.log_bandwidth.exp().item()\n        scores"),
        ('return "training down, held-out up"', 'return "training down, held-out down"'))
    record = graded_record(EX, tmp_path, cells)
    by_id = {q.id: q for q in record.questions}
    assert record.score == record.max_score - 3, [q.message for q in record.questions]
    assert by_id["q3_module"].status == "error"
    assert "does not require grad" in by_id["q3_module"].message
    assert "the held-out error rises" in by_id["q5_narrow"].message
    assert record.notebook_errors == []


def test_a_zero_bias_loses_its_part_with_a_message(solution):
    """A typical slip: "the key's terms cancel like the query's, so the bias is 0". It must
    cost the bias part only (the comparison once divided by the zero answer)."""
    from attention_course.grading.checking import prepare
    from attention_course.grading.results import evaluate

    question = get_exercise(EX).question("q6_dot_product")
    p = prepare(EX)[question.id]
    answers = [{"scale": e["scale"], "bias": torch.zeros_like(e["bias"])} for e in p.expected]
    result = evaluate(question, p.cases, p.expected, answers, p.wrong)
    assert result.points == 1 and "'bias'" in result.message
