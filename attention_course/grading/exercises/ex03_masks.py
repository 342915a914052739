"""Exercise 3: masks (chapter 3).

Six questions: the masked softmax with valid lengths (implement), the padding mask on
either side (implement), a masked attention that gives NaN (debug), the inverted mask
convention (predict), the bottom-right causal mask a KV cache needs (implement, an
extension of the chapter), and how many (query, key) pairs causal and padding masks
allow (derive). The references are the package's own chapter-3 code where it has it.

Every known mistake is recognised by its output. Two questions compare gradients as well
(``grad=True``); for them a mistake is also recognised by its forward output alone (a
learner's code may reach the same wrong weights along another path, with other
gradients), in the ``diagnose`` hooks below, which also name the symptoms (NaN or uniform
rows where nothing is allowed, weight on a masked key, rows that do not sum to 1,
normalisation over the wrong axis) when no known mistake matches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from attention_course import masking
from attention_course.grading._driver import call_case, to_plain
from attention_course.grading.compare import compare
from attention_course.grading.spec import Case, Exercise, Mistake, Question
from attention_course.grading.tables import changed, mistake_table, prediction
from attention_course.i18n import N_, _

MINUS_INF = float("-inf")
RTOL, ATOL = 1e-4, 1e-6


# --------------------------------------------------------------------------- diagnosis
def _forward(answer: Any) -> Any:
    """The forward output of an answer (for ``grad=True`` the answer is a dict that also
    holds gradients)."""
    if type(answer) is dict and set(answer) == {"output", "gradients"}:
        return answer["output"]
    return answer


def _known_by_forward(mistakes: Sequence[Mistake], case: Case, want: Any,
                      got: Any) -> str | None:
    """The message of the first mistake whose forward output ``got`` matches, among those
    that answer this case differently from the reference (whose answer is ``want``)."""
    for mistake in mistakes:
        try:
            theirs = to_plain(call_case(mistake.wrong, "function", "forward", case.to_plain()))
        except Exception:  # a mistake that cannot run on this case explains nothing
            continue
        if compare(theirs, want, RTOL, ATOL) is not None and compare(theirs, got, RTOL,
                                                                     ATOL) is None:
            return _(mistake.message)
    return None


def _ranges(row: torch.Tensor) -> str:
    """The True positions of a bool row in words: "0 to 2 and 4", or "none"."""
    spans, start = [], None
    values = [bool(v) for v in row] + [False]
    for j, v in enumerate(values):
        if v and start is None:
            start = j
        elif not v and start is not None:
            spans.append(f"{start}" if j - 1 == start else
                         _("{start} to {end}").format(start=start, end=j - 1))
            start = None
    if not spans:
        return _("none")
    words = spans[0]
    for span in spans[1:]:
        words = _("{positions} and {span}").format(positions=words, span=span)
    return words


def _empty_row_problem(w: torch.Tensor, e: torch.Tensor, what: str) -> str | None:
    """What is wrong in the rows that allow nothing (``e`` all zero there)."""
    empty = e.abs().sum(-1) == 0
    if not bool(empty.any()):
        return None
    rows_w = w[empty]
    if bool(torch.isnan(rows_w).any()):
        return _("a {what} with no allowed key came out NaN: with every score of the row "
                 "at minus infinity, the softmax computes minus infinity minus minus "
                 "infinity. Such a row must be all zeros").format(what=_(what))
    width = w.shape[-1]
    uniform = torch.full_like(rows_w, 1.0 / width)
    if torch.allclose(rows_w, uniform, atol=1e-4) and width > 1:
        return _("a {what} with no allowed key came out uniform, 1/{width} on every key: "
                 "a large finite negative fill makes all of its scores equal. Such a row "
                 "must be all zeros").format(what=_(what), width=width)
    if not torch.allclose(rows_w, torch.zeros_like(rows_w), atol=1e-6):
        return _("a {what} with no allowed key must be all zeros, but yours is "
                 "not").format(what=_(what))
    return None


def _weights_problem(w: torch.Tensor, e: torch.Tensor, what: str = N_("row"),
                     large: bool = False) -> str | None:
    """A teaching message about attention weights ``w`` where ``e`` is the answer
    (``large``: the case has scores large enough to overflow a careless softmax)."""
    if w.shape != e.shape or w.numel() == 0 or not w.is_floating_point():
        return None
    w, e = w.detach().double(), e.detach().double()
    full = e.abs().sum(-1) > 0
    columns = torch.nansum(w, dim=-2)
    seen = torch.isfinite(w).any(-2) & (w.nan_to_num().abs().sum(-2) > 0)
    if (w.shape[-2] > 1 and bool(seen.any()) and bool(((columns - 1).abs() < 1e-3)[seen].all())
            and not bool(((w.sum(-1) - 1).abs() < 1e-3)[full].all())):
        return _("your weights sum to 1 down the columns (over the queries), not along "
                 "each row: each query spreads its attention over the keys, the last axis")
    if not bool(torch.isfinite(w[full]).all()):
        if large:
            return _("with large scores your weights hold inf or NaN: did the exponentials "
                     "overflow? The exponential of a score above about 88 is infinite in "
                     "float32; subtract each row's largest allowed score first")
        return _("a {what} that has allowed keys holds inf or NaN").format(what=_(what))
    leak = (e == 0) & (w.abs() > 1e-6) & full[..., None]
    if bool(leak.any()):
        where = tuple(int(i) for i in leak.nonzero()[0])
        return _("the weight at index {where} belongs to a masked key and must be exactly "
                 "0, got {weight}: a masked key gets no weight at all").format(
                     where=where, weight=f"{w[where].item():.3g}")
    lost = (w == 0) & (e.abs() > 1e-6)
    if bool(lost.any()):
        where = tuple(int(i) for i in lost.nonzero()[0])
        return _("the weight at index {where} is 0, but that key is allowed: your mask "
                 "removes a key it should keep").format(where=where)
    problem = _empty_row_problem(w, e, what)
    if problem:
        return problem
    sums = w.sum(-1)
    bad = full & ((sums - 1).abs() > 1e-3)
    if bool(bad.any()):
        where = tuple(int(i) for i in bad.nonzero()[0])
        return _("the {what} at index {where} sums to {total}: the weights of the allowed "
                 "keys of a row must sum to 1").format(what=_(what), where=where,
                                                       total=f"{sums[where].item():.3g}")
    return None


def _gradient_problem(got: Any) -> str | None:
    """The forward output is right; say what is wrong with the gradients."""
    grads = got.get("gradients", []) if type(got) is dict else []
    if any(isinstance(g, torch.Tensor) and bool(torch.isnan(g).any()) for g in grads):
        return _("your answer is right, but its gradient is NaN: a NaN computed in the "
                 "forward pass and replaced afterwards still flows through the backward "
                 "pass. Make sure no NaN is computed at all (see how the chapter treats the "
                 "row maximum and a zero denominator)")
    return _("your output is right, but its gradient is not: is part of the computation "
             "detached, or computed without gradients?")


def explain_weights(mistakes: Sequence[Mistake],
                    pick: Callable[[Any], Any] = lambda out: out,
                    what: str = N_("row"),
                    large: Callable[[Case], bool] = lambda case: False,
                    ) -> Callable[[Case, Any, Any], str | None]:
    """A ``diagnose`` hook for answers holding attention weights (``pick`` finds them in
    the forward output): a known mistake matched on the forward output alone, else a
    gradient problem when the forward output is right, else the symptom of the weights,
    else (right weights, wrong answer) an output not made of those weights."""

    def diagnose(case: Case, expected: Any, got: Any) -> str | None:
        want, mine = _forward(expected), _forward(got)
        known = _known_by_forward(mistakes, case, want, mine)
        if known:
            return known
        if compare(want, mine, RTOL, ATOL) is None:
            return _gradient_problem(got)
        w, e = pick(mine), pick(want)
        if not (isinstance(w, torch.Tensor) and isinstance(e, torch.Tensor)):
            return None
        if pick(want) is not want and compare(e, w, RTOL, ATOL) is None:
            return _("your weights are right, but the output is not: it must be the "
                     "weights (as you return them) times the values. Was it computed before "
                     "the weights were fixed?")
        return _weights_problem(w, e, what, large(case))

    return diagnose


def explain_mask(mistakes: Sequence[Mistake],
                 describe: Callable[[Case, int], tuple[str, str]]) -> Callable[..., str | None]:
    """A ``diagnose`` hook for boolean masks: a mask stored as numbers is judged on its
    True/False pattern too (right pattern, or a known mistake), else the first row that
    differs is described in words. ``describe(case, row)`` gives that row's name, already
    translated, and what its True entries mean, marked with ``N_`` and translated here
    ("sequence 0 (valid length 3)", "positions")."""

    def diagnose(case: Case, expected: Any, got: Any) -> str | None:
        if not (isinstance(got, torch.Tensor) and isinstance(expected, torch.Tensor)):
            return None
        if got.shape != expected.shape or got.dim() != 2 or got.is_complex():
            return None
        numbers = got.dtype != torch.bool
        pattern = got != 0 if numbers else got
        if numbers and torch.equal(pattern, expected):
            return _("your True/False pattern is right, but it is stored as numbers: the "
                     "mask must be boolean (a number mask would be added to the scores)")
        known = _known_by_forward(mistakes, case, expected, pattern)
        if known and numbers:
            return _("{mistake} (and the mask must be boolean, not numbers)").format(
                mistake=known)
        if known:
            return known
        differs = (pattern != expected).any(-1).nonzero()
        if not len(differs):
            return None
        row = int(differs[0])
        name, unit = describe(case, row)
        return _("{name} should be True at {unit} {expected}; yours is True at "
                 "{mine}").format(name=name, unit=_(unit), expected=_ranges(expected[row]),
                                  mine=_ranges(pattern[row]))

    return diagnose


# --------------------------------------------------------------------------- question 1
def _allowed(scores: torch.Tensor, valid_lens: torch.Tensor | None,
             inclusive: bool = False) -> torch.Tensor | None:
    """Bool mask (B, 1 or Nq, Nk) of the kept keys (``inclusive``: j <= L, one too many)."""
    if valid_lens is None:
        return None
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[:, :, None]
    keys = torch.arange(scores.shape[-1])
    return keys <= lens if inclusive else keys < lens


def _softmax_filled(scores: torch.Tensor, valid_lens: torch.Tensor | None,
                    fill: float) -> torch.Tensor:
    allowed = _allowed(scores, valid_lens)
    filled = scores if allowed is None else scores.masked_fill(~allowed, fill)
    return torch.softmax(filled, dim=-1)


def _patched_additive(scores, valid_lens):
    """-inf added to the scores, softmax, NaN replaced by 0 afterwards: right weights,
    NaN gradients."""
    allowed = _allowed(scores, valid_lens)
    if allowed is None:
        return torch.softmax(scores, dim=-1)
    additive = torch.zeros(allowed.shape).masked_fill(~allowed, MINUS_INF)
    return torch.nan_to_num(torch.softmax(scores + additive, dim=-1))


def _no_max_subtraction(scores, valid_lens):
    """exp of the raw scores: overflows for large scores."""
    allowed = _allowed(scores, valid_lens)
    filled = scores if allowed is None else scores.masked_fill(~allowed, MINUS_INF)
    exp = torch.exp(filled)
    total = exp.sum(-1, keepdim=True)
    return exp / torch.where(total > 0, total, torch.ones_like(total))


def _max_over_all_keys(scores, valid_lens):
    """exp(s - max over all keys), masked and normalised: allowed keys underflow when a
    masked key scores much higher."""
    allowed = _allowed(scores, valid_lens)
    exp = torch.exp(scores - scores.amax(-1, keepdim=True).detach())
    exp = exp if allowed is None else exp * allowed
    total = exp.sum(-1, keepdim=True)
    return exp / torch.where(total > 0, total, torch.ones_like(total))


def _zeroed_after_softmax(scores, valid_lens):
    allowed = _allowed(scores, valid_lens)
    weights = torch.softmax(scores, dim=-1)
    return weights if allowed is None else weights * allowed


def _over_queries(scores, valid_lens):
    allowed = _allowed(scores, valid_lens)
    if allowed is not None:
        allowed = allowed.expand(scores.shape).transpose(-2, -1)
    return masking._softmax_where(scores.transpose(-2, -1), allowed).transpose(-2, -1)


def _mask_on_queries(scores, valid_lens):
    """(B,) lengths compared with the query index: whole rows masked instead of columns."""
    if valid_lens is None or valid_lens.dim() != 1:
        return masking.masked_softmax(scores, valid_lens)
    rows = torch.arange(scores.shape[-2])[:, None] < valid_lens[:, None, None]
    return masking._softmax_where(scores, rows.expand(scores.shape))


def _lens_per_key(scores, valid_lens):
    """(B, Nq) lengths lined up with the keys: key j limited by the length of query j."""
    if valid_lens is None or valid_lens.dim() != 2 or scores.shape[-1] != scores.shape[-2]:
        return masking.masked_softmax(scores, valid_lens)
    allowed = torch.arange(scores.shape[-1]) < valid_lens[:, None, :]
    return masking._softmax_where(scores, allowed)


def masked_softmax_cases() -> list[Case]:
    g = torch.Generator().manual_seed(301)

    def scores(*shape, scale=1.0):
        return torch.randn(*shape, generator=g) * scale

    padding_far_higher = torch.zeros(2, 1, 5)
    padding_far_higher[0, :, 3:] = 400.0  # keys 3 and 4 of sequence 0 are padding
    return [
        Case(args=(scores(2, 3, 5), torch.tensor([2, 5])), label="valid_lens (B,) = [2, 5]"),
        Case(args=(scores(2, 4, 4), torch.tensor([[1, 3, 4, 2], [4, 1, 2, 3]])),
             label="one valid length per query, (B, Nq) = [[1, 3, 4, 2], [4, 1, 2, 3]]"),
        Case(args=(scores(3, 2, 6), torch.tensor([0, 6, 1])),
             label="valid_lens [0, 6, 1]: a sequence with no valid key"),
        Case(args=(scores(1, 4, 3), None), label="valid_lens None"),
        Case(args=(scores(2, 2, 5, scale=40.0) + padding_far_higher, torch.tensor([3, 5])),
             label="large scores, the padding's far above the real keys', valid_lens [3, 5]"),
        Case(args=(scores(2, 3, 7), torch.tensor([[7, 0, 3], [1, 2, 6]])), hidden=True),
        Case(args=(scores(4, 1, 3), torch.tensor([3, 0, 1, 2])), hidden=True),
        Case(args=(scores(1, 3, 3, scale=60.0), torch.tensor([[3, 1, 0]])), hidden=True),
    ]


MASKED_SOFTMAX_MISTAKES = (
    Mistake("minus_inf_nan", lambda s, lens: _softmax_filled(s, lens, MINUS_INF),
            "a row whose valid length is 0 came out NaN: with nothing left to normalise, a "
            "plain softmax of minus infinities computes minus infinity minus minus infinity, "
            "and a division by the row sum computes 0/0. Such a row must be all zeros, so "
            "compute neither"),
    Mistake("large_negative", lambda s, lens: _softmax_filled(s, lens, -1e9),
            "a row whose valid length is 0 came out uniform (1/Nk on every key): filling "
            "the masked scores with a large finite negative number makes all of its scores "
            "equal when nothing is left. Such a row must be all zeros"),
    Mistake("patched_additive", _patched_additive,
            "your weights are right, but the gradient through a row with valid length 0 is "
            "NaN: replacing the NaN after the softmax hides it in the forward pass only, and "
            "the backward pass still goes through it. Make sure no NaN is computed at all"),
    Mistake("no_max_subtraction", _no_max_subtraction,
            "with large scores your weights overflow to inf or NaN: the exponential of a "
            "score above about 88 is infinite in float32. Subtract each row's largest "
            "allowed score before exponentiating (it does not change the softmax)"),
    Mistake("max_over_all_keys", _max_over_all_keys,
            "with large scores the weights of a row vanish: you subtracted the largest score "
            "of the whole row, masked keys included, and when a masked key scores much "
            "higher, every allowed key's exponential underflows to 0. Subtract the largest "
            "allowed score"),
    Mistake("off_by_one", lambda s, lens: masking._softmax_where(s, _allowed(s, lens, True)),
            "you keep one key too many: with valid length L, keys 0 to L - 1 are real and "
            "key L (counting from 0) is the first padding position"),
    Mistake("one_too_few",
            lambda s, lens: masking.masked_softmax(s, None if lens is None else
                                                   (lens - 1).clamp(min=0)),
            "you keep one key too few: with valid length L, keys 0 to L - 1 are all real, "
            "key L - 1 included"),
    Mistake("inverted",
            lambda s, lens: s.softmax(-1) if lens is None else
            masking._softmax_where(s, ~_allowed(s, lens)),
            "your weights go to the padding and not to the real keys: the keys to keep are "
            "those before the valid length"),
    Mistake("zeroed_after_softmax", _zeroed_after_softmax,
            "the masked keys get 0, but the kept weights of a row no longer sum to 1: they "
            "were normalised over all keys, padding included, before you zeroed the "
            "padding. Leave the masked keys out of the normalisation itself"),
    Mistake("over_queries", _over_queries,
            "your weights are normalised over the queries (they sum to 1 down each column) "
            "instead of over the keys: each query spreads its attention over the keys, the "
            "last axis"),
    Mistake("mask_on_queries", _mask_on_queries,
            "your mask removes whole rows (queries) instead of columns (keys): a valid "
            "length says how many keys are real, so compare it with the key position, the "
            "last axis"),
    Mistake("lens_per_key", _lens_per_key,
            "with one valid length per query, you applied the length of query i to key i (a "
            "column) instead of to row i: line the lengths up with the queries axis"),
)


# --------------------------------------------------------------------------- question 2
def padding_mask(valid_lens: torch.Tensor, max_len: int, side: str = "right") -> torch.Tensor:
    """Bool (B, max_len), True on the real tokens: the first L positions (``side="right"``,
    padding after the tokens) or the last L (``side="left"``, padding before them)."""
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side!r}")
    positions = torch.arange(max_len)
    lens = valid_lens[:, None]
    return positions < lens if side == "right" else positions >= max_len - lens


def _padding_variant(right: Callable, left: Callable) -> Callable:
    def wrong(valid_lens, max_len, side="right"):
        fn = right if side == "right" else left
        return fn(torch.arange(max_len), valid_lens[:, None], max_len)

    return wrong


def _pad_right(p, lens, n):
    return p < lens


def _pad_left(p, lens, n):
    return p >= n - lens


def padding_cases() -> list[Case]:
    def lens(*values):
        return torch.tensor(values)

    return [
        Case(args=(lens(3, 1, 5), 5), label="valid_lens [3, 1, 5], max_len 5, side 'right'"),
        Case(args=(lens(3, 1, 5), 5), kwargs={"side": "left"},
             label="valid_lens [3, 1, 5], max_len 5, side 'left'"),
        Case(args=(lens(2, 0, 1), 4), label="valid_lens [2, 0, 1], max_len 4, side 'right'"),
        Case(args=(lens(0, 2), 4), kwargs={"side": "left"},
             label="valid_lens [0, 2], max_len 4, side 'left'"),
        Case(args=(lens(2, 6, 0, 4), 6), kwargs={"side": "right"}, hidden=True),
        Case(args=(lens(1, 4, 6), 6), kwargs={"side": "left"}, hidden=True),
        Case(args=(lens(7, 2), 7), kwargs={"side": "left"}, hidden=True),
    ]


def _describe_padding(case: Case, row: int) -> tuple[str, str]:
    valid_lens, max_len = case.args
    side = case.kwargs.get("side", "right")
    return (_("row {row} (valid length {length}, max_len {max_len}, side "
              "'{side}')").format(row=row, length=int(valid_lens[row]), max_len=max_len,
                                  side=side), N_("positions"))


PADDING_MISTAKES = (
    *mistake_table(_padding_variant, [
        ("inverted",
         {"right": lambda p, lens, n: p >= lens, "left": lambda p, lens, n: p < n - lens},
         "True marks the padding in your mask: the opposite of the course's convention, "
         "where True marks a real token (a key that may be attended to). PyTorch's "
         "MultiheadAttention key padding mask uses your convention, ours does not"),
        ("side_ignored", {"right": _pad_right, "left": _pad_right},
         "with side 'left' your mask is the same as with side 'right': with left padding "
         "the padding comes first, so the real tokens are the last L positions"),
        ("left_starts_at_length", {"right": _pad_right, "left": lambda p, lens, n: p >= lens},
         "with side 'left' your real tokens start at position L (the valid length): "
         "they start after the padding, and there are max_len - L padding positions"),
        ("off_by_one", {"right": lambda p, lens, n: p <= lens, "left": _pad_left},
         "one position too many is marked real: with valid length L the real tokens are "
         "positions 0 to L - 1, and position L is the first padding"),
        ("left_one_short", {"right": _pad_right, "left": lambda p, lens, n: p > n - lens},
         "with side 'left' you mark one real token too few: the first real token is at "
         "position max_len - L, and your mask starts one later"),
        ("left_one_long", {"right": _pad_right, "left": lambda p, lens, n: p >= n - lens - 1},
         "with side 'left' you mark one position too many as real: the last padding "
         "position, just before the first real token at max_len - L"),
    ]),
    Mistake("width_from_lengths",
            lambda valid_lens, max_len, side="right": padding_mask(
                valid_lens, int(valid_lens.max()), side),
            "your mask is as wide as the longest valid length; it must have max_len "
            "columns, one per position, even when no sequence fills them all"),
)


# --------------------------------------------------------------------------- question 3
def _attention(query, key, value, attn_mask, scale: str = "d", empty: str = "zeros",
               inverted: bool = False):
    """Masked attention with a chosen scale (divided by the square root of "d", "dv",
    "none" (1), "d_not_sqrt" (d squared), "inverse" (1/d), "keys" (Nk)), a chosen
    treatment of rows that allow nothing ("zeros", "nan", "uniform", "nan_weights"), and
    the mask read the right way or ``inverted``."""
    if inverted:
        attn_mask = ~attn_mask
    d = {"d": query.shape[-1], "dv": value.shape[-1], "none": 1,
         "d_not_sqrt": query.shape[-1] ** 2, "inverse": 1 / query.shape[-1],
         "keys": key.shape[-2]}[scale]
    scores = query @ key.transpose(-2, -1) / math.sqrt(d)
    if empty == "zeros":
        weights = masking._softmax_where(scores, attn_mask)
        return weights @ value, weights
    fill = -1e9 if empty == "uniform" else MINUS_INF
    weights = torch.softmax(scores.masked_fill(~attn_mask, fill), dim=-1)
    if empty == "nan_weights":
        return torch.nan_to_num(weights) @ value, weights
    return weights @ value, weights


def fixed_attention(query, key, value, attn_mask):
    """The reference of question 3: the chapter's scaled dot-product attention."""
    return masking.scaled_dot_product_attention(query, key, value, attn_mask)


