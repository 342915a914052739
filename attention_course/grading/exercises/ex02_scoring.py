"""Exercise 2: attention scoring functions (chapter 2).

Eight questions, five kinds: write the scaled dot product and the additive score
(implement), repair a broken cosine score (debug), predict which score finds the key that
points along the query when keys have very different lengths and what rescaling does to
a softmax (predict), measure it (experiment), and derive the variance of ``q . k`` and
the mean and variance of stochastic hard attention (derive).

The references are the package's own chapter-2 code (``attention_course.scoring``) or
short formulas here. Every known mistake is a function called like the reference; the
grader names it when the learner's output matches what it outputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attention_course import scoring
from attention_course.grading.exercises._offsets import fits_with_offsets
from attention_course.grading.spec import Case, Exercise, Mistake, Question
from attention_course.grading.tables import drawn_cases, mistake_table, prediction
from attention_course.i18n import N_, _

# The chapter's headings, exactly as written in book/02_scoring.ipynb.
DOT = "2.2 Dot product and scaled dot product"
ADDITIVE = "2.3 Additive attention: queries and keys of different sizes"
WHY_SQRT_D = "2.5 Why divide by $\\sqrt{d}$?"
TEMPERATURE = "Try it: the temperature of a softmax"
HARD = "2.6 Soft and hard attention"


# --------------------------------------------------------------------------- helpers
def _qk(g: torch.Generator, b: int, nq: int, nk: int, dq: int, dk: int | None = None,
        scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    dk = dq if dk is None else dk
    return (torch.randn(b, nq, dq, generator=g) * scale,
            torch.randn(b, nk, dk, generator=g) * scale)


def _output(value: Any) -> Any:
    """The output of an answer (a ``grad=True`` answer is ``{"output", "gradients"}``)."""
    if type(value) is dict and "output" in value:
        return value["output"]
    return value


def _same_structure(expected: Any, got: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    e, g = _output(expected), _output(got)
    if not (isinstance(e, torch.Tensor) and isinstance(g, torch.Tensor)):
        return None
    if e.shape != g.shape or e.numel() < 2 or not g.is_floating_point():
        return None
    e, g = e.detach().double(), g.detach().double()
    if not bool(torch.isfinite(g).all()):
        return None
    return e, g


def _relation(expected: Any, got: Any, what: str = N_("scores")) -> str | None:
    """A wrong output that is the right one transposed, times a constant or plus a
    constant: say which, so that the learner knows where to look."""
    pair = _same_structure(expected, got)
    if pair is None:
        return None
    e, g = pair
    what = _(what)
    if bool((g >= 0).all()) and e.dim() >= 2:
        if bool(torch.allclose(g.sum(dim=-1), torch.ones(()).double(), atol=1e-4)):
            return _("every row of your output sums to 1: these look like softmax "
                     "weights, but the question asks for the {what} before any "
                     "softmax").format(what=what)
        if bool(torch.allclose(g.sum(dim=-2), torch.ones(()).double(), atol=1e-4)):
            return _("every column of your output sums to 1: these look like softmax "
                     "weights, but the question asks for the {what} before any "
                     "softmax").format(what=what)

    def close(a: torch.Tensor, b: torch.Tensor) -> bool:
        return bool(torch.allclose(a, b, rtol=1e-4, atol=1e-6))

    if e.dim() >= 2 and e.shape[-1] == e.shape[-2] and close(g, e.transpose(-1, -2)):
        return _("your {what} are the right ones transposed: rows must run over the "
                 "queries and columns over the keys").format(what=what)
    denominator = float((e * e).sum())
    if denominator > 0:
        ratio = float((g * e).sum()) / denominator
        if abs(ratio - 1) > 1e-3 and abs(ratio) > 1e-9 and close(g, ratio * e):
            if ratio > 1:
                return _("your {what} are all {ratio} times too large: the formula is right "
                         "up to a constant factor, so look at the scale").format(
                             what=what, ratio=f"{ratio:.4g}")
            if ratio > 0:
                return _("your {what} are all {ratio} times too small: the formula is right "
                         "up to a constant factor, so look at the scale").format(
                             what=what, ratio=f"{1 / ratio:.4g}")
            return _("your {what} are all {ratio} times the right ones (the sign is "
                     "flipped): the formula is right up to a constant factor, so look at "
                     "the scale").format(what=what, ratio=f"{ratio:.4g}")
    if bool((e < -1e-3).any()) and close(g, e.abs()):
        return _("your {what} are right in size, but every negative one came out "
                 "positive: is something taking an absolute value or a "
                 "square?").format(what=what)
    offset = float((g - e).mean())
    if abs(offset) > 1e-6 and close(g, e + offset):
        return _("your {what} are all shifted by the same amount, {offset}: something "
                 "adds a constant").format(what=what, offset=f"{offset:.4g}")
    return None


# --------------------------------------------------------------------------- question 1
def _scaled_dot_case(g: torch.Generator, b: int, nq: int, nk: int, d: int) -> Case:
    return Case(args=_qk(g, b, nq, nk, d), label=f"B={b}, Nq={nq}, Nk={nk}, d={d}")


# case 1 tells the known mistakes apart: sqrt(d) = 4, d = 16, 2d = 32, Nq = 3, Nk = 5, B = 2
scaled_dot_cases = drawn_cases(201, _scaled_dot_case, visible=[(2, 3, 5, 16), (1, 6, 6, 4)],
                               hidden=[(3, 2, 7, 9), (2, 5, 3, 25)])


def _dot(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return q @ k.transpose(1, 2)


SCALED_DOT_MISTAKES = (
    Mistake("unscaled", _dot,
            "your scores are sqrt(d) times too large (d is the size of each query and key "
            "vector, the last axis): did you forget to divide by sqrt(d)?"),
    Mistake("divided_by_d", lambda q, k: _dot(q, k) / q.shape[-1],
            "your scores are divided by d itself, so they come out sqrt(d) times too "
            "small: the scale is the square root of d"),
    Mistake("times_sqrt_d", lambda q, k: _dot(q, k) * math.sqrt(q.shape[-1]),
            "your scores are d times too large: you multiplied by sqrt(d) where the "
            "formula divides by it"),
    Mistake("half_power_precedence", lambda q, k: _dot(q, k) / q.shape[-1] / 2,
            "your scores are divided by 2d: a power of one half written as 1/2 without "
            "parentheses is read as the first power, then divided by 2"),
    Mistake("sqrt_num_keys", lambda q, k: _dot(q, k) / math.sqrt(k.shape[1]),
            "you divided by the square root of the number of keys; d is the size of each "
            "vector (the last axis), not how many keys there are"),
    Mistake("sqrt_num_queries", lambda q, k: _dot(q, k) / math.sqrt(q.shape[1]),
            "you divided by the square root of the number of queries; d is the size of "
            "each vector (the last axis), not how many queries there are"),
    Mistake("sqrt_batch", lambda q, k: _dot(q, k) / math.sqrt(q.shape[0]),
            "you divided by the square root of the batch size (the first axis); d is the "
            "size of each vector, the last axis"),
    Mistake("queries_keys_swapped", lambda q, k: k @ q.transpose(1, 2) / math.sqrt(q.shape[-1]),
            "your score matrix is transposed: it has one row per key and one column per "
            "query, but entry (i, j) must score query i against key j"),
    Mistake("weights_not_scores",
            lambda q, k: torch.softmax(_dot(q, k) / math.sqrt(q.shape[-1]), dim=-1),
            "you returned attention weights (each row sums to 1): the question asks for the "
            "scores, before any softmax"),
)


# --------------------------------------------------------------------------- question 2
def cosine_cases() -> list[Case]:
    g = torch.Generator().manual_seed(202)
    cases = [
        Case(args=_qk(g, 2, 4, 4, 3, scale=2.0), label="B=2, Nq=4, Nk=4, d=3"),
        Case(args=_qk(g, 1, 2, 6, 5, scale=0.5), label="B=1, Nq=2, Nk=6, d=5"),
    ]
    q, k = _qk(g, 1, 3, 4, 5)
    q[0, 1] = 0.0
    cases.append(Case(args=(q, k), label="B=1, Nq=3, Nk=4, d=5; query 1 is the zero vector"))
    q, k = _qk(g, 2, 2, 5, 4, scale=3.0)
    k[1, 3] = 0.0
    cases.append(Case(args=(q, k), label="B=2, Nq=2, Nk=5, d=4; a zero key", hidden=True))
    q, k = _qk(g, 3, 5, 2, 6, scale=10.0)
    cases.append(Case(args=(q, k), hidden=True))
    return cases


def _lengths(x: torch.Tensor, eps: float = 0.0, dim: int = -1) -> torch.Tensor:
    """Each vector's length over ``dim`` (kept as an axis of size 1), at least ``eps``."""
    return x.norm(dim=dim, keepdim=True).clamp_min(eps)


