"""Exercise 10: efficient attention (chapter 10).

Six questions: how two online-softmax states merge (derive: what lets one long row be
split over several workers, which the chapter does not show), the backward pass of one
block of keys from the saved log-sum-exp (implement), how many scores a causal blockwise
pass computes and how many of them it masks (derive), how the peak memory of three ways
to compute attention grows with N (predict), the error of a sliding window against
exact causal attention (experiment), and a blockwise attention with two bugs that show
only on some inputs (debug). The references are the package's chapter-10 code where it
has it.

Every known mistake is recognised by its output; the messages say what the mistake is
in words, never in code.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from attention_course import efficient, positions
from attention_course.grading.spec import Case, Exercise, Mistake, Question
from attention_course.grading.tables import mistake_table, prediction

MINUS_INF = float("-inf")


# --------------------------------------------------------------------------- question 1
def merge_states(state_a: dict[str, torch.Tensor],
                 state_b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The reference of question 1: the state of a row that has seen the keys of both
    states. Each state holds ``row_max`` (R,), ``row_sum`` (R,) and ``acc`` (R, dv)."""
    new_max = torch.maximum(state_a["row_max"], state_b["row_max"])
    shift = new_max.masked_fill(new_max == MINUS_INF, 0.0)
    scale_a = torch.exp(state_a["row_max"] - shift)
    scale_b = torch.exp(state_b["row_max"] - shift)
    return {"row_max": new_max,
            "row_sum": scale_a * state_a["row_sum"] + scale_b * state_b["row_sum"],
            "acc": scale_a[:, None] * state_a["acc"] + scale_b[:, None] * state_b["acc"]}


def _merged(factor_a: Callable, factor_b: Callable, row_max: Callable | None = None,
            normalise: bool = False) -> Callable:
    """A wrong merge: ``factor_x(m_x, m)`` multiplies state x's sum and accumulator,
    where ``m`` is the maximum kept (the larger one, unless ``row_max`` says otherwise)."""

    def wrong(state_a, state_b):
        m_a, m_b = state_a["row_max"], state_b["row_max"]
        m = torch.maximum(m_a, m_b) if row_max is None else row_max(m_a, m_b)
        f_a, f_b = factor_a(m_a, m), factor_b(m_b, m)
        row_sum = f_a * state_a["row_sum"] + f_b * state_b["row_sum"]
        acc = f_a[:, None] * state_a["acc"] + f_b[:, None] * state_b["acc"]
        if normalise:
            acc = acc / row_sum.clamp_min(1e-30)[:, None]
        return {"row_max": m, "row_sum": row_sum, "acc": acc}

    return wrong


def _safe_factor(m_x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return torch.exp(m_x - m.masked_fill(m == MINUS_INF, 0.0))


def _state(scores: torch.Tensor, values: torch.Tensor) -> dict[str, torch.Tensor]:
    """The online-softmax state of rows of ``scores (R, n)`` over ``values (n, dv)``."""
    rows = scores.size(0)
    row_max = torch.full((1, rows), MINUS_INF, dtype=scores.dtype)
    row_sum = torch.zeros(1, rows, dtype=scores.dtype)
    acc = torch.zeros(1, rows, values.size(-1), dtype=scores.dtype)
    if scores.size(1):
        efficient.online_softmax_update(row_max, row_sum, acc, scores[None].clone(),
                                        values[None])
    return {"row_max": row_max[0], "row_sum": row_sum[0], "acc": acc[0]}


def merge_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1001)

    def split(rows, n_a, n_b, dv, scale=2.0, offset=0.0, empty_a=(), empty_b=()):
        scores = scale * torch.randn(rows, n_a + n_b, generator=g, dtype=torch.float64)
        scores[:, n_a:] += offset
        values = torch.randn(n_a + n_b, dv, generator=g, dtype=torch.float64)
        scores_a, scores_b = scores[:, :n_a].clone(), scores[:, n_a:].clone()
        scores_a[list(empty_a)] = MINUS_INF  # rows that saw no key in this part
        scores_b[list(empty_b)] = MINUS_INF
        return (_state(scores_a, values[:n_a]), _state(scores_b, values[n_a:]))

    return [
        Case(args=split(3, 4, 5, 2), label="3 rows, 4 keys then 5 keys, values of size 2"),
        Case(args=split(4, 6, 3, 3, offset=3.0),
             label="4 rows; the second part's scores are larger"),
        Case(args=split(3, 5, 5, 2, empty_b=(1,)),
             label="3 rows; row 1 saw no key of the second part (masked)"),
        Case(args=split(5, 7, 4, 3, scale=200.0), hidden=True),
        Case(args=split(4, 3, 6, 2, empty_a=(0, 2), empty_b=(2,)), hidden=True),
        Case(args=split(2, 8, 2, 4, offset=-4.0), hidden=True),
    ]