def attention_cases() -> list[Case]:
    g = torch.Generator().manual_seed(303)

    def qkv(*lead, nq, nk, d, dv):
        return (torch.randn(*lead, nq, d, generator=g), torch.randn(*lead, nk, d, generator=g),
                torch.randn(*lead, nk, dv, generator=g))

    def pad(lens, n, side="right"):
        return padding_mask(torch.tensor(lens), n, side)

    left_causal = pad([3, 5], 5, "left")[:, None, None, :] & masking.causal_mask(5)
    some_empty = torch.rand(1, 3, 6, generator=g) < 0.6
    some_empty[0, 0, 0] = True
    some_empty[0, 1] = False
    return [
        Case(args=(*qkv(2, nq=3, nk=4, d=4, dv=4), pad([3, 0], 4)[:, None, :]),
             label="sentence 1 is all padding: its queries may attend to no key"),
        Case(args=(*qkv(2, nq=4, nk=5, d=8, dv=3), pad([5, 2], 5)[:, None, :]),
             label="no fully masked row; queries and keys of size 8, values of size 3"),
        Case(args=(*qkv(2, 2, nq=5, nk=5, d=4, dv=6), left_causal),
             label="two heads; left padding and a causal mask, (B, 1, N, N)"),
        Case(args=(*qkv(1, nq=3, nk=6, d=6, dv=2), some_empty), hidden=True),
        Case(args=(*qkv(3, nq=2, nk=3, d=5, dv=5), pad([1, 3, 2], 3)[:, None, :]),
             hidden=True),
    ]