def _unit_dot(q_len: torch.Tensor, k_len: torch.Tensor, q: torch.Tensor,
              k: torch.Tensor) -> torch.Tensor:
    return _dot(q / q_len, k / k_len)


def starter_cosine(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The broken function the learner starts from: written for ``(N, d)`` inputs, it takes
    lengths over axis 1, which on a batch ``(B, N, d)`` is the sequence; and a zero vector
    gives NaN (once the axis is right)."""
    return _unit_dot(_lengths(q, dim=1), _lengths(k, dim=1), q, k)


def _position_cosine(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The cosine of query i with key i alone, ``(B, N)`` (where ``Nq == Nk``)."""
    if q.shape[1] != k.shape[1]:
        raise ValueError("this mistake raises where the numbers of queries and keys differ")
    return F.cosine_similarity(q, k, dim=-1)


COSINE_MISTAKES = (
    Mistake("starter_sequence_axis", starter_cosine,
            "your lengths are taken across the sequence (axis 1: over all queries, or all "
            "keys) instead of over the d entries of each vector, the last axis; on a batch, "
            "axis 1 is no longer the feature axis"),
    Mistake("zero_vector_nan", lambda q, k: _unit_dot(_lengths(q), _lengths(k), q, k),
            "the lengths are right, but a zero vector still gives NaN (0 divided by 0): keep "
            "each length away from zero (a tiny floor such as 1e-8) so that a zero vector "
            "scores 0"),
    Mistake("key_lengths_across_sequence",
            lambda q, k: _unit_dot(_lengths(q, 1e-8), _lengths(k, 1e-8, dim=1), q, k),
            "the query lengths are right now, but the key lengths are still taken across "
            "the sequence (over all keys) instead of over the d entries of each key"),
    Mistake("query_lengths_across_sequence",
            lambda q, k: _unit_dot(_lengths(q, 1e-8, dim=1), _lengths(k, 1e-8), q, k),
            "the key lengths are right now, but the query lengths are still taken across "
            "the sequence (over all queries) instead of over the d entries of each query"),
    Mistake("lengths_across_batch",
            lambda q, k: _unit_dot(_lengths(q, 1e-8, dim=0), _lengths(k, 1e-8, dim=0), q, k),
            "your lengths are taken across the batch (axis 0) instead of over the d entries "
            "of each vector, the last axis"),
    Mistake("squared_lengths",
            lambda q, k: _unit_dot(_lengths(q, 1e-8) ** 2, _lengths(k, 1e-8) ** 2, q, k),
            "you divided by the squared lengths; the cosine divides by the lengths "
            "themselves"),
    Mistake("l1_lengths",
            lambda q, k: _unit_dot(q.abs().sum(-1, keepdim=True).clamp_min(1e-8),
                                   k.abs().sum(-1, keepdim=True).clamp_min(1e-8), q, k),
            "you measured each length as the sum of the absolute entries; a vector's length "
            "is the square root of the sum of its squared entries"),
    Mistake("only_queries_normalised", lambda q, k: _dot(q / _lengths(q, 1e-8), k),
            "only the queries are divided by their lengths: the key lengths are missing"),
    Mistake("only_keys_normalised", lambda q, k: _dot(q, k / _lengths(k, 1e-8)),
            "only the keys are divided by their lengths: the query lengths are missing"),
    Mistake("plain_dot", _dot,
            "these are plain dot products: nothing is divided by the lengths"),
    Mistake("queries_keys_swapped",
            lambda q, k: scoring.cosine_score(k, q),
            "your score matrix is transposed: one row per key and one column per query, "
            "but entry (i, j) must score query i against key j"),
    Mistake("cosine_distance", lambda q, k: 1 - scoring.cosine_score(q, k),
            "you gave one minus the cosine (a distance, small for similar vectors); the "
            "score is the cosine itself"),
    Mistake("whole_tensor_lengths", lambda q, k: _dot(q / q.norm().clamp_min(1e-8),
                                                      k / k.norm().clamp_min(1e-8)),
            "you divided by one length for the whole tensor (every entry of every vector "
            "at once); each query and each key is divided by its own length, over its d "
            "entries"),
    Mistake("cosine_per_position", _position_cosine,
            "you computed one cosine per position, query i with key i only; the score "
            "matrix pairs every query with every key, one row per query and one column per "
            "key"),
)


def _cosine_diagnose(case: Case, expected: Any, got: Any) -> str | None:
    pair = _same_structure(expected, got)
    if pair is None:
        return None
    e, g = pair
    if float(g.abs().max()) > 1 + 1e-4:
        return _("a cosine lies between -1 and 1, but one of your scores is {size} in "
                 "size: is a length missing from the division?").format(
                     size=f"{float(g.abs().max()):.4g}")
    q, k = case.args
    zero = (q.norm(dim=-1) == 0).unsqueeze(2) | (k.norm(dim=-1) == 0).unsqueeze(1)
    wrong = ~torch.isclose(g, e, rtol=1e-4, atol=1e-6)
    if bool(zero.any()) and bool(wrong.any()) and not bool((wrong & ~zero).any()):
        return _("every score is right except those of the zero vector: it has no "
                 "direction, so its cosine with any vector is 0")
    return _relation(expected, got)


# --------------------------------------------------------------------------- questions 3, 4
def long_key_task(g: torch.Generator, b: int, nq: int, nk: int, d: int, noise: float):
    """Keys of random directions and lengths from 0.2 to 5 (log-uniform); each query
    points along its target key's direction, plus noise. -> ``q, k, target``."""
    directions = F.normalize(torch.randn(b, nk, d, generator=g), dim=-1)
    log_lengths = torch.empty(b, nk, 1).uniform_(math.log(0.2), math.log(5.0), generator=g)
    k = directions * log_lengths.exp()
    target = torch.randint(0, nk, (b, nq), generator=g)
    aligned = torch.gather(directions, 1, target[..., None].expand(-1, -1, d))
    q = aligned + noise * torch.randn(b, nq, d, generator=g) / math.sqrt(d)
    return q, k, target


LONG_KEYS = {"finds_aligned_key": "cosine", "same_winner_as_dot": "scaled dot"}

LONG_KEY_WRONG = [
    ("dot_finds_aligned", "finds_aligned_key", "dot",
     "a dot product is a length times a length times a cosine: a long key that "
     "points roughly the right way outscores a short key that points exactly along "
     "the query"),
    ("scaled_finds_aligned", "finds_aligned_key", "scaled dot",
     "the scaled dot product divides every score by the same sqrt(d), which cannot "
     "change which key scores highest: it favours long keys exactly as the dot "
     "product does"),
    ("cosine_same_winner", "same_winner_as_dot", "cosine",
     "the cosine divides each key's score by that key's own length, so it can "
     "reorder the keys; only a factor shared by every score keeps the order"),
    ("dot_same_winner", "same_winner_as_dot", "dot",
     "the question asks for another score than the dot product itself"),
]


def _hit_rate_case(g: torch.Generator, b: int, nq: int, nk: int, d: int,
                   noise: float) -> Case:
    return Case(args=long_key_task(g, b, nq, nk, d, noise),
                label=f"B={b}, Nq={nq}, Nk={nk}, d={d}, noise {noise}")


# case 1 tells every known mistake apart, in every part
hit_rate_cases = drawn_cases(204, _hit_rate_case,
                             visible=[(16, 3, 3, 4, 1.0), (40, 2, 8, 8, 0.3)],
                             hidden=[(30, 4, 4, 6, 1.5), (25, 3, 10, 16, 0.8)])


_SCORES = {"dot": scoring.dot_score, "scaled_dot": scoring.scaled_dot_score,
           "cosine": scoring.cosine_score}


def _rates(rate: Callable[[torch.Tensor, torch.Tensor], Any]) -> Callable[..., dict]:
    """A function of ``(q, k, target)`` applying ``rate(scores, target)`` to every score."""

    def measure(q: torch.Tensor, k: torch.Tensor, target: torch.Tensor) -> dict[str, Any]:
        return {name: rate(fn(q, k), target) for name, fn in _SCORES.items()}

    return measure


def _hit_rate(scores: torch.Tensor, target: torch.Tensor) -> float:
    return (scores.argmax(dim=-1) == target).double().mean().item()


def _wrong_axis(scores: torch.Tensor, target: torch.Tensor) -> float:
    if scores.shape[1] != scores.shape[2]:
        return math.nan  # this mistake raises there: nothing to match
    return (scores.argmax(dim=1) == target).double().mean().item()


def _first_element_rate(scores: torch.Tensor, target: torch.Tensor) -> float:
    rate = _hit_rate(scores[:1], target[:1])
    # a rate of 0 or 1 over a few queries says too little to be recognised by
    return rate if 0 < rate < 1 else math.nan


HIT_RATE_MISTAKES = (
    *mistake_table(_rates, [
        ("count_not_rate", {"rate": lambda s, t: int((s.argmax(dim=-1) == t).sum())},
         "you gave the number of hits; the hit rate divides it by the number of queries "
         "of all batch elements together"),
        ("percent", {"rate": lambda s, t: 100 * _hit_rate(s, t)},
         "you gave a percentage; the hit rate is a fraction, between 0 and 1"),
        ("miss_rate", {"rate": lambda s, t: 1 - _hit_rate(s, t)},
         "you returned the fraction of queries that miss their target key; the hit "
         "rate is the fraction that find it"),
        ("lowest_score", {"rate": lambda s, t: _hit_rate(-s, t)},
         "you counted the key with the lowest score; a query's choice is the key with "
         "the highest score (the largest attention weight)"),
        ("argmax_over_queries", {"rate": _wrong_axis},
         "you took the best entry over the queries (down a column); each query chooses "
         "among the keys, along its row"),
        ("mean_weight_on_target",
         {"rate": lambda s, t: torch.gather(torch.softmax(s, dim=-1), -1, t[..., None])
                   .mean().item()},
         "you averaged the attention weight on each query's target key; the hit rate "
         "counts the queries whose largest weight is on their target key"),
        ("never_hits", {"rate": lambda s, t: 0.0},
         "not one query hits its target in your count: did you compare the largest score "
         "itself, rather than the position of the key that has it, with the target index?"),
    ]),
    Mistake("cosine_rate_from_dot",
            lambda q, k, t: {**_rates(_hit_rate)(q, k, t),
                             "cosine": _hit_rate(scoring.dot_score(q, k), t)},
            "your cosine rate is the dot product's: are the cosine's hits counted on the "
            "cosine scores, not on the dot products?"),
    *mistake_table(_rates, [
        ("hits_per_batch_element",
         {"rate": lambda s, t: int((s.argmax(dim=-1) == t).sum()) / t.shape[0]},
         "you divided the number of hits by the batch size only; every batch element "
         "holds several queries, and the rate divides by all of them"),
        ("first_batch_element", {"rate": _first_element_rate},
         "your rate counts the queries of the first batch element only; the hit rate "
         "is over the queries of every batch element"),
        ("mean_largest_weight",
         {"rate": lambda s, t: torch.softmax(s, dim=-1).amax(dim=-1).mean().item()},
         "you averaged each query's largest attention weight; the hit rate asks whether "
         "that largest weight sits on the query's target key"),
    ]),
)


# --------------------------------------------------------------------------- question 5
def _additive_case(g: torch.Generator, dq: int, dk: int, h: int, b: int, nq: int,
                   nk: int) -> Case:
    q, k = _qk(g, b, nq, nk, dq, dk)
    params = {
        "W_q.weight": torch.randn(h, dq, generator=g) * 0.6,
        "W_k.weight": torch.randn(h, dk, generator=g) * 0.6,
        "w_v.weight": torch.randn(1, h, generator=g),
    }
    return Case(init_args=(dq, dk, h), params=params, args=(q, k),
                label=f"query_dim {dq}, key_dim {dk}, hidden {h}; B={b}, Nq={nq}, Nk={nk}")


additive_cases = drawn_cases(
    205, _additive_case,
    visible=[(4, 6, 8, 2, 3, 5), (5, 3, 4, 1, 1, 7), (3, 3, 5, 2, 4, 4)],
    hidden=[(2, 9, 6, 3, 4, 2), (7, 2, 3, 1, 5, 6)])


class _Additive(nn.Module):
    """The reference's layers, and a ``score`` that each known mistake overrides."""

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.W_q = nn.Linear(query_dim, hidden_dim, bias=False)
        self.W_k = nn.Linear(key_dim, hidden_dim, bias=False)
        self.w_v = nn.Linear(hidden_dim, 1, bias=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return self.score(self.W_q(q), self.W_k(k))

    def score(self, pq: torch.Tensor, pk: torch.Tensor) -> torch.Tensor:
        return self.w_v(torch.tanh(pq.unsqueeze(2) + pk.unsqueeze(1))).squeeze(-1)


def _additive_mistake(score: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]):
    return type("AdditiveMistake", (_Additive,), {"score": score})


ADDITIVE_MISTAKES = (
    Mistake("no_tanh", _additive_mistake(
        lambda self, pq, pk: self.w_v(pq.unsqueeze(2) + pk.unsqueeze(1)).squeeze(-1)),
            "there is no tanh: the sum of the two projections must be squashed before w_v "
            "reads it out (without it the score is a query part plus a key part, and every "
            "query ranks the keys the same way)"),
    Mistake("relu_not_tanh", _additive_mistake(
        lambda self, pq, pk: self.w_v(torch.relu(pq.unsqueeze(2) + pk.unsqueeze(1))).squeeze(-1)),
            "you used a ReLU where Bahdanau's score squashes with tanh"),
    Mistake("sigmoid_not_tanh", _additive_mistake(
        lambda self, pq, pk: self.w_v(torch.sigmoid(pq.unsqueeze(2) + pk.unsqueeze(1)))
        .squeeze(-1)),
            "you used a sigmoid where Bahdanau's score squashes with tanh"),
    Mistake("tanh_on_each", _additive_mistake(
        lambda self, pq, pk: self.w_v(torch.tanh(pq).unsqueeze(2) + torch.tanh(pk).unsqueeze(1))
        .squeeze(-1)),
            "you squashed each projection on its own; tanh must act on their sum (applied "
            "separately, the score splits again into a query part plus a key part)"),
    Mistake("multiplied_projections", _additive_mistake(
        lambda self, pq, pk: self.w_v(torch.tanh(pq.unsqueeze(2) * pk.unsqueeze(1))).squeeze(-1)),
            "you multiplied the two projections; the additive score adds them (hence its "
            "name) and squashes the sum"),
    Mistake("tanh_after_readout", _additive_mistake(
        lambda self, pq, pk: torch.tanh(self.w_v(pq.unsqueeze(2) + pk.unsqueeze(1))).squeeze(-1)),
            "you applied tanh after w_v: it belongs inside, on the sum of the projections, "
            "before w_v turns the hidden vector into one number"),
    Mistake("queries_keys_swapped", _additive_mistake(
        lambda self, pq, pk: self.w_v(torch.tanh(pq.unsqueeze(1) + pk.unsqueeze(2))).squeeze(-1)),
            "your scores are transposed (one row per key): the projected queries need the "
            "new axis for the keys (after the query axis), and the projected keys the new "
            "axis for the queries (before the key axis)"),
    Mistake("squeezed_every_axis", _additive_mistake(
        lambda self, pq, pk: self.w_v(torch.tanh(pq.unsqueeze(2) + pk.unsqueeze(1))).squeeze()),
            "you removed every axis of size 1, so a batch of one or a single query lost its "
            "axis: remove only the last axis, the one w_v leaves"),
    Mistake("summed_not_read_out", _additive_mistake(
        lambda self, pq, pk: torch.tanh(pq.unsqueeze(2) + pk.unsqueeze(1)).sum(-1)),
            "you added up the entries of each squashed hidden vector; w_v reads it out, a "
            "weighted sum with its own learned weights"),
    Mistake("weights_not_scores", _additive_mistake(
        lambda self, pq, pk: torch.softmax(
            self.w_v(torch.tanh(pq.unsqueeze(2) + pk.unsqueeze(1))).squeeze(-1), dim=-1)),
            "you returned attention weights (each row sums to 1): the module returns the "
            "scores, before any softmax"),
)


def _fits_with_biases(case: Case, got: torch.Tensor) -> bool:
    """Whether ``got`` is the additive score with some offset inside the tanh and a
    constant added: what layers with biases give (the grader only sets the weights)."""
    q, k = (t.double() for t in case.args)
    w_q, w_k, w_v = (case.params[n].double() for n in ("W_q.weight", "W_k.weight",
                                                        "w_v.weight"))
    target = got.detach().double()
    inside = (q @ w_q.T).unsqueeze(2) + (k @ w_k.T).unsqueeze(1)
    bias = torch.zeros(w_q.shape[0], dtype=torch.float64, requires_grad=True)
    shift = torch.zeros((), dtype=torch.float64, requires_grad=True)

    def residual() -> torch.Tensor:
        return (torch.tanh(inside + bias) @ w_v.T).squeeze(-1) + shift - target

    return fits_with_offsets(residual, (bias, shift), float(target.abs().max()))


def _additive_diagnose(case: Case, expected: Any, got: Any) -> str | None:
    pair = _same_structure(expected, got)
    if pair is None:
        return None
    with torch.enable_grad():
        biased = _fits_with_biases(case, pair[1])
    if biased:
        return _("your scores are the additive formula plus offsets: do your layers have "
                 "biases? W_q, W_k and w_v have none here (the grader sets only their "
                 "weights, so a bias keeps its random start)")
    return _relation(expected, got)


# --------------------------------------------------------------------------- question 6
def variance_cases() -> list[Case]:
    values = [(16, 2.0, 1.5, False), (64, 0.5, 0.5, False), (10, 3.0, 0.2, True),
              (1, 1.7, 2.3, True), (300, 0.1, 4.0, True)]
    return [Case(args=(d, sq, sk), label=f"d={d}, sigma_q={sq}, sigma_k={sk}", hidden=hidden)
            for d, sq, sk, hidden in values]


def dot_product_moments(d: int, sigma_q: float, sigma_k: float) -> dict[str, float]:
    variance = d * sigma_q**2 * sigma_k**2
    return {"variance": variance, "divisor": math.sqrt(variance)}


def _moments(variance: Callable[[int, float, float], float],
             divisor: Callable[[int, float, float], float] | None = None):
    """A mistaken ``dot_product_moments``; by default its divisor is the square root of
    its variance (the learner's next step, done right)."""

    def wrong(d: int, sq: float, sk: float) -> dict[str, float]:
        v = variance(d, sq, sk)
        return {"variance": v,
                "divisor": math.sqrt(abs(v)) if divisor is None else divisor(d, sq, sk)}

    return wrong


def _true_variance(d: int, sq: float, sk: float) -> float:
    return dot_product_moments(d, sq, sk)["variance"]


VARIANCE_MISTAKES = mistake_table(_moments, [
    ("std_for_variance", {"variance": lambda d, sq, sk: d * sq * sk},
     "you used the standard deviations where their squares belong: the variance of a "
     "product of two independent zero-mean entries is the product of their "
     "variances, sigma_q squared times sigma_k squared"),
    ("sigmas_ignored", {"variance": lambda d, sq, sk: d},
     "d (and sqrt(d)) holds only when both standard deviations are 1: the spread "
     "of the entries scales every product q_i k_i"),
    ("variances_added", {"variance": lambda d, sq, sk: d * (sq**2 + sk**2)},
     "you added the two variances; for a product of independent zero-mean factors "
     "they multiply (variances add for a sum, here the sum over the d terms)"),
    ("std_not_variance",
     {"variance": lambda d, sq, sk: math.sqrt(d) * sq * sk,
      "divisor": lambda d, sq, sk: math.sqrt(d) * sq * sk},
     "that is the standard deviation of q . k; the variance is its square"),
    ("divisor_d_not_root_d",
     {"variance": _true_variance, "divisor": lambda d, sq, sk: d * sq * sk},
     "your divisor multiplies d itself by the two standard deviations; the standard "
     "deviation of q . k is the square root of its variance, which takes the square "
     "root of d too"),
    ("divisor_with_variances",
     {"variance": _true_variance, "divisor": lambda d, sq, sk: math.sqrt(d) * sq**2 * sk**2},
     "your divisor multiplies sqrt(d) by the two variances; the square root of the "
     "variance takes the square root of every factor, which leaves the two standard "
     "deviations"),
    ("d_squared", {"variance": lambda d, sq, sk: d**2 * sq**2 * sk**2},
     "the d products are independent, so their variances add up to d times the "
     "variance of one product; d squared would need all d products to be equal"),
    ("fourth_powers", {"variance": lambda d, sq, sk: d * sq**4 * sk**4},
     "sigma_q and sigma_k are standard deviations: each entry's variance is sigma "
     "squared, not sigma to the fourth power"),
    ("one_product_only", {"variance": lambda d, sq, sk: sq**2 * sk**2},
     "that is the variance of one product q_i k_i; q . k adds d of them, independent, "
     "so their variances add"),
    ("divide_by_variance", {"variance": _true_variance, "divisor": _true_variance},
     "dividing by the variance leaves a variance of one over the variance; to bring "
     "the variance to 1, divide by the standard deviation, its square root"),
    ("multiplier_not_divisor",
     {"variance": _true_variance,
      "divisor": lambda d, sq, sk: 1 / math.sqrt(_true_variance(d, sq, sk))},
     "you gave the factor to multiply by; the question asks for the number to divide "
     "q . k by"),
])


# --------------------------------------------------------------------------- question 7
SOFTMAX_CHANGES = {"add_constant": "same", "dot_query_times_3": "larger",
                   "cosine_query_times_3": "same"}


SOFTMAX_WRONG = [
    ("shift_sharpens", "add_constant", "larger",
     "adding the same number to every score multiplies every exponential by the same "
     "factor, which the normalisation divides out: a softmax sees only the "
     "differences between scores"),
    ("shift_flattens", "add_constant", "smaller",
     "adding the same number to every score leaves every difference between them "
     "as it was, and a softmax sees only those differences: the weights do not move"),
    ("dot_scale_ignored", "dot_query_times_3", "same",
     "under the dot score, tripling the query triples every score of that query and "
     "every gap between them: like a temperature of one third, it sharpens the "
     "softmax"),
    ("dot_scale_flattens", "dot_query_times_3", "smaller",
     "tripling every score spreads them further apart, which sharpens the softmax "
     "(a lower temperature); flatter weights come from shrinking the scores"),
    ("cosine_scale_sharpens", "cosine_query_times_3", "larger",
     "the cosine divides by the query's length, so tripling the query does not "
     "change a single score: only directions count"),
    ("cosine_scale_flattens", "cosine_query_times_3", "smaller",
     "a longer query has the same direction, and the cosine score sees only "
     "directions: every score, and so every weight, stays as it was"),
]


# --------------------------------------------------------------------------- question 8
def hard_cases() -> list[Case]:
    g = torch.Generator().manual_seed(208)
    cases = []
    for nq, nk, dv, scale, hidden in [(2, 4, 1, 1.5, False), (3, 5, 2, 1.0, False),
                                      (4, 6, 3, 2.5, True), (1, 7, 2, 0.5, True)]:
        scores = torch.randn(nq, nk, generator=g) * scale
        values = torch.randn(nk, dv, generator=g) * 2
        cases.append(Case(args=(scores, values), label=f"Nq={nq}, Nk={nk}, dv={dv}",
                          hidden=hidden))
    scores = torch.randn(3, 4, generator=g)
    scores[1] = 0.7  # all keys tie: uniform weights
    cases.append(Case(args=(scores, torch.randn(4, 2, generator=g)), hidden=True))
    return cases


def _moments_of(weights: torch.Tensor, values: torch.Tensor) -> dict[str, torch.Tensor]:
    mean = weights @ values
    return {"mean": mean, "variance": weights @ values**2 - mean**2}


def hard_attention_moments(scores: torch.Tensor, values: torch.Tensor) -> dict[str, torch.Tensor]:
    return _moments_of(torch.softmax(scores, dim=-1), values)


def _with_variance(variance: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
    """The right mean, a mistaken variance ``variance(weights, values)``."""

    def wrong(scores: torch.Tensor, values: torch.Tensor) -> dict[str, torch.Tensor]:
        weights = torch.softmax(scores, dim=-1)
        return {"mean": weights @ values, "variance": variance(weights, values)}

    return wrong


def _argmax_moments(scores: torch.Tensor, values: torch.Tensor) -> dict[str, torch.Tensor]:
    mean = values[scores.argmax(dim=-1)]
    return {"mean": mean, "variance": torch.zeros_like(mean)}


def _centred(w: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``(v_j - mean_i)^2`` for every query i and key j: ``(Nq, Nk, dv)``."""
    return (v.unsqueeze(0) - (w @ v).unsqueeze(1)) ** 2


HARD_MISTAKES = (
    Mistake("zero_variance", _with_variance(lambda w, v: torch.zeros(w.shape[0], v.shape[1])),
            "stochastic hard attention outputs a different value from draw to draw, so its "
            "variance is not 0"),
    Mistake("argmax", _argmax_moments,
            "that is deterministic hard attention, the best key's value every time; "
            "stochastic hard attention draws key i with probability equal to its weight, so "
            "its average weighs every value by that probability"),
    Mistake("uniform_draws",
            lambda s, v: _moments_of(torch.full_like(s, 1 / s.shape[-1]), v),
            "you counted every key equally; the draws follow the attention weights (the "
            "softmax of the scores), not a uniform choice"),
    Mistake("plain_sample_variance",
            lambda s, v: {"mean": torch.softmax(s, dim=-1) @ v,
                          "variance": v.var(dim=0).expand(s.shape[0], -1)},
            "that is the plain sample variance of the values, every key counted equally; "
            "each value counts with the probability that its key is drawn"),
    Mistake("raw_scores_as_weights", lambda s, v: _moments_of(s, v),
            "you used the raw scores as probabilities; they can be negative and do not sum "
            "to 1: turn them into weights with a softmax over the keys first"),
    Mistake("exp_not_normalised", lambda s, v: _moments_of(s.exp(), v),
            "your weights are exponentials of the scores that are not divided by their sum, "
            "so they are no probabilities"),
    Mistake("softmax_over_queries", lambda s, v: _moments_of(torch.softmax(s, dim=0), v),
            "your softmax normalises down each column (over the queries); a query's draw "
            "is over the keys, so each row must sum to 1"),
    *mistake_table(_with_variance, [
        ("second_moment", {"variance": lambda w, v: w @ v**2},
         "that is the mean of the squared value; the variance subtracts the square of "
         "the mean from it"),
        ("minus_sign_flipped", {"variance": lambda w, v: (w @ v) ** 2 - w @ v**2},
         "your variance is negative: the mean of the squared value minus the squared "
         "mean has the terms the other way round"),
        ("std_not_variance",
         {"variance": lambda w, v: (w @ v**2 - (w @ v) ** 2).clamp_min(0).sqrt()},
         "that is the standard deviation; the variance is its square"),
        ("squared_weights",
         {"variance": lambda w, v: ((w**2).unsqueeze(-1) * _centred(w, v)).sum(1)},
         "you squared the weights: they are the probabilities of one draw, not the "
         "coefficients of a sum of independent terms, so each squared deviation counts "
         "with its probability itself"),
        ("squared_mean_only", {"variance": lambda w, v: (w @ v) ** 2},
         "that is the square of the mean; the variance is the mean of the squared value "
         "minus it"),
        ("mean_not_squared", {"variance": lambda w, v: w @ v**2 - w @ v},
         "you subtracted the mean itself; the variance subtracts the square of the mean"),
        ("sample_correction",
         {"variance": lambda w, v: (w @ v**2 - (w @ v) ** 2) * v.shape[0] / (v.shape[0] - 1)},
         "you applied the n - 1 correction of a sample variance; the probabilities here "
         "are exact, not estimated from samples, so no correction belongs"),
        ("centred_on_plain_mean", {"variance": lambda w, v: w @ (v - v.mean(dim=0)) ** 2},
         "your deviations are measured from the plain average of the values; they must "
         "be measured from the mean of the draw, the weighted one"),
        ("independent_keys", {"variance": lambda w, v: (w * (1 - w)) @ v**2},
         "you added a variance per key as if each were drawn or not on its own; exactly "
         "one key is drawn each time, so those events are not independent"),
        ("summed_over_entries",
         {"variance": lambda w, v: (w @ v**2 - (w @ v) ** 2).sum(-1, keepdim=True)
                           .expand(-1, v.shape[1])},
         "you added the variances of the entries of the value vectors; the question asks "
         "for the variance of each entry on its own"),
        ("weights_not_averaged", {"variance": lambda w, v: _centred(w, v).mean(1)},
         "you averaged the squared deviations from the mean with equal weight per key; "
         "each one counts with the probability that its key is drawn"),
    ]),
)


# --------------------------------------------------------------------------- the exercise
EXERCISE = Exercise(
    id="02_scoring",
    title="Attention scoring functions",
    forbidden_imports=("attention_course.scoring", "attention_course.masking"),
    questions=(
        Question(
            id="q1_scaled_dot",
            symbol="scaled_dot_score",
            title="Scaled dot-product scores",
            kind="implement",
            points=2,
            reference=scoring.scaled_dot_score,
            cases=scaled_dot_cases,
            grad=True,
            mistakes=SCALED_DOT_MISTAKES,
            diagnose=lambda case, expected, got: _relation(expected, got),
            hint=("Each entry is one query's dot product with one key, divided by the square "
                  "root of the vector size d (the last axis), whatever the number of queries "
                  "and keys."),
            section=DOT,
        ),
        Question(
            id="q2_cosine_debug",
            symbol="cosine_score",
            title="Repair a cosine score",
            kind="debug",
            points=2,
            reference=scoring.cosine_score,
            cases=cosine_cases,
            mistakes=COSINE_MISTAKES,
            diagnose=_cosine_diagnose,
            hint=("The score of query i and key j is divided by the length of query i and "
                  "the length of key j: query lengths change down the rows, key lengths "
                  "across the columns. A zero vector has no direction, and its scores are 0."),
            section=DOT,
        ),
        prediction(
            id="q3_predict_long_keys",
            symbol="predict_long_keys",
            title="Long keys: which score finds the key that points along the query?",
            points=2,
            answer=LONG_KEYS,
            choices=("dot", "scaled dot", "cosine"),
            wrong=LONG_KEY_WRONG,
            hint=("A dot product is the product of two lengths and a cosine; a positive "
                  "factor shared by every score never changes which score is largest."),
            section=DOT,
        ),
        Question(
            id="q4_hit_rates",
            symbol="hit_rates",
            title="Measure it: how often does each score find the target key?",
            kind="experiment",
            points=3,
            reference=_rates(_hit_rate),
            cases=hit_rate_cases,
            parts={"dot": 1, "scaled_dot": 1, "cosine": 1},
            mistakes=HIT_RATE_MISTAKES,
            builds_on=("q1_scaled_dot", "q2_cosine_debug"),
            hint=("A query hits when its highest score over the keys is at its target key; "
                  "the hit rate is the fraction of all queries of all batch elements that hit."),
            section=DOT,
        ),
        Question(
            id="q5_additive",
            symbol="AdditiveScore",
            title="Additive (Bahdanau) scores for queries and keys of different sizes",
            kind="implement",
            call="module",
            points=3,
            reference=scoring.AdditiveScore,
            cases=additive_cases,
            rtol=1e-4,
            atol=1e-5,
            mistakes=ADDITIVE_MISTAKES,
            diagnose=_additive_diagnose,
            hint=("Project the queries and the keys into the same hidden size, give the "
                  "projected queries an axis for the keys and the projected keys an axis for "
                  "the queries so that every pair is summed, squash the sums, then read each "
                  "one out as a single number."),
            section=ADDITIVE,
        ),
        Question(
            id="q6_variance",
            symbol="dot_product_moments",
            title="The variance of q . k, and the divisor that undoes it",
            kind="derive",
            points=2,
            reference=dot_product_moments,
            cases=variance_cases,
            parts={"variance": 1, "divisor": 1},
            mistakes=VARIANCE_MISTAKES,
            hint=("Follow the chapter's argument with other spreads: q . k is a sum of d "
                  "independent products, and each product's variance comes from the variances "
                  "of its two factors. Dividing by c divides a variance by c squared."),
            section=WHY_SQRT_D,
        ),
        prediction(
            id="q7_predict_softmax",
            symbol="predict_softmax_changes",
            title="What moves the largest weight of a softmax?",
            points=3,
            answer=SOFTMAX_CHANGES,
            choices=("larger", "smaller", "same"),
            wrong=SOFTMAX_WRONG,
            hint=("A softmax sees only the differences between scores, and multiplying every "
                  "score by a factor works like a temperature. Ask first what each change "
                  "does to the scores."),
            section=TEMPERATURE,
        ),
        Question(
            id="q8_hard_moments",
            symbol="hard_attention_moments",
            title="Stochastic hard attention: its mean and its variance",
            kind="derive",
            points=3,
            reference=hard_attention_moments,
            cases=hard_cases,
            rtol=1e-4,
            atol=1e-5,
            parts={"mean": 1, "variance": 2},
            mistakes=HARD_MISTAKES,
            hint=("Stochastic hard attention outputs value j with probability equal to the "
                  "attention weight of key j: its output is a discrete random variable, and "
                  "its mean and variance follow from those probabilities."),
            section=HARD,
        ),
    ),
)