def _nan_for_empty(state_a, state_b):
    m = torch.maximum(state_a["row_max"], state_b["row_max"])
    f_a, f_b = torch.exp(state_a["row_max"] - m), torch.exp(state_b["row_max"] - m)
    return {"row_max": m, "row_sum": f_a * state_a["row_sum"] + f_b * state_b["row_sum"],
            "acc": f_a[:, None] * state_a["acc"] + f_b[:, None] * state_b["acc"]}


MERGE_MISTAKES = (
    *mistake_table(_merged, [
        ("no_rescale",
         {"factor_a": lambda m_x, m: torch.ones_like(m_x),
          "factor_b": lambda m_x, m: torch.ones_like(m_x)},
         "you added the two sums and the two accumulators as they are: each was taken "
         "relative to its own maximum, so first bring both to the common (larger) "
         "maximum, each multiplied by the exponential of its own maximum minus that one"),
        ("only_a_rescaled",
         {"factor_a": _safe_factor, "factor_b": lambda m_x, m: torch.ones_like(m_x)},
         "only the first state is brought to the new maximum: that is the chapter's "
         "update, where the new block's exponentials are already taken relative to the "
         "new maximum. Here the second state has its own maximum too and needs the same "
         "rescaling"),
        ("inverted",
         {"factor_a": lambda m_x, m: torch.exp(m - m_x).nan_to_num(posinf=0.0),
          "factor_b": lambda m_x, m: torch.exp(m - m_x).nan_to_num(posinf=0.0)},
         "your rescaling factors are upside down: the state with the smaller maximum "
         "must be multiplied by a number below 1 (the exponential of its maximum minus "
         "the new one), not above 1"),
        ("first_maximum_kept",
         {"factor_a": lambda m_x, m: torch.ones_like(m_x),
          "factor_b": lambda m_x, m: torch.exp(m_x - m).nan_to_num(nan=0.0),
          "row_max": lambda m_a, m_b: torch.where(m_a == MINUS_INF, m_b, m_a)},
         "you kept the first state's maximum and measured the second against it: the "
         "ratio of accumulator to sum is right, but the state's maximum must be the "
         "larger of the two, or the exponentials overflow when the second part's scores "
         "are much larger"),
        ("absolute_factors",
         {"factor_a": lambda m_x, m: torch.exp(m_x), "factor_b": lambda m_x, m: torch.exp(m_x)},
         "you multiplied each state by the exponential of its own maximum alone: that "
         "undoes the subtraction of the maximum (the sum becomes the plain sum of the "
         "exponentials, which overflows for large scores); the merged state is relative "
         "to the common maximum, so use the exponential of each maximum minus that one"),
        ("normalised", {"factor_a": _safe_factor, "factor_b": _safe_factor, "normalise": True},
         "your accumulator is already divided by the sum: the state keeps the output "
         "NOT yet divided, so that later blocks can still be added; divide only once, "
         "after the last block"),
    ]),
    Mistake("nan_for_empty", _nan_for_empty,
            "a row that neither state has seen (both maxima minus infinity) came out NaN: "
            "minus infinity minus minus infinity is not a number. Such a row must keep "
            "maximum minus infinity, sum 0 and accumulator 0"),
)


# --------------------------------------------------------------------------- question 2
def block_backward(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   grad_out: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                   scale: float) -> dict[str, torch.Tensor]:
    """The reference of question 2: one block of keys' share of the backward pass."""
    probs = torch.exp(scale * query @ key.transpose(-1, -2) - lse[..., None])
    delta = (grad_out * out).sum(-1)
    grad_scores = efficient.softmax_backward(
        probs, grad_out @ value.transpose(-1, -2), delta)
    return {"grad_query": scale * grad_scores @ key,
            "grad_key": scale * grad_scores.transpose(-1, -2) @ query,
            "grad_value": probs.transpose(-1, -2) @ grad_out}