ATTENTION_MISTAKES = mistake_table(changed(_attention), [
    ("scale_by_dv", {"scale": "dv"},
     "the weights are wrong wherever the values' size differs from the queries' "
     "size: your scores are divided by the square root of the value dimension, but "
     "the formula scales by the size that queries and keys share"),
    ("no_scale", {"scale": "none"},
     "your scores are not scaled at all: they are the square root of d times too "
     "large"),
    ("scale_by_d", {"scale": "d_not_sqrt"},
     "your scores are divided by d, not by its square root"),
    ("scale_by_num_keys", {"scale": "keys"},
     "your scores are divided by the square root of the number of keys; the scale "
     "is the size of each query and key vector, their last axis"),
    ("scale_multiplied", {"scale": "inverse"},
     "your scores are multiplied by the square root of d instead of divided by it"),
    ("starter", {"scale": "dv", "empty": "nan"},
     "a query that may attend to no key still gets NaN weights and a NaN output, as "
     "in the given code: the softmax of a row of minus infinities is NaN. Such a "
     "query must get zero weights and a zero output"),
    ("uniform_row", {"empty": "uniform"},
     "a query that may attend to no key now spreads its weight evenly over every "
     "key, padding included (1/Nk each), as a large finite negative fill does. It "
     "must get zero weights and a zero output instead"),
    ("nan_weights_zero_output", {"empty": "nan_weights"},
     "the output of a query with no allowed key is now zero, but its weights are "
     "still NaN: fix the weights themselves, and the output follows"),
    ("mask_inverted", {"inverted": True},
     "your weights go to the masked keys and not to the allowed ones: in the course's "
     "convention True in the mask means the query may attend to that key"),
])


