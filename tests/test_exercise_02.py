"""Exercise 2's typical mistakes, applied to the reference solution: each loses points
with a message that names it.

The first half are mistakes the spec lists (``Mistake``s, recognised by their outputs);
the second half are mistakes it does not list, whose feedback must still say what is off
(a diagnosis, a shape, a gradient, a choice). Most answers are judged by ``check``'s own
code in this process; a few notebooks with one line changed go through the real grader.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from grading_helpers import (
    choice,
    each_wrong_choice_test,
    grade_cells,
    judge,
    learner_starter,
    lost,
    named_mistakes_test,
    replace_in_solution,
)
from torch import nn

EXERCISE = "02_scoring"


feedback = functools.partial(lost, EXERCISE)


def _dot(q, k):
    return q @ k.transpose(1, 2)


def _scaled(q, k):
    return _dot(q, k) / math.sqrt(q.shape[-1])


def _cosine(q, k):
    return F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(1, 2)


def _length(x, dim=-1):
    return x.norm(dim=dim, keepdim=True)


class _Additive(nn.Module):
    """The right module; the mistakes below override ``forward`` or the layers."""

    def __init__(self, query_dim, key_dim, hidden_dim, bias=False):
        super().__init__()
        self.W_q = nn.Linear(query_dim, hidden_dim, bias=bias)
        self.W_k = nn.Linear(key_dim, hidden_dim, bias=bias)
        self.w_v = nn.Linear(hidden_dim, 1, bias=bias)

    def pairs(self, q, k):
        return self.W_q(q).unsqueeze(2) + self.W_k(k).unsqueeze(1)

    def forward(self, q, k):
        return self.w_v(torch.tanh(self.pairs(q, k))).squeeze(-1)


def _rates(rate):
    def hit_rates(q, k, target):
        return {"dot": rate(_dot(q, k), target), "scaled_dot": rate(_scaled(q, k), target),
                "cosine": rate(_cosine(q, k), target)}

    return hit_rates


def _moments(weights, variance):
    def hard_attention_moments(scores, values):
        w = weights(scores)
        mean = w @ values
        return {"mean": mean, "variance": variance(w, values, mean)}

    return hard_attention_moments


def _softmax(scores):
    return torch.softmax(scores, dim=-1)


# --------------------------------------------------------------------------- listed mistakes
class _NoTanh(_Additive):
    def forward(self, q, k):
        return self.w_v(self.pairs(q, k)).squeeze(-1)


class _Swapped(_Additive):
    def forward(self, q, k):
        return self.w_v(torch.tanh(self.W_q(q).unsqueeze(1) + self.W_k(k).unsqueeze(2))).squeeze(-1)


class _SqueezeAll(_Additive):
    def forward(self, q, k):
        return self.w_v(torch.tanh(self.pairs(q, k))).squeeze()


class _TanhEach(_Additive):
    def forward(self, q, k):
        pairs = torch.tanh(self.W_q(q)).unsqueeze(2) + torch.tanh(self.W_k(k)).unsqueeze(1)
        return self.w_v(pairs).squeeze(-1)


class _NoReadout(_Additive):
    def forward(self, q, k):
        return torch.tanh(self.pairs(q, k)).sum(-1)


LISTED = [
    # q1: the scale, the axes, scores vs weights
    ("q1_scaled_dot", _dot, "sqrt(d) times too large"),
    ("q1_scaled_dot", lambda q, k: _dot(q, k) / q.shape[-1], "divided by d itself"),
    ("q1_scaled_dot", lambda q, k: _dot(q, k) * math.sqrt(q.shape[-1]), "multiplied by sqrt(d)"),
    ("q1_scaled_dot", lambda q, k: _dot(q, k) / q.shape[-1] ** 1 / 2, "divided by 2d"),
    ("q1_scaled_dot", lambda q, k: _dot(q, k) / math.sqrt(k.shape[1]), "number of keys"),
    ("q1_scaled_dot", lambda q, k: _dot(q, k) / math.sqrt(q.shape[1]), "number of queries"),
    ("q1_scaled_dot", lambda q, k: _dot(q, k) / math.sqrt(len(q)), "batch size"),
    ("q1_scaled_dot", lambda q, k: _dot(k, q) / math.sqrt(q.shape[-1]), "transposed"),
    ("q1_scaled_dot", lambda q, k: torch.softmax(_scaled(q, k), dim=-1), "attention weights"),
    # q2: the starter, both half-fixes, and other ways to get a cosine wrong
    ("q2_cosine_debug", lambda q, k: _dot(q / _length(q, 1), k / _length(k, 1)),
     "across the sequence"),
    ("q2_cosine_debug", lambda q, k: _dot(q / _length(q, 1).clamp_min(1e-8),
                                          k / _length(k, 1).clamp_min(1e-8)),
     "across the sequence"),
    ("q2_cosine_debug", lambda q, k: _dot(q, k) / (_length(q) * _length(k).transpose(1, 2)),
     "still gives NaN"),
    ("q2_cosine_debug", lambda q, k: _dot(q / _length(q).clamp_min(1e-8), k / _length(k, 1)),
     "key lengths are still taken across the sequence"),
    ("q2_cosine_debug", lambda q, k: _dot(q / _length(q, 1), k / _length(k).clamp_min(1e-8)),
     "query lengths are still taken across the sequence"),
    ("q2_cosine_debug", lambda q, k: _dot(q / _length(q, 0), k / _length(k, 0)),
     "across the batch"),
    ("q2_cosine_debug", lambda q, k: _dot(q, k) / (q.pow(2).sum(-1, keepdim=True) * k.pow(2)
                                                   .sum(-1, keepdim=True).transpose(1, 2)
                                                   ).clamp_min(1e-8),
     "squared lengths"),
    ("q2_cosine_debug", lambda q, k: _dot(q / q.abs().sum(-1, keepdim=True).clamp_min(1e-8),
                                          k / k.abs().sum(-1, keepdim=True).clamp_min(1e-8)),
     "absolute entries"),
    ("q2_cosine_debug", lambda q, k: _dot(F.normalize(q, dim=-1), k), "key lengths are missing"),
    ("q2_cosine_debug", _dot, "plain dot products"),
    ("q2_cosine_debug", lambda q, k: 1 - _cosine(q, k), "distance"),
    ("q2_cosine_debug", lambda q, k: _dot(q / q.norm(), k / k.norm()),
     "one length for the whole tensor"),
    ("q2_cosine_debug", lambda q, k: F.cosine_similarity(q, k, dim=-1),
     "one cosine per position"),
    # q3 and q7: every wrong choice of every part has its own message (see also below)
    ("q3_predict_long_keys",
     lambda: {"finds_aligned_key": "dot", "same_winner_as_dot": "scaled dot"},
     "a length times a length times a cosine"),
    ("q7_predict_softmax",
     lambda: {"add_constant": "larger", "dot_query_times_3": "larger",
              "cosine_query_times_3": "same"},
     "only the differences between scores"),
    # q4: what is counted
    ("q4_hit_rates", _rates(lambda s, t: (s.argmax(-1) == t).sum()), "number of hits"),
    ("q4_hit_rates", _rates(lambda s, t: 100 * (s.argmax(-1) == t).float().mean()),
     "percentage"),
    ("q4_hit_rates", _rates(lambda s, t: (s.argmax(-1) != t).float().mean()), "miss"),
    ("q4_hit_rates", _rates(lambda s, t: (s.argmin(-1) == t).float().mean()), "lowest score"),
    ("q4_hit_rates", _rates(lambda s, t: _softmax(s).gather(-1, t[..., None]).mean()),
     "weight on each query's target key"),
    ("q4_hit_rates", _rates(lambda s, t: _softmax(s).max(-1).values.mean()),
     "largest attention weight"),
    ("q4_hit_rates", _rates(lambda s, t: (s.max(-1).values == t).float().mean()),
     "rather than the position"),
    ("q4_hit_rates", lambda q, k, t: {**_rates(lambda s, t: (s.argmax(-1) == t).float().mean())(
        q, k, t), "cosine": (_scaled(q, k).argmax(-1) == t).float().mean()},
     "the dot product's"),
    ("q4_hit_rates", _rates(lambda s, t: (s.argmax(-1) == t).sum() / len(t)),
     "by the batch size only"),
    ("q4_hit_rates", _rates(lambda s, t: (s[0].argmax(-1) == t[0]).float().mean()),
     "first batch element only"),
    # q5: the additive score
    ("q5_additive", _NoTanh, "there is no tanh"),
    ("q5_additive", _Swapped, "transposed"),
    ("q5_additive", _SqueezeAll, "removed every axis of size 1"),
    ("q5_additive", _TanhEach, "on its own"),
    ("q5_additive", _NoReadout, "w_v reads it out"),
    # q6: the derivation
    ("q6_variance", lambda d, sq, sk: {"variance": d * sq * sk, "divisor": math.sqrt(d * sq * sk)},
     "standard deviations where their squares belong"),
    ("q6_variance", lambda d, sq, sk: {"variance": d, "divisor": math.sqrt(d)},
     "both standard deviations are 1"),
    ("q6_variance", lambda d, sq, sk: {"variance": d * (sq * sk) ** 2,
                                       "divisor": d * (sq * sk) ** 2},
     "dividing by the variance"),
    ("q6_variance", lambda d, sq, sk: {"variance": d * (sq * sk) ** 2,
                                       "divisor": 1 / (math.sqrt(d) * sq * sk)},
     "factor to multiply by"),
    ("q6_variance", lambda d, sq, sk: {"variance": d * (sq * sk) ** 2, "divisor": d * sq * sk},
     "multiplies d itself"),
    ("q6_variance", lambda d, sq, sk: {"variance": d * (sq * sk) ** 2,
                                       "divisor": math.sqrt(d) * sq**2 * sk**2},
     "multiplies sqrt(d) by the two variances"),
    # q8: the mean and the variance of a draw
    ("q8_hard_moments", _moments(lambda s: F.one_hot(s.argmax(-1), s.shape[-1]).float(),
                                 lambda w, v, m: torch.zeros_like(m)),
     "deterministic hard attention"),
    ("q8_hard_moments", _moments(_softmax, lambda w, v, m: w @ v**2), "subtracts the square"),
    ("q8_hard_moments", _moments(_softmax, lambda w, v, m: m**2 - w @ v**2), "negative"),
    ("q8_hard_moments", _moments(_softmax, lambda w, v, m: (w @ v**2 - m**2).sqrt()),
     "standard deviation"),
    ("q8_hard_moments", _moments(lambda s: torch.softmax(s, dim=0),
                                 lambda w, v, m: w @ v**2 - m**2),
     "over the queries"),
    ("q8_hard_moments", lambda s, v: {"mean": _softmax(s) @ v,
                                      "variance": v.var(dim=0, keepdim=True).expand(len(s), -1)},
     "plain sample variance"),
]


test_every_wrong_choice_has_its_own_message = each_wrong_choice_test(
    EXERCISE, ["q3_predict_long_keys", "q7_predict_softmax"])


# --------------------------------------------------------------------------- not listed
class _Biased(_Additive):
    def __init__(self, query_dim, key_dim, hidden_dim):
        super().__init__(query_dim, key_dim, hidden_dim, bias=True)


class _ReadoutBias(_Additive):
    def __init__(self, query_dim, key_dim, hidden_dim):
        super().__init__(query_dim, key_dim, hidden_dim)
        self.w_v = nn.Linear(hidden_dim, 1)


class _OverHidden(_Additive):
    def forward(self, q, k):
        return super().forward(q, k) / math.sqrt(self.w_v.in_features)


class _OtherNames(nn.Module):
    def __init__(self, query_dim, key_dim, hidden_dim):
        super().__init__()
        self.Wq = nn.Linear(query_dim, hidden_dim, bias=False)
        self.Wk = nn.Linear(key_dim, hidden_dim, bias=False)
        self.v = nn.Linear(hidden_dim, 1, bias=False)


class _Transposed(nn.Module):
    def __init__(self, query_dim, key_dim, hidden_dim):
        super().__init__()
        self.W_q = nn.Linear(hidden_dim, query_dim, bias=False)


class _NoSuper(nn.Module):
    def __init__(self, query_dim, key_dim, hidden_dim):
        self.W_q = nn.Linear(query_dim, hidden_dim, bias=False)


class _LayersSwapped(_Additive):
    def pairs(self, q, k):
        return self.W_k(q).unsqueeze(2) + self.W_q(k).unsqueeze(1)


class _NotSqueezed(_Additive):
    def forward(self, q, k):
        return self.w_v(torch.tanh(self.pairs(q, k)))


def _in_place(q, k):
    q /= math.sqrt(q.shape[-1])
    return _dot(q, k)


def _rebuilt(q, k):
    """Every score taken out as a Python number and put back: no gradient."""
    def score(b, i, j):
        return float((q[b, i] @ k[b, j]).detach()) / math.sqrt(q.shape[-1])

    return torch.tensor([[[score(b, i, j) for j in range(k.shape[1])]
                          for i in range(q.shape[1])] for b in range(q.shape[0])])


NOT_LISTED = [
    ("q1_scaled_dot", lambda q, k: _dot(q, k) / math.sqrt(q.shape[-1] * k.shape[1]),
     "2.236 times too small"),
    ("q1_scaled_dot", lambda q, k: torch.softmax(_scaled(q, k), dim=1), "column"),
    ("q1_scaled_dot", lambda q, k: _scaled(q, k) + 1, "shifted by the same amount"),
    ("q1_scaled_dot", _rebuilt, "does not carry gradients"),
    ("q1_scaled_dot", lambda q, k: _scaled(q, k).detach(), "does not carry gradients"),
    ("q1_scaled_dot", lambda q, k: _scaled(q[0:1], k[0:1])[0], "expected shape (2, 3, 5)"),
    ("q2_cosine_debug", lambda q, k: _cosine(q, k).abs(), "every negative one came out positive"),
    ("q2_cosine_debug", lambda q, k: _dot(q, k) / (_length(q) + _length(k).transpose(1, 2)),
     "between -1 and 1"),
    ("q2_cosine_debug", lambda q, k: (_dot(q, k) / (_length(q) * _length(k).transpose(1, 2)))
     .nan_to_num(1.0), "except those of the zero vector"),
    ("q2_cosine_debug", lambda q, k: _cosine(q, k) / math.sqrt(q.shape[-1]), "times too small"),
    ("q3_predict_long_keys",
     lambda: {"finds_aligned_key": "Cosine", "same_winner_as_dot": "scaled dot"},
     "not one of the choices"),
    ("q3_predict_long_keys", lambda: {"finds_aligned_key": "cosine"},
     "return a dict with the keys"),
    ("q4_hit_rates", _rates(lambda s, t: (s.argmax(-1) == t).float().mean(-1)),
     "expected a number, got a tensor of shape (16,)"),
    ("q5_additive", _Biased, "do your layers have biases?"),
    ("q5_additive", _ReadoutBias, "do your layers have biases?"),
    ("q5_additive", _OverHidden, "2.828 times too small"),
    ("q5_additive", _OtherNames, "has no parameter or buffer named 'W_q.weight'"),
    ("q5_additive", _NoSuper, "cannot assign module before Module.__init__() call"),
    ("q5_additive", _LayersSwapped, "mat1 and mat2 shapes cannot be multiplied"),
    ("q5_additive", _NotSqueezed, "expected shape (2, 3, 5), got (2, 3, 5, 1)"),
    ("q1_scaled_dot", lambda q, k: _dot(q, k) / math.log(q.shape[-1]), "1.443 times too large"),
    ("q1_scaled_dot", _in_place, "a leaf Variable that requires grad is being used in an "
                                 "in-place operation"),
    ("q8_hard_moments", lambda s, v: {"mean": _softmax(s) @ v, "variance": (
        _softmax(s) @ v**2 - (_softmax(s) @ v) ** 2).sum(-1)}, "expected shape (2, 1), got (2,)"),
    ("q5_additive", _Transposed, "but the exercise asks for shape (8, 4)"),
    ("q8_hard_moments", _moments(_softmax, lambda w, v, m: (w @ v**2 - m**2)[:, :1]),
     "expected shape (3, 2), got (3, 1)"),
    ("q7_predict_softmax",
     lambda: {"add_constant": "same", "dot_query_times_3": "bigger",
              "cosine_query_times_3": "same"},
     "'bigger' is not one of the choices"),
]


test_each_mistake_loses_points_with_a_message_that_names_it = named_mistakes_test(
    EXERCISE, LISTED, NOT_LISTED)


def test_partial_credit_per_part():
    right_variance = judge(EXERCISE, "q6_variance", lambda d, sq, sk: {
        "variance": d * sq**2 * sk**2, "divisor": math.sqrt(d)})
    assert (right_variance.points, right_variance.status) == (1, "failed")
    right_mean = judge(EXERCISE, "q8_hard_moments",
                       _moments(_softmax, lambda w, v, m: torch.zeros_like(m)))
    assert right_mean.points == 1 and "not 0" in right_mean.message


def test_numbers_read_off_a_printout_fail_the_held_back_cases():
    result = feedback("q6_variance", lambda d, sq, sk: {"variance": 144.0, "divisor": 12.0})
    assert result.points == 0
    seen = {(16, 2.0, 1.5): (144.0, 12.0), (64, 0.5, 0.5): (4.0, 2.0)}  # the visible cases
    fitted = feedback("q6_variance", lambda d, sq, sk: dict(
        zip(("variance", "divisor"), seen.get((d, sq, sk), (1.0, 1.0)), strict=True)))
    assert fitted.points == 0 and "held-back case 3" in fitted.message
    always_one = feedback("q4_hit_rates", lambda q, k, t: {**_rates(
        lambda s, t: (s.argmax(-1) == t).float().mean())(q, k, t), "cosine": 1.0})
    assert always_one.points == 2


def test_hit_rates_says_when_the_cosine_it_calls_is_what_fails():
    """``hit_rates`` calling a broken ``cosine_score``: the feedback points at question 2."""
    namespace: dict = {"torch": torch}
    exec(
        "def cosine_score(q, k):\n"
        "    return (q / q.norm(dim=1, keepdim=True)) @ (k / k.norm(dim=1, keepdim=True)).mT\n"
        "def hit_rates(q, k, target):\n"
        "    rate = lambda s: (s.argmax(-1) == target).float().mean()\n"
        "    scores = q @ k.mT\n"
        "    return {'dot': rate(scores), 'scaled_dot': rate(scores),\n"
        "            'cosine': rate(cosine_score(q, k))}\n",
        namespace,
    )
    result = judge(EXERCISE, "q4_hit_rates", namespace["hit_rates"],
                   cosine_score=namespace["cosine_score"])
    assert result.points == 2
    assert "calls your answer to q2_cosine_debug (`cosine_score`)" in result.message


def test_the_learners_starter_is_recognised_once_its_raise_line_is_gone():
    namespace: dict = {"torch": torch}
    exec(learner_starter(EXERCISE, "def cosine_score"), namespace)
    result = feedback("q2_cosine_debug", namespace["cosine_score"])
    assert "across the sequence" in result.message
    assert "held-back" not in result.message  # a visible case shows it


# --------------------------------------------------------------------------- the real grader
def test_grader_names_one_line_mistakes(tmp_path, server):
    cells = replace_in_solution(
        EXERCISE, ("/ math.sqrt(q.shape[-1])", ""),
        ("q.norm(dim=-1, keepdim=True).clamp_min(1e-8)", "q.norm(dim=-1, keepdim=True)"),
        ("k.norm(dim=-1, keepdim=True).clamp_min(1e-8)", "k.norm(dim=-1, keepdim=True)"),
        choice("add_constant", "same", "larger"))
    graded = grade_cells(EXERCISE, tmp_path, cells, server)
    assert "sqrt(d) times too large" in graded["q1_scaled_dot"].message
    assert "still gives NaN" in graded["q2_cosine_debug"].message
    # hit_rates calls both: its own answer is right, so it passes all the same
    assert graded["q4_hit_rates"].status == "passed"
    assert graded["q7_predict_softmax"].points == 2
    assert "differences between scores" in graded["q7_predict_softmax"].message
    assert graded["q5_additive"].status == "passed"