def _block_variant(probs: str = "lse", delta: str = "output", query_scale: int = 1,
                   key_scale: int = 1, delta_weighted: bool = True) -> Callable:
    """A wrong block backward: how the weights are had (``probs``), how D is computed
    (``delta``), and how many times dQ and dK carry the scale (0, 1 or 2)."""

    def wrong(query, key, value, grad_out, out, lse, scale):
        scores = scale * query @ key.transpose(-1, -2)
        weights = {"lse": lambda: torch.exp(scores - lse[..., None]),
                   "block_softmax": lambda: torch.softmax(scores, dim=-1),
                   "no_lse": lambda: torch.exp(scores),
                   "unscaled": lambda: torch.exp(scores / scale - lse[..., None]),
                   "lse_scaled": lambda: torch.exp(scores - scale * lse[..., None]),
                   }[probs]()
        grad_probs = grad_out @ value.transpose(-1, -2)
        d = {"output": lambda: (grad_out * out).sum(-1, keepdim=True),
             "block": lambda: (weights * grad_probs).sum(-1, keepdim=True),
             "none": lambda: torch.zeros_like(out[..., :1]),
             "grad_probs": lambda: grad_probs.sum(-1, keepdim=True)}[delta]()
        grad_scores = (weights * (grad_probs - d) if delta_weighted
                       else weights * grad_probs - d)
        return {"grad_query": scale**query_scale * grad_scores @ key,
                "grad_key": scale**key_scale * grad_scores.transpose(-1, -2) @ query,
                "grad_value": weights.transpose(-1, -2) @ grad_out}

    return wrong


def block_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1002)

    def problem(bh, nq, nk, d, dv, start, stop, scale=None):
        """A whole attention problem; the case passes one block of its keys."""
        q = torch.randn(bh, nq, d, generator=g, dtype=torch.float64)
        k = torch.randn(bh, nk, d, generator=g, dtype=torch.float64)
        v = torch.randn(bh, nk, dv, generator=g, dtype=torch.float64)
        grad_out = torch.randn(bh, nq, dv, generator=g, dtype=torch.float64)
        scale = 1 / math.sqrt(d) if scale is None else scale
        scores = scale * q @ k.transpose(-1, -2)
        out = torch.softmax(scores, dim=-1) @ v
        lse = torch.logsumexp(scores, dim=-1)
        return (q, k[:, start:stop], v[:, start:stop], grad_out, out, lse, scale)

    return [
        Case(args=problem(2, 5, 12, 4, 3, 4, 8),
             label="keys 4 to 7 of 12; 5 queries; d = 4, dv = 3"),
        Case(args=problem(1, 6, 10, 8, 8, 0, 3), label="the first 3 keys of 10; d = dv = 8"),
        Case(args=problem(3, 4, 9, 5, 2, 6, 9, scale=0.7),
             label="the last 3 keys of 9; scale 0.7 (not 1 over the square root of d)"),
        Case(args=problem(2, 7, 7, 6, 4, 0, 7), label="one block holding all 7 keys"),
        Case(args=problem(2, 3, 16, 4, 5, 5, 11), hidden=True),
        Case(args=problem(1, 8, 20, 16, 4, 12, 20, scale=0.3), hidden=True),
    ]


BLOCK_MISTAKES = (
    *mistake_table(_block_variant, [
        ("block_softmax", {"probs": "block_softmax"},
         "your weights are a softmax over this block's keys alone: the row's softmax runs "
         "over all of its keys, and the saved log-sum-exp is what brings that whole-row "
         "normaliser into one block (each weight is the exponential of its score minus "
         "the row's log-sum-exp)"),
        ("no_lse", {"probs": "no_lse"},
         "your weights are the exponentials of the scores, never normalised: subtract "
         "the row's saved log-sum-exp from each score before exponentiating"),
        ("unscaled_scores", {"probs": "unscaled"},
         "your recomputed weights use scores that were not multiplied by the scale: the "
         "log-sum-exp was taken over the scaled scores, so scale them first"),
        ("lse_scaled", {"probs": "lse_scaled"},
         "you multiplied the saved log-sum-exp by the scale too: it was taken over the "
         "scaled scores already, so subtract it as it is from the scaled scores"),
        ("delta_not_weighted", {"delta_weighted": False},
         "you subtracted D outside the product with the weight: the gradient of a score "
         "is the weight times (the weight's gradient minus D), so D is multiplied by "
         "the weight as well"),
        ("delta_from_block", {"delta": "block"},
         "you computed D from this block's weights alone: D sums over the whole row of "
         "the weights, which one block does not have. It equals the dot product of each "
         "row of the output with the same row of its gradient"),
        ("no_delta", {"delta": "none"},
         "the gradient of the scores is missing the subtracted term: through a softmax "
         "it is the weight times (its gradient minus D), where D is the weighted mean of "
         "the weights' gradients along the row"),
        ("delta_sum_of_grad_probs", {"delta": "grad_probs"},
         "your D is the plain sum of the weights' gradients over the block: D is a "
         "weighted sum over the whole row, which equals the output dotted with its "
         "gradient, row by row"),
        ("query_unscaled", {"query_scale": 0},
         "the gradient of the queries is missing the scale: the scores are the scale "
         "times the products of queries and keys, so each of their gradients carries "
         "the scale once"),
        ("key_unscaled", {"key_scale": 0},
         "the gradient of the keys is missing the scale: the scores are the scale times "
         "the products of queries and keys, so each of their gradients carries the "
         "scale once"),
        ("scaled_twice", {"query_scale": 2, "key_scale": 2},
         "the gradients of the queries and keys carry the scale twice: once is right, "
         "from the scores being the scale times the products of queries and keys"),
    ]),
    Mistake("value_from_output", lambda q, k, v, grad_out, out, lse, scale: {
        **block_backward(q, k, v, grad_out, out, lse, scale),
        "grad_value": torch.exp(scale * q @ k.transpose(-1, -2) - lse[..., None]
                                ).transpose(-1, -2) @ out},
            "the gradient of the values multiplies the weights by the output: it is the "
            "transposed weights times the gradient of the output"),
)