# --------------------------------------------------------------------------- question 4
CHOICES = ("only the real tokens", "only the padding", "every position equally",
           "no position (zero weights)", "NaN")
PREDICTION = {"careful_a": "only the padding", "careful_b": "no position (zero weights)",
              "broken_b": "NaN"}


PREDICT_WRONG = [
    ("a_real", "careful_a", "only the real tokens",
     "sentence A: you assumed the mask still marks the real tokens. With True on the "
     "padding and True meaning allowed, the mask now allows exactly the padding"),
    ("a_uniform", "careful_a", "every position equally",
     "sentence A: the mask is not ignored, it is misread. Its True entries still "
     "decide which keys share the weight, so the weights are not spread evenly"),
    ("a_zero", "careful_a", "no position (zero weights)",
     "sentence A: its row is not empty. The inverted mask is True on its two padding "
     "positions, so the query has allowed keys"),
    ("a_nan", "careful_a", "NaN",
     "sentence A: no NaN here. Your fixed attention never gives NaN, and this row "
     "still has allowed keys (its padding)"),
    ("b_real", "careful_b", "only the real tokens",
     "sentence B: it has no padding, so its inverted mask is False everywhere: no "
     "key at all is allowed, real or not"),
    ("b_padding", "careful_b", "only the padding",
     "sentence B: it has no padding to attend to. Its inverted mask is False "
     "everywhere"),
    ("b_uniform", "careful_b", "every position equally",
     "sentence B: even weights come from a large finite negative fill; your fixed "
     "attention gives a query that may see nothing zero weights"),
    ("b_nan", "careful_b", "NaN",
     "sentence B: the row is empty, but your fixed attention (question 3) turns an "
     "empty row into zeros, never into NaN"),
    ("broken_real", "broken_b", "only the real tokens",
     "the given broken code on sentence B: the inverted mask allows no key at all, "
     "so every score of the row is replaced by minus infinity before the softmax"),
    ("broken_padding", "broken_b", "only the padding",
     "the given broken code on sentence B: there is no padding in sentence B, and "
     "its inverted mask allows no key at all"),
    ("broken_uniform", "broken_b", "every position equally",
     "the given broken code on sentence B: even weights would come from a finite "
     "fill, but the broken code fills with minus infinity, and the softmax of a row "
     "of minus infinities is not a number"),
    ("broken_zero", "broken_b", "no position (zero weights)",
     "the given broken code on sentence B: zero weights are what your fixed version "
     "gives. The broken code hands a row of minus infinities to a plain softmax"),
]


# --------------------------------------------------------------------------- question 5
def cached_causal_mask(n: int, num_keys: int) -> torch.Tensor:
    """The reference of question 5: bottom-right aligned, query i sees j <= i + num_keys - n."""
    return masking.causal_mask(n, num_keys, align="bottom_right")


def _tril(offset: Callable[[int, int], int], invert: bool = False, upper: bool = False):
    def wrong(n, num_keys):
        ones = torch.ones(n, num_keys, dtype=torch.bool)
        mask = ones.triu(offset(n, num_keys)) if upper else ones.tril(offset(n, num_keys))
        return ~mask if invert else mask

    return wrong


def cached_causal_cases() -> list[Case]:
    return [
        Case(args=(3, 5), label="3 new tokens after 2 cached ones (n = 3, num_keys = 5)"),
        Case(args=(1, 6), label="one new token after 5 cached ones (n = 1, num_keys = 6)"),
        Case(args=(4, 4), label="no cache yet (n = num_keys = 4)"),
        Case(args=(2, 7), hidden=True),
        Case(args=(5, 8), hidden=True),
        Case(args=(1, 1), hidden=True),
    ]


def _describe_cached(case: Case, row: int) -> tuple[str, str]:
    n, num_keys = case.args
    return (_("query {row} (of n = {n}, with num_keys = {num_keys})").format(
        row=row, n=n, num_keys=num_keys), N_("keys"))