# --------------------------------------------------------------------------- question 3
def causal_scores_computed(n: int, block_size: int) -> dict[str, int]:
    """The reference of question 3: the scores the chapter's causal blockwise pass over
    ``n`` queries and keys computes, and how many of them are masked."""
    computed = sum((keys.stop - keys.start) * (rows.stop - rows.start)
                   for keys, rows in efficient.block_schedule(n, n, block_size, True))
    return {"computed": computed, "masked": computed - n * (n + 1) // 2}


def _counting(per_block: Callable[[int, int, int, int], int] | None = None,
              computed: Callable[[int, int], int] | None = None,
              allowed: Callable[[int], int] = lambda n: n * (n + 1) // 2,
              masked: Callable[[int, int], int] | None = None) -> Callable:
    """A wrong count: ``per_block(n, b, start, stop)`` scores per key block, or a
    formula for all of them; masked = computed - ``allowed(n)`` unless given."""

    def wrong(n, block_size):
        if computed is not None:
            total = computed(n, block_size)
        else:
            total = sum(per_block(n, block_size, start, min(start + block_size, n))
                        for start in range(0, n, block_size))
        lost = masked(n, total) if masked is not None else total - allowed(n)
        return {"computed": total, "masked": lost}

    return wrong


def count_cases() -> list[Case]:
    return [
        Case(args=(8, 4), label="n = 8, block size 4"),
        Case(args=(10, 4), label="n = 10, block size 4 (the last block has 2 keys)"),
        Case(args=(6, 1), label="n = 6, block size 1"),
        Case(args=(300, 128), hidden=True),
        Case(args=(5, 8), hidden=True),
        Case(args=(257, 64), hidden=True),
        Case(args=(1, 3), hidden=True),
    ]


COUNT_MISTAKES = mistake_table(_counting, [
    ("only_allowed", {"computed": lambda n, b: n * (n + 1) // 2},
     "you counted only the scores the causal mask allows: the blocks on the "
     "diagonal are computed in full, for every row from the block's first key "
     "down, and their part above the diagonal is then masked"),
    ("no_skipping", {"computed": lambda n, b: n * n},
     "you counted every score: with the causal mask a block of keys is computed only "
     "for the rows at or below its first key; the rows above it are skipped"),
    ("last_block_dropped",
     {"computed": lambda n, b: sum(b * (n - start)
                                                for start in range(0, n - b + 1, b))},
     "you left out the last, shorter block of keys: when the block size does not "
     "divide n, the keys that are left form one more block, computed like the others"),
    ("masked_as_skipped",
     {"per_block": lambda n, b, start, stop: (stop - start) * (n - start),
      "masked": lambda n, total: n * n - total},
     "your masked count is the number of scores skipped, never computed; the "
     "question asks how many of the computed scores the mask then hides: those "
     "computed minus the pairs the causal mask allows"),
    ("last_block_full", {"per_block": lambda n, b, start, stop: b * (n - start)},
     "you counted the last block of keys as a full block: when the block size does "
     "not divide n, the last block holds only the keys that are left"),
    ("rows_below_the_block", {"per_block": lambda n, b, start, stop: (stop - start) * (n - stop)},
     "you left out the rows of the diagonal block itself: a block of keys starting "
     "at key j is computed for every row from row j on, its own rows included"),
    ("rows_from_block_end",
     {"per_block": lambda n, b, start, stop: (stop - start) * (n - stop + 1)},
     "you start each block's rows at its last key: the chapter's pass computes a "
     "block for every row from its FIRST key on, since those rows see some of its "
     "keys"),
    ("diagonal_masked",
     {"per_block": lambda n, b, start, stop: (stop - start) * (n - start),
      "allowed": lambda n: n * (n - 1) // 2},
     "you counted the diagonal as masked: a query may attend to its own position, "
     "so of the computed scores only those strictly above the diagonal are masked"),
])


# --------------------------------------------------------------------------- question 4
GROWTH_CHOICES = ("about 1x", "about 2x", "about 4x", "about 8x")
GROWTH = {"explicit": "about 4x", "blockwise": "about 2x", "fused": "about 2x"}


GROWTH_WRONG = [
    ("explicit_linear", "explicit", "about 2x",
     "the explicit path: it holds N by N matrices (the scores, the weights kept for "
     "the backward pass, their gradients), and an N by N matrix grows fourfold when "
     "N doubles"),
    ("explicit_constant", "explicit", "about 1x",
     "the explicit path: its memory is not fixed; it holds N by N matrices, which "
     "grow with the square of N"),
    ("explicit_cubic", "explicit", "about 8x",
     "the explicit path: its largest tensors are N by N, so its memory grows with "
     "the square of N, not faster; eightfold would take something of size N cubed"),
    ("blockwise_quadratic", "blockwise", "about 4x",
     "the blockwise path: it never holds more than one block of N by block-size "
     "scores, besides tensors of size N by d, and all of those grow linearly in N"),
    ("blockwise_constant", "blockwise", "about 1x",
     "the blockwise path: one block of scores is N by block-size, and the inputs, "
     "the output and the gradients are N by d: they all grow with N, linearly"),
    ("blockwise_cubic", "blockwise", "about 8x",
     "the blockwise path: nothing it holds is even N by N; eightfold is far too much"),
    ("fused_quadratic", "fused", "about 4x",
     "the fused kernel: like the blockwise path, it keeps a tile of scores at a time "
     "and saves the log-sum-exp, not the weights, so its memory grows linearly"),
    ("fused_constant", "fused", "about 1x",
     "the fused kernel: its inputs, output and gradients alone are N by d and "
     "double with N"),
    ("fused_cubic", "fused", "about 8x",
     "the fused kernel: it holds nothing of size N by N, let alone more"),
]


# --------------------------------------------------------------------------- question 5
THRESHOLD = 0.1


def window_errors(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  windows: list[int]) -> dict[str, Any]:
    """The reference of question 5: the relative error of sliding-window attention
    against exact causal attention, per window, and the smallest window below 0.1."""
    exact = torch.nn.functional.scaled_dot_product_attention(query, key, value,
                                                             is_causal=True)
    errors = []
    for window in windows:
        approx = efficient.flash_attention(query, key, value, is_causal=True,
                                           window=window)
        errors.append(float((approx - exact).norm() / exact.norm()))
    below = [w for w, e in zip(windows, errors, strict=True) if e < THRESHOLD]
    return {"errors": torch.tensor(errors, dtype=torch.float64),
            "smallest": min(below) if below else 0}


def _window_error(norm: str, approx: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """The error of a window measured one way: relative to the exact output (right), not
    relative, relative to the window's output, squared, averaged over rows, or the mean
    squared difference."""
    diff = approx - exact
    if norm == "per_row":
        return (diff.norm(dim=-1) / exact.norm(dim=-1)).mean()
    if norm == "mse":
        return (diff**2).mean()
    gap = diff.norm()
    return {"exact": gap / exact.norm(), "none": gap, "approx": gap / approx.norm(),
            "squared": (gap / exact.norm()) ** 2}[norm]


def _window_variant(mask: Callable[[int, int], torch.Tensor] | None = None,
                    causal_reference: bool = True, norm: str = "exact",
                    pick: str = "smallest", numbers: bool = False,
                    invert: bool = False) -> Callable:
    """A wrong experiment: another mask for the window (or the right one as numbers,
    which attention adds to the scores), a reference that is not causal, another
    denominator, or another window picked from the errors."""

    def wrong(query, key, value, windows):
        n = query.size(-2)
        exact = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, is_causal=causal_reference)
        errors = []
        for window in windows:
            allowed = (efficient.sliding_window_mask(n, window) if mask is None
                       else mask(n, window))
            if numbers:
                allowed = allowed.to(query.dtype)
            if invert:
                allowed = ~allowed
            approx = torch.nn.functional.scaled_dot_product_attention(
                query, key, value, attn_mask=allowed)
            errors.append(float(_window_error(norm, approx, exact)))
        if pick == "smallest":
            below = [w for w, e in zip(windows, errors, strict=True) if e < THRESHOLD]
            chosen = min(below) if below else 0
        elif pick == "position":  # where the smallest window stands in the list
            below = [i for i, e in enumerate(errors) if e < THRESHOLD]
            chosen = min(below) if below else 0
        else:  # the largest window that still fails
            above = [w for w, e in zip(windows, errors, strict=True) if e >= THRESHOLD]
            chosen = max(above) if above else 0
        return {"errors": torch.tensor(errors, dtype=torch.float64), "smallest": chosen}

    return wrong


def _band(low: int, high: int) -> Callable[[int, int], torch.Tensor]:
    """Query i sees keys i - window - low < j <= i - high (a window shifted or widened)."""

    def mask(n, window):
        i = torch.arange(n)[:, None]
        j = torch.arange(n)[None, :]
        return (j > i - window - low) & (j <= i - high)

    return mask


def window_cases() -> list[Case]:
    def inputs(n, heads, d, local, seed, sharpness=2.0):
        """Queries and keys of a local head (a shared direction per head, turned with
        the position as in rotary embeddings) or of no locality (plain random)."""
        g = torch.Generator().manual_seed(seed)
        shape = (1, heads, n, d)
        if local:
            shared = torch.randn(1, heads, 1, d, generator=g, dtype=torch.float64)
            noise_q, noise_k = (0.5 * torch.randn(shape, generator=g, dtype=torch.float64)
                                for _ in range(2))
            q = positions.rotary_embedding(sharpness * (shared + noise_q))
            k = positions.rotary_embedding(shared + noise_k)
        else:
            q = torch.randn(shape, generator=g, dtype=torch.float64)
            k = torch.randn(shape, generator=g, dtype=torch.float64)
        v = torch.randn(shape, generator=g, dtype=torch.float64)
        return q, k, v

    def windows(n):
        return [w for w in (1, 2, 4, 8, 16, 32, 64, 128, 256) if w < n] + [n]

    return [
        Case(args=(*inputs(128, 2, 16, True, 1), windows(128)),
             label="a local head, N = 128, 2 heads of 16"),
        Case(args=(*inputs(96, 2, 16, False, 2), windows(96)),
             label="no locality, N = 96, 2 heads of 16"),
        Case(args=(*inputs(160, 3, 16, True, 3, sharpness=3.0), windows(160)), hidden=True),
        Case(args=(*inputs(64, 1, 8, False, 4), windows(64)), hidden=True),
    ]


WINDOW_MISTAKES = mistake_table(_window_variant, [
    ("reference_not_causal", {"causal_reference": False},
     "you compared with attention that also sees the later keys: a sliding window "
     "is a causal mask narrowed further, so the exact attention to compare with is "
     "the causal one (the error of the widest window, which covers every earlier "
     "key, must be 0)"),
    ("one_key_too_many", {"mask": _band(1, 0)},
     "your window holds one key too many: with window w, query i sees itself and "
     "the w - 1 keys before it, from position i - w + 1 on"),
    ("itself_excluded", {"mask": _band(0, 1)},
     "your window leaves out the query's own position: query i sees keys from "
     "i - w + 1 up to and including i"),
    ("absolute_error", {"norm": "none"},
     "your errors are not relative: divide the norm of the difference by the norm "
     "of the exact output"),
    ("relative_to_window", {"norm": "approx"},
     "your errors are divided by the norm of the window's output: divide by the "
     "norm of the exact output, the one you compare with"),
    ("squared_error", {"norm": "squared"},
     "your errors are the square of the relative error: the norm of the difference "
     "over the norm of the exact output, without squaring"),
    ("mean_of_rows", {"norm": "per_row"},
     "you averaged the relative errors of the rows, each against its own norm; the "
     "error asked for is one ratio for the whole output: the norm of the whole "
     "difference over the norm of the whole exact output"),
    ("mean_squared", {"norm": "mse"},
     "your errors are the mean of the squared differences: the question asks for "
     "the relative error, the norm of the difference over the norm of the exact "
     "output"),
    ("window_inverted", {"invert": True},
     "your window's mask is the wrong way round: True must mark the keys a query "
     "may see (its w most recent ones, itself included), and yours marks the "
     "others"),
    ("position_not_window", {"pick": "position"},
     "you gave back where the smallest window stands in the list of windows, not "
     "the window itself (its number of keys)"),
    ("mask_of_numbers", {"numbers": True},
     "your window's mask is made of numbers, not True and False: attention adds a "
     "mask of numbers to the scores (1 for the keys in the window, 0 elsewhere), so "
     "nothing is masked out. Build the mask as booleans"),
    ("largest_failing", {"pick": "largest_failing"},
     "you returned the largest window whose error is still at least 0.1: the "
     "question asks for the smallest window whose error is below it"),
])


# --------------------------------------------------------------------------- question 6
def blockwise_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        block_size: int) -> torch.Tensor:
    """The reference of question 6: exact attention, no mask, ``(..., N, d)``."""
    return efficient.flash_attention(query[None], key[None], value[None],
                                     block_size=block_size)[0]


def _broken(rescale_sum: bool, rescale_acc: bool, last_block: bool,
            inverted: bool = False) -> Callable:
    """The given code with each bug fixed or not (``rescale_sum``: the running sum is
    rescaled; ``last_block``: the last, shorter block is included), or a rescaling
    factor that is upside down."""

    def wrong(query, key, value, block_size):
        scale = 1 / math.sqrt(query.shape[-1])
        n_keys = key.shape[-2]
        row_max = torch.full(query.shape[:-1], MINUS_INF, dtype=query.dtype)
        row_sum = torch.zeros(query.shape[:-1], dtype=query.dtype)
        acc = torch.zeros(*query.shape[:-1], value.shape[-1], dtype=query.dtype)
        stop = n_keys if last_block else n_keys - block_size + 1
        for start in range(0, stop, block_size):
            keys = slice(start, start + block_size)
            scores = scale * query @ key[..., keys, :].transpose(-1, -2)
            new_max = torch.maximum(row_max, scores.amax(-1))
            probs = torch.exp(scores - new_max[..., None])
            if inverted:
                rescale = torch.exp(new_max - row_max).nan_to_num(posinf=0.0)
            else:
                rescale = torch.exp(row_max - new_max)
            row_sum = (rescale * row_sum if rescale_sum else row_sum) + probs.sum(-1)
            acc = ((rescale[..., None] * acc if rescale_acc else acc)
                   + probs @ value[..., keys, :])
            row_max = new_max
        return acc / row_sum[..., None]

    return wrong


def blockwise_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1006)

    def qkv(bh, nq, nk, d, dv, peak_first=False):
        q = torch.randn(bh, nq, d, generator=g, dtype=torch.float64)
        k = torch.randn(bh, nk, d, generator=g, dtype=torch.float64)
        v = torch.randn(bh, nk, dv, generator=g, dtype=torch.float64)
        if peak_first:  # every row's largest score is in the first block: key 0 = query
            k[:, 0] = 3 * q.mean(dim=1)
            q = q.mean(dim=1, keepdim=True) + 0.1 * q
        return q, k, v

    return [
        Case(args=(*qkv(2, 5, 12, 4, 3, peak_first=True), 4),
             label="12 keys in blocks of 4; each row's largest score is in block 1"),
        Case(args=(*qkv(2, 5, 12, 4, 3), 4), label="12 keys in blocks of 4"),
        Case(args=(*qkv(1, 6, 10, 4, 2, peak_first=True), 4),
             label="10 keys in blocks of 4; each row's largest score is in block 1"),
        Case(args=(*qkv(2, 4, 13, 8, 3), 5), hidden=True),
        Case(args=(*qkv(3, 3, 9, 4, 4), 3), hidden=True),
        Case(args=(*qkv(1, 7, 11, 4, 5), 8), hidden=True),
    ]


BLOCKWISE_MISTAKES = mistake_table(_broken, [
    ("starter", {"rescale_sum": False, "rescale_acc": True, "last_block": False},
     "both bugs of the given code are still there: the running sum is not rescaled "
     "when a row's maximum grows, and the last block of keys is dropped when the "
     "block size does not divide the number of keys"),
    ("sum_not_rescaled", {"rescale_sum": False, "rescale_acc": True, "last_block": True},
     "the running sum is still not rescaled when a row's maximum grows: the sum of "
     "the earlier blocks was taken relative to the old maximum and must be "
     "multiplied by the same factor as the accumulator. The bug hides when every "
     "row's largest score is in the first block"),
    ("last_block_dropped", {"rescale_sum": True, "rescale_acc": True, "last_block": False},
     "the last, shorter block of keys is still left out when the block size does "
     "not divide the number of keys: the loop must run up to the last key"),
    ("acc_not_rescaled", {"rescale_sum": True, "rescale_acc": False, "last_block": True},
     "now the running sum is rescaled but the accumulator is not: both were taken "
     "relative to the old maximum, so both need the factor"),
    ("nothing_rescaled", {"rescale_sum": False, "rescale_acc": False, "last_block": True},
     "neither the running sum nor the accumulator is rescaled when a row's maximum "
     "grows: both were taken relative to the old maximum and need the factor"),
    ("rescale_inverted",
     {"rescale_sum": True, "rescale_acc": True, "last_block": True, "inverted": True},
     "your rescaling factor is upside down: when the maximum grows, what was summed "
     "relative to the old maximum shrinks by the exponential of the old maximum "
     "minus the new one, a number below 1"),
])


# --------------------------------------------------------------------------- exercise
SECTION_ONLINE = "10.2 The online softmax"
SECTION_TILING = "10.3 Tiling: exact attention block by block"
SECTION_BACKWARD = "10.4 The backward pass without the $N \\times N$ matrix"
SECTION_MEASURED = "10.5 Measured: time and memory against $N$"
SECTION_CHEAPER = "10.7 Cheaper than exact: sliding windows and linear attention"

EXERCISE = Exercise(
    id="10_efficient_attention",
    title="Efficient attention",
    forbidden_imports=("attention_course.efficient",),
    questions=(
        Question(
            id="q1_merge_states",
            symbol="merge_states",
            title="Derive: merging two online-softmax states",
            kind="derive",
            points=3,
            reference=merge_states,
            cases=merge_cases,
            parts={"row_max": 1, "row_sum": 1, "acc": 1},
            rtol=1e-9,
            atol=1e-12,
            mistakes=MERGE_MISTAKES,
            hint=("Write each state's sum and accumulator relative to the common maximum: "
                  "the exponential of a score minus one maximum is that of the score minus "
                  "another, times a factor. Then mind a row neither state has seen."),
            section=SECTION_ONLINE,
        ),
        Question(
            id="q2_block_backward",
            symbol="block_backward",
            title="The backward pass of one block of keys",
            kind="implement",
            points=3,
            reference=block_backward,
            cases=block_cases,
            parts={"grad_query": 1, "grad_key": 1, "grad_value": 1},
            rtol=1e-8,
            atol=1e-10,
            mistakes=BLOCK_MISTAKES,
            hint=("The block's weights come from the saved log-sum-exp, not from a softmax "
                  "over the block; D comes from the output and its gradient, not from the "
                  "weights; the scale appears once in each gradient of the scores' inputs."),
            section=SECTION_BACKWARD,
        ),
        Question(
            id="q3_scores_computed",
            symbol="causal_scores_computed",
            title="Derive: the scores a causal blockwise pass computes",
            kind="derive",
            points=3,
            reference=causal_scores_computed,
            cases=count_cases,
            parts={"computed": 2, "masked": 1},
            mistakes=COUNT_MISTAKES,
            hint=("Go block by block over the keys: which rows compute scores against a "
                  "block, and how many keys does the block hold? Then compare with the "
                  "number of (query, key) pairs the causal mask allows."),
            section=SECTION_TILING,
        ),
        prediction(
            id="q4_predict_memory",
            symbol="predict_memory_growth",
            title="Predict: how peak memory grows when N doubles",
            points=3,
            answer=GROWTH,
            choices=GROWTH_CHOICES,
            wrong=GROWTH_WRONG,
            hint=("For each path, find the largest tensor it holds during a forward and "
                  "backward pass, and how its size depends on N."),
            section=SECTION_MEASURED,
        ),
        Question(
            id="q5_window_errors",
            symbol="window_errors",
            title="Experiment: how wide must a sliding window be?",
            kind="experiment",
            points=3,
            reference=window_errors,
            cases=window_cases,
            parts={"errors": 2, "smallest": 1},
            rtol=1e-4,
            atol=1e-6,
            mistakes=WINDOW_MISTAKES,
            hint=("Compare each window's output with exact causal attention on the same "
                  "inputs; with window w, query i sees the w most recent keys, itself "
                  "included."),
            section=SECTION_CHEAPER,
            time_limit=20.0,
        ),
        Question(
            id="q6_fix_blockwise",
            symbol="blockwise_attention",
            title="Debug: a blockwise attention that is wrong on some inputs",
            kind="debug",
            points=3,
            reference=blockwise_attention,
            cases=blockwise_cases,
            grad=True,
            rtol=1e-8,
            atol=1e-10,
            mistakes=BLOCKWISE_MISTAKES,
            hint=("Two bugs, each hidden on some inputs: compare the update with the "
                  "online softmax of the chapter term by term, and count the keys the loop "
                  "visits when the block size does not divide their number."),
            section=SECTION_ONLINE,
        ),
    ),
)