CACHED_MISTAKES = (
    *mistake_table(_tril, [
        ("top_left", {"offset": lambda n, nk: 0},
         "your queries see the keys as if they were the first n positions (top-left "
         "alignment): the n new tokens are the last n positions, so query i also sees "
         "every cached key before it, and the last query sees every key"),
        ("no_diagonal", {"offset": lambda n, nk: nk - n - 1},
         "each query is denied its own position: a token may attend to itself, so the "
         "key at the query's own position must be True"),
        ("inverted", {"offset": lambda n, nk: nk - n, "invert": True},
         "True marks the forbidden (future) keys in your mask, the opposite of the "
         "course's convention: True means the query may attend to that key"),
        ("one_future", {"offset": lambda n, nk: nk - n + 1},
         "each query also sees the key right after its own position, the next token, "
         "which it must not see"),
        ("offset_negated", {"offset": lambda n, nk: n - nk},
         "your queries see fewer keys than the top-left mask would, not more: the cached "
         "keys shift what a query may see to the right, towards the later keys"),
        ("past_hidden", {"offset": lambda n, nk: nk - n, "upper": True},
         "your mask lets each query see its own and the later positions and hides the "
         "earlier ones: a token attends to the past, not to the future"),
    ]),
    Mistake("all_true", lambda n, nk: torch.ones(n, nk, dtype=torch.bool),
            "your mask allows every key for every query: the new tokens must not see the "
            "new tokens that come after them"),
)


# --------------------------------------------------------------------------- question 6
def count_allowed(n: int, valid_lens: list[int]) -> dict[str, int]:
    """The reference of question 6: totals over the batch of self-attention of length n
    with a causal mask and a key padding mask."""
    return {
        "pairs_right": sum(L * (L + 1) // 2 + (n - L) * L for L in valid_lens),
        "pairs_left": sum(L * (L + 1) // 2 for L in valid_lens),
        "empty_rows_left": sum(n - L for L in valid_lens),
    }


def _counting(pairs_right=None, pairs_left=None, empty_rows_left=None):
    """A wrong count: each given formula (n, L) -> int replaces that part, summed."""
    def wrong(n, valid_lens):
        counts = count_allowed(n, valid_lens)
        for key, formula in (("pairs_right", pairs_right), ("pairs_left", pairs_left),
                             ("empty_rows_left", empty_rows_left)):
            if formula is not None:
                counts[key] = sum(formula(n, L) for L in valid_lens)
        return counts

    return wrong


def count_cases() -> list[Case]:
    return [
        Case(args=(5, [3, 5]), label="n = 5, valid_lens [3, 5]"),
        Case(args=(4, [0, 4, 2]), label="n = 4, valid_lens [0, 4, 2]"),
        Case(args=(7, [1, 6, 7]), hidden=True),
        Case(args=(6, [2]), hidden=True),
        Case(args=(9, [4, 0, 9, 5]), hidden=True),
    ]


COUNT_MISTAKES = mistake_table(_counting, [
    ("left_like_right",
     {"pairs_left": lambda n, L: L * (L + 1) // 2 + (n - L) * L,
      "empty_rows_left": lambda n, L: 0},
     "with left padding the padding comes first: under the causal mask a padded "
     "query sees only positions before it, all padding, so its row is empty, and a "
     "real query sees real keys only from the first real token on"),
    ("causal_only",
     {"pairs_right": lambda n, L: n * (n + 1) // 2, "pairs_left": lambda n, L: n * (n + 1) // 2,
      "empty_rows_left": lambda n, L: 0},
     "you counted the causal mask alone: the padding mask also removes every padded "
     "key, in every row"),
    ("padding_only",
     {"pairs_right": lambda n, L: n * L, "pairs_left": lambda n, L: n * L,
      "empty_rows_left": lambda n, L: n * (L == 0)},
     "you left out the causal mask: a query sees only the keys at or before its own "
     "position"),
    ("real_queries_only", {"pairs_right": lambda n, L: L * (L + 1) // 2},
     "with right padding you counted only the real queries: a key padding mask "
     "removes padded keys (columns), not padded queries (rows), so each of the "
     "n - L padded queries still sees all L real tokens"),
    ("no_diagonal",
     {"pairs_right": lambda n, L: L * (L - 1) // 2 + (n - L) * L,
      "pairs_left": lambda n, L: L * (L - 1) // 2,
      "empty_rows_left": lambda n, L: n - L + (L > 0)},
     "you left out the diagonal: under the causal mask a query may attend to its own "
     "position"),
    ("padded_see_themselves",
     {"pairs_right": lambda n, L: L * (L + 1) // 2 + (n - L) * (L + 1),
      "pairs_left": lambda n, L: L * (L + 1) // 2 + (n - L), "empty_rows_left": lambda n, L: 0},
     "you let each padded query attend to its own position: that position is "
     "padding, and the padding mask hides it like every padded key"),
    ("half_square",
     {"pairs_right": lambda n, L: L * L // 2 + (n - L) * L, "pairs_left": lambda n, L: L * L // 2},
     "you counted the real block's triangle as half of L squared; with its diagonal "
     "it holds 1 + 2 + ... + L pairs, which is more than L squared over 2"),
    ("left_padded_keys_seen",
     {"pairs_left": lambda n, L: L * (L + 1) // 2 + (n - L) * (n - L + 1) // 2},
     "with left padding you let each padded query see the padding before it: the "
     "padding mask hides every padded key, so those rows allow no key at all"),
    ("empty_counts_real", {"empty_rows_left": lambda n, L: L},
     "you counted the real queries: an empty row is a query that may attend to no "
     "key, and with left padding those are the padded queries at the start"),
])


# --------------------------------------------------------------------------- exercise
SECTION_SOFTMAX = "3.2 The masked softmax"
SECTION_MASKS = "3.3 Padding masks and look-ahead masks"
SECTION_EMPTY = '3.4 $-\\infty$, "a large negative number", and fully masked rows'
SECTION_ATTENTION = "3.5 Scaled dot-product attention with masks"

EXERCISE = Exercise(
    id="03_masks",
    title="Masks",
    forbidden_imports=("attention_course.masking",),
    questions=(
        Question(
            id="q1_masked_softmax",
            symbol="masked_softmax",
            title="The masked softmax with valid lengths",
            kind="implement",
            points=2,
            reference=masking.masked_softmax,
            cases=masked_softmax_cases,
            grad=True,
            mistakes=MASKED_SOFTMAX_MISTAKES,
            diagnose=explain_weights(MASKED_SOFTMAX_MISTAKES,
                                     large=lambda case: bool(case.args[0].abs().max() > 50)),
            hint=("Only the keys before the valid length take part in the normalisation; "
                  "the others get exactly 0, and a row with nothing left must stay finite, "
                  "forward and backward."),
            section=SECTION_SOFTMAX,
        ),
        Question(
            id="q2_padding_mask",
            symbol="padding_mask",
            title="The padding mask, on the right or on the left",
            kind="implement",
            points=2,
            reference=padding_mask,
            cases=padding_cases,
            mistakes=PADDING_MISTAKES,
            diagnose=explain_mask(PADDING_MISTAKES, _describe_padding),
            hint=("True marks a real token. With right padding the L real tokens come "
                  "first; with left padding the padding comes first and they come last."),
            section=SECTION_MASKS,
        ),
        Question(
            id="q3_fix_attention",
            symbol="masked_attention",
            title="Debug: masked attention that gives NaN",
            kind="debug",
            points=3,
            reference=fixed_attention,
            cases=attention_cases,
            grad=True,
            mistakes=ATTENTION_MISTAKES,
            diagnose=explain_weights(ATTENTION_MISTAKES,
                                     pick=lambda out: out[1] if isinstance(out, (tuple, list))
                                     and len(out) == 2 else None,
                                     what=N_("row of the weights")),
            hint=("Two bugs: one shows on a query that may attend to no key; the other "
                  "gives no error and no NaN, only wrong weights on some inputs. Compare "
                  "every line with the formula of section 3.5."),
            section=SECTION_EMPTY,
        ),
        prediction(
            id="q4_predict_inverted",
            symbol="predict_inverted_mask",
            title="Predict: a padding mask with the opposite convention",
            points=3,
            answer=PREDICTION,
            choices=CHOICES,
            wrong=PREDICT_WRONG,
            hint=("Work out, for each sentence, which keys the inverted mask allows; then "
                  "what each implementation does with a row that allows nothing."),
            section=SECTION_EMPTY,
        ),
        Question(
            id="q5_cached_causal_mask",
            symbol="cached_causal_mask",
            title="Extend: the causal mask of new tokens attending to a cache",
            kind="implement",
            points=2,
            reference=cached_causal_mask,
            cases=cached_causal_cases,
            mistakes=CACHED_MISTAKES,
            diagnose=explain_mask(CACHED_MISTAKES, _describe_cached),
            hint=("Give each new token its position among all the keys: the n queries are "
                  "the last n of the positions. A token sees itself and everything before "
                  "it."),
            section=SECTION_MASKS,
        ),
        Question(
            id="q6_count_allowed",
            symbol="count_allowed",
            title="Derive: how many (query, key) pairs do the masks allow?",
            kind="derive",
            points=3,
            reference=count_allowed,
            cases=count_cases,
            parts={"pairs_right": 1, "pairs_left": 1, "empty_rows_left": 1},
            mistakes=COUNT_MISTAKES,
            hint=("Count row by row: how many keys may query i see under each mask, and "
                  "under both? A padding mask hides keys, not queries."),
            section=SECTION_MASKS,
        ),
    ),
)
