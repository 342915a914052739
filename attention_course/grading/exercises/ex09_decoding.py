"""Exercise 9: generating with a KV cache, the cache's size, and beam search (chapter 9).

Six questions, four kinds: one attention step against a KV cache (implement); repair a
chunked decoder whose cache has a top-left mask and a second bug (debug); count the work
of decoding with and without a cache (derive); predict what multi-query attention changes
and what it does not (predict); choose the number of key/value heads under a memory
budget (derive); beam search over a two-step table of next-token probabilities
(implement).

The references use the package's chapter-3 attention (bottom-right causal mask) or short
formulas here. Every known mistake is a function called like the reference; the grader
names it when the learner's output matches what it outputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from attention_course import masking
from attention_course.grading.spec import Case, Exercise, Mistake, Question
from attention_course.grading.tables import drawn_cases, mistake_table, prediction
from attention_course.i18n import _

# The chapter's headings, exactly as written in book/09_decoding.ipynb.
CACHE = "9.2 The KV cache, step by step"
TOP_LEFT = "A top-left mask breaks the cache without an error"
MEASURED = "9.3 Measured: cached against uncached decoding"
SIZE = "9.4 The cache's size: multi-query and grouped-query attention"
BEAM = "9.5 Beam search"

Tensor = torch.Tensor
Step = tuple[Tensor, Tensor, Tensor]


# --------------------------------------------------------------------------- helpers
def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
            scale: float | None = None, dim: int = -1, hide: str = "inf") -> Tensor:
    """softmax(q k^T * scale + mask) v, over ``dim`` (-1: the keys), with a bool mask
    (True = allowed); a query with no key gets zeros. ``hide``: how the hidden keys are
    hidden, ``"inf"`` (minus infinity before the softmax), ``"zero"`` (their scores set to
    0) or ``"after"`` (their weights set to 0 after the softmax, not renormalised)."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-1, -2) * scale
    if mask is not None and hide == "after":
        if scores.shape[-1] == 0:
            return scores @ v
        return (torch.softmax(scores, dim=dim) * mask) @ v
    if mask is not None:
        scores = scores.masked_fill(~mask, 0.0 if hide == "zero" else float("-inf"))
    if scores.shape[-1] == 0:
        return scores @ v
    weights = torch.softmax(scores, dim=dim).nan_to_num(0.0)
    return weights @ v


def _bottom_right(n: int, num_keys: int, offset: int = 0) -> Tensor:
    """Query i of the n newest positions sees keys j <= i + num_keys - n (+ offset)."""
    return torch.ones(n, num_keys, dtype=torch.bool).tril(num_keys - n + offset)


def _top_left(n: int, num_keys: int) -> Tensor:
    return torch.ones(n, num_keys, dtype=torch.bool).tril(0)


def _weights(g: torch.Generator, d_model: int, d_head: int) -> tuple[Tensor, Tensor, Tensor]:
    return tuple(torch.randn(d_model, d_head, generator=g) / math.sqrt(d_model)
                 for _copy in range(3))


def _sequence_parts(value: Any) -> tuple[Tensor, ...] | None:
    if type(value) not in (tuple, list) or len(value) != 3:
        return None
    if not all(isinstance(v, torch.Tensor) for v in value):
        return None
    return tuple(value)


# --------------------------------------------------------------------------- question 1
D_MODEL, D_HEAD = 9, 4  # sqrt(9) = 3 and sqrt(4) = 2 tell the two scales apart


def cached_attention_step(x_new: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor,
                          cache_k: Tensor, cache_v: Tensor) -> Step:
    """The reference of question 1: project the n new tokens, append their keys and values
    to the cache, attend bottom-right. -> out (B, n, d_head), keys and values
    (B, T + n, d_head)."""
    q = x_new @ w_q
    keys = torch.cat([cache_k, x_new @ w_k], dim=1)
    values = torch.cat([cache_v, x_new @ w_v], dim=1)
    mask = masking.causal_mask(q.shape[1], keys.shape[1], align="bottom_right")
    out, _weights = masking.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
    return out, keys, values


def _step_variant(order: str = "cache_first", mask: str = "bottom_right",
                  scale: str = "head", attend: str = "all",
                  softmax_dim: int = -1, hide: str = "inf") -> Callable[..., Step]:
    """A cached step with one thing changed: where the new entries go, which mask, which
    scale, what the queries attend to, and over which axis the softmax runs."""

    def step(x_new, w_q, w_k, w_v, cache_k, cache_v):
        q, k_new, v_new = x_new @ w_q, x_new @ w_k, x_new @ w_v
        if order == "cache_first":
            keys, values = torch.cat([cache_k, k_new], 1), torch.cat([cache_v, v_new], 1)
        else:
            keys, values = torch.cat([k_new, cache_k], 1), torch.cat([v_new, cache_v], 1)
        n, num_keys = q.shape[1], keys.shape[1]
        if attend == "cache_only":  # the new tokens' entries are not attended to
            att_k, att_v, num_att = cache_k, cache_v, cache_k.shape[1]
        else:
            att_k, att_v, num_att = keys, values, num_keys
        masks = {"bottom_right": _bottom_right(n, num_att), "top_left": _top_left(n, num_att),
                 "none": None, "no_diagonal": _bottom_right(n, num_att, -1),
                 "one_future": _bottom_right(n, num_att, 1)}
        factor = {"head": 1 / math.sqrt(q.shape[-1]), "none": 1.0,
                  "model": 1 / math.sqrt(x_new.shape[-1])}[scale]
        if attend == "cache_only":
            masks["bottom_right"] = None
        out = _attend(q, att_k, att_v, masks[mask], factor, softmax_dim, hide)
        return out, keys, values

    return step


def _step_case(g: torch.Generator, b: int, cached: int, n: int, label: str = "") -> Case:
    w_q, w_k, w_v = _weights(g, D_MODEL, D_HEAD)
    x_new = torch.randn(b, n, D_MODEL, generator=g)
    cache_k = torch.randn(b, cached, D_HEAD, generator=g)
    cache_v = torch.randn(b, cached, D_HEAD, generator=g)
    return Case(args=(x_new, w_q, w_k, w_v, cache_k, cache_v), label=label)


step_cases = drawn_cases(901, _step_case, visible=[
    (2, 5, 1, "one new token after 5 cached ones (B=2, n=1, T=5)"),
    (1, 3, 3, "three new tokens after 3 cached ones (B=1, n=3, T=3)"),
    (2, 0, 4, "an empty cache: four tokens at once (B=2, n=4, T=0)"),
], hidden=[(3, 6, 2), (1, 1, 1), (2, 2, 5)])


def _not_appended(x_new, w_q, w_k, w_v, cache_k, cache_v) -> Step:
    out = _attend(x_new @ w_q, cache_k, cache_v, None)
    return out, cache_k, cache_v


STEP_MISTAKES = (
    *mistake_table(_step_variant, [
        ("top_left", {"mask": "top_left"},
         "your new tokens see the keys as if they were the first positions (a top-left "
         "causal mask, what PyTorch's is_causal does when there are more keys than "
         "queries): they are the last n positions, so each one sees every cached key "
         "and the new keys up to its own"),
        ("no_mask", {"mask": "none"},
         "with several new tokens at once, each one also sees the new tokens after it: "
         "the causal mask is still needed among them, aligned bottom-right"),
        ("no_diagonal", {"mask": "no_diagonal"},
         "each new token is denied its own key: a token attends to itself as well as to "
         "everything before it"),
        ("one_future", {"mask": "one_future"},
         "your mask is shifted by one: each new token also sees the new token right "
         "after it; the last new token is the last position, and new token i sees "
         "exactly the keys up to its own position"),
        ("masked_to_zero", {"hide": "zero"},
         "the keys a new token may not see get a score of 0, and a score of 0 still "
         "gets weight after the softmax; hidden keys need a score of minus infinity"),
        ("masked_after_softmax", {"hide": "after"},
         "you removed the hidden keys' weights after the softmax, so the remaining "
         "weights no longer sum to 1; hide those keys before the softmax (a score of "
         "minus infinity), so that it normalises over the visible keys only"),
        ("new_first", {"order": "new_first"},
         "your new keys and values come before the cached ones: the cache holds the "
         "earlier positions, so new entries go at the end, in order (the keys and values "
         "given back are in the wrong order too)"),
    ]),
    Mistake("not_appended", _not_appended,
            "your keys and values hold only the old cache: the new tokens' keys and values "
            "must be appended, returned, and attended to (a token sees itself)"),
    *mistake_table(_step_variant, [
        ("attend_before_append", {"attend": "cache_only"},
         "your keys and values are right, but the new tokens attend only to the "
         "old cache: append first, then attend, so that a new token also sees itself "
         "(and the new tokens before it)"),
        ("unscaled", {"scale": "none"},
         "your scores are not divided by the square root of the head size: the output "
         "is too sharp"),
        ("model_scale", {"scale": "model"},
         "your scores are divided by the square root of the input width (the rows of "
         "the projection matrices); the scale is the size of a query and a key, the "
         "head size (their columns)"),
        ("softmax_over_queries", {"softmax_dim": -2},
         "your softmax normalises over the queries (down each column); each query's "
         "weights over the keys must sum to 1"),
    ]),
)


def _step_diagnose(case: Case, expected: Any, got: Any) -> str | None:
    want, mine = _sequence_parts(expected), _sequence_parts(got)
    if want is None or mine is None or any(
            w.shape != m.shape for w, m in zip(want, mine, strict=True)):
        return None
    close = [bool(torch.allclose(w.double(), m.double(), rtol=1e-4, atol=1e-5))
             for w, m in zip(want, mine, strict=True)]
    if not close[0] and all(close[1:]):
        return _("your keys and values are right, the output is not: look at the mask, the "
                 "scale and the softmax")
    if close[0] and not all(close[1:]):
        return _("your output is right, but the keys and values you return are not the "
                 "cache after this step: the old entries, then the new tokens' own")
    return None


# --------------------------------------------------------------------------- question 2
def chunked_attention(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor,
                      chunk: int) -> Tensor:
    """The reference of question 2: causal self-attention of x (B, N, d_model), computed
    ``chunk`` tokens at a time through a cache. -> (B, N, d_head), equal to full causal
    attention."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    out, _weights = masking.scaled_dot_product_attention(q, k, v, is_causal=True)
    return out


def _chunked(order: str, mask: str) -> Callable[..., Tensor]:
    """The chunked loop with the new entries put first or last and a given mask."""

    def run(x, w_q, w_k, w_v, chunk):
        b, n, _width = x.shape
        cache_k = x.new_zeros(b, 0, w_k.shape[1])
        cache_v = x.new_zeros(b, 0, w_v.shape[1])
        outputs = []
        for start in range(0, n, chunk):
            x_new = x[:, start:start + chunk]
            k_new, v_new = x_new @ w_k, x_new @ w_v
            if order == "last":
                cache_k, cache_v = torch.cat([cache_k, k_new], 1), torch.cat([cache_v, v_new], 1)
            else:
                cache_k, cache_v = torch.cat([k_new, cache_k], 1), torch.cat([v_new, cache_v], 1)
            m, t = x_new.shape[1], cache_k.shape[1]
            masks = {"top_left": _top_left(m, t), "bottom_right": _bottom_right(m, t),
                     "none": None, "no_diagonal": _bottom_right(m, t, -1)}
            outputs.append(_attend(x_new @ w_q, cache_k, cache_v, masks[mask]))
        return torch.cat(outputs, dim=1)

    return run


def _chunk_case(g: torch.Generator, b: int, n: int, chunk: int) -> Case:
    w_q, w_k, w_v = _weights(g, D_MODEL, D_HEAD)
    x = torch.randn(b, n, D_MODEL, generator=g)
    return Case(args=(x, w_q, w_k, w_v, chunk), label=f"B={b}, N={n}, chunk={chunk}")


chunk_cases = drawn_cases(902, _chunk_case, visible=[(2, 5, 1), (1, 6, 2), (2, 7, 3)],
                          hidden=[(3, 8, 3), (1, 9, 2), (2, 4, 4)])


CHUNK_MISTAKES = mistake_table(_chunked, [
    ("starter", {"order": "first", "mask": "top_left"},
     "this is what the given code computes: two things are still wrong, the "
     "alignment of the causal mask (each chunk holds the newest positions, not the "
     "first ones) and where the new keys and values go in the cache; as it stands, "
     "each token sees only the tokens of its own chunk, never the earlier chunks"),
    ("order_still_wrong", {"order": "first", "mask": "bottom_right"},
     "the mask is aligned right now, but the new keys and values still go in front "
     "of the cache: the cache must keep the positions in order, oldest first, or "
     "the mask hides the wrong keys"),
    ("mask_still_top_left", {"order": "last", "mask": "top_left"},
     "the cache is in order now, but the mask is still aligned top-left: a chunk of "
     "new tokens must see every cached key, and the new keys up to its own position "
     "(bottom-right alignment)"),
    ("mask_removed", {"order": "last", "mask": "none"},
     "without a mask, a token of a chunk sees the tokens after it in the same chunk: "
     "keep a causal mask, aligned bottom-right (without a mask the order of the "
     "cache makes no difference; with one it does)"),
    ("no_diagonal", {"order": "last", "mask": "no_diagonal"},
     "each token is denied its own key: the causal mask allows a position to attend "
     "to itself"),
])


def _chunk_diagnose(case: Case, expected: Any, got: Any) -> str | None:
    """Where the output first goes wrong, in chunks: which chunk, and which of its tokens."""
    if not (isinstance(expected, torch.Tensor) and isinstance(got, torch.Tensor)):
        return None
    if got.shape != expected.shape or not got.is_floating_point():
        return None
    chunk = case.args[4]
    wrong = ~torch.isclose(got.double(), expected.double(), rtol=1e-4, atol=1e-5)
    positions = wrong.any(dim=-1).any(dim=0).nonzero().flatten().tolist()
    if not positions:
        return None
    first = positions[0]
    number, offset = first // chunk + 1, first % chunk + 1
    if first:
        return _("the outputs are right up to position {last_right} and wrong from position "
                 "{first} on (token {offset} of chunk {number}, with a chunk size of "
                 "{chunk}): ask which keys that token may see, and where they sit in the "
                 "cache").format(last_right=first - 1, first=first, offset=offset,
                                 number=number, chunk=chunk)
    return _("the output is wrong from the first position on (token {offset} of chunk "
             "{number}, with a chunk size of {chunk}): ask which keys that token may see, and "
             "where they sit in the cache").format(offset=offset, number=number, chunk=chunk)


# --------------------------------------------------------------------------- question 3
def decoding_work(num_tokens: int) -> dict[str, int]:
    """The reference of question 3, for T generated tokens (step t reads t tokens without a
    cache: <bos> and the t - 1 generated so far)."""
    t = num_tokens
    return {"uncached_rows": t * (t + 1) // 2,
            "uncached_pairs": t * (t + 1) * (t + 2) // 6,
            "cached_pairs": t * (t + 1) // 2}


def _work(**formulas: Callable[[int], int]) -> Callable[[int], dict[str, int]]:
    def wrong(num_tokens: int) -> dict[str, int]:
        counts = decoding_work(num_tokens)
        for key, formula in formulas.items():
            counts[key] = formula(num_tokens)
        return counts

    return wrong


def work_cases() -> list[Case]:
    return [Case(args=(4,), label="T = 4"), Case(args=(10,), label="T = 10"),
            Case(args=(1,), hidden=True), Case(args=(7,), hidden=True),
            Case(args=(128,), hidden=True), Case(args=(513,), hidden=True)]


WORK_MISTAKES = mistake_table(_work, [
    ("rows_square", {"uncached_rows": lambda t: t * t},
     "you counted T tokens at every step; without a cache, step t reads only the t "
     "tokens there are so far"),
    ("rows_off_by_one", {"uncached_rows": lambda t: t * (t - 1) // 2},
     "step t reads t tokens, <bos> and the t - 1 generated before it: the first step "
     "already reads one token"),
    ("rows_bos_extra", {"uncached_rows": lambda t: t * (t + 3) // 2},
     "you counted one token too many at every step: step t reads t tokens, <bos> "
     "included (<bos> and the t - 1 generated before it), not t + 1"),
    ("rows_cached", {"uncached_rows": lambda t: t},
     "that is the count with the cache, one new token a step; without it every step "
     "feeds the whole prefix again"),
    ("pairs_square", {"uncached_pairs": lambda t: t * (t + 1) * (2 * t + 1) // 6},
     "you counted every query-key pair of a step, t times t; the causal mask lets a "
     "query see only the keys up to its own position"),
    ("pairs_bos_extra", {"uncached_pairs": lambda t: (t + 1) * (t + 2) * (t + 3) // 6 - 1},
     "you counted one token too many at every step: step t attends among t "
     "tokens, <bos> included, not t + 1"),
    ("pairs_no_diagonal", {"uncached_pairs": lambda t: (t - 1) * t * (t + 1) // 6},
     "you left out the diagonal: a position attends to itself as well"),
    ("pairs_last_step_only", {"uncached_pairs": lambda t: t * (t + 1) // 2},
     "you counted the pairs of one step; the question asks for all T steps together"),
    ("cached_one_per_step", {"cached_pairs": lambda t: t},
     "with the cache a step still attends to every cached key: its one query meets t "
     "keys at step t"),
    ("cached_bos_extra", {"cached_pairs": lambda t: t * (t + 3) // 2},
     "with the cache, the query of step t meets t keys, <bos> and its own included, "
     "not t + 1"),
    ("cached_no_self", {"cached_pairs": lambda t: t * (t - 1) // 2},
     "the new token's own key is in the cache by the time it attends, and it attends "
     "to itself too"),
])


# --------------------------------------------------------------------------- question 4
# the answer of question 4: multi-query against multi-head attention, with the same number
# of query heads and head size
MQA = {"cache_bytes": "smaller", "query_key_scores": "the same",
       "projection_parameters": "smaller"}

MQA_WRONG = [
    ("cache_same", "cache_bytes", "the same",
     "the cache holds one key and one value per key/value head; with one such head "
     "instead of eight it is eight times smaller"),
    ("cache_larger", "cache_bytes", "larger",
     "sharing one key/value head among the query heads stores fewer keys and values, "
     "not more"),
    ("scores_smaller", "query_key_scores", "smaller",
     "every query head still compares its query with every key; the heads share the "
     "keys, they do not skip them, so the attention computes as many scores as before"),
    ("scores_larger", "query_key_scores", "larger",
     "each query head scores each key once, as in multi-head attention: sharing the "
     "keys adds no scores"),
    ("parameters_same", "projection_parameters", "the same",
     "the key and value projections now produce one head's worth of features "
     "instead of eight, so they hold fewer weights (the query and output projections "
     "keep theirs)"),
    ("parameters_larger", "projection_parameters", "larger",
     "the key and value projections shrink to one head's width: fewer weights, not "
     "more"),
]


# --------------------------------------------------------------------------- question 5
def largest_num_kv_heads(num_layers: int, num_heads: int, head_dim: int,
                         bytes_per_number: int, num_tokens: int, budget_bytes: int) -> int:
    """The reference of question 5: the largest divisor of num_heads whose cache for
    num_tokens tokens fits in budget_bytes, else 0."""
    per_head = 2 * num_layers * head_dim * bytes_per_number * num_tokens
    fitting = [h for h in range(1, num_heads + 1) if num_heads % h == 0
               and h * per_head <= budget_bytes]
    return max(fitting, default=0)


def _heads(per_head: Callable[[int, int, int, int], int], divisor: bool = True,
           strict: bool = False, pick: Callable[[list[int]], int] = max,
           none_fits: int = 0) -> Callable[..., int]:
    def wrong(num_layers, num_heads, head_dim, bytes_per_number, num_tokens, budget_bytes):
        size = per_head(num_layers, head_dim, bytes_per_number, num_tokens)
        fits = [h for h in range(1, num_heads + 1)
                if (num_heads % h == 0 or not divisor)
                and (h * size < budget_bytes if strict else h * size <= budget_bytes)]
        return pick(fits) if fits else none_fits

    return wrong


def _per_head(layers, head_dim, number, tokens):
    return 2 * layers * head_dim * number * tokens


HEAD_MISTAKES = (
    *mistake_table(_heads, [
        ("no_two", {"per_head": lambda L, d, b, t: L * d * b * t},
         "you counted one tensor per layer and head; the cache keeps a key and a value "
         "for every token, two numbers per dimension of a head"),
        ("no_layers", {"per_head": lambda L, d, b, t: 2 * d * b * t},
         "you counted one layer; every layer of the decoder keeps its own keys and "
         "values"),
        ("no_head_dim", {"per_head": lambda L, d, b, t: 2 * L * b * t},
         "you counted one number per key and per value; a key and a value each have "
         "one number per dimension of a head"),
        ("no_bytes_per_number", {"per_head": lambda L, d, b, t: 2 * L * d * t},
         "you counted numbers, not bytes: every number of the cache takes the given "
         "bytes per number"),
    ]),
    Mistake("per_query_head",
            lambda L, H, d, b, t, budget: _heads(
                lambda L_, d_, b_, t_: H * _per_head(L_, d_, b_, t_))(L, H, d, b, t, budget),
            "you counted the cache once per query head as well; the keys and values are "
            "stored per key/value head only, the number you are choosing, whatever the "
            "number of query heads sharing them"),
    *mistake_table(_heads, [
        ("not_a_divisor", {"per_head": _per_head, "divisor": False},
         "your number of key/value heads does not divide the number of query heads: "
         "each key/value head serves a group of the same size, so only divisors work"),
        ("bits", {"per_head": lambda L, d, b, t: 8 * _per_head(L, d, b, t)},
         "you counted bits; the budget and the size of a number are in bytes"),
        ("strict", {"per_head": _per_head, "strict": True},
         "a cache that fills the budget exactly still fits: at most the budget, not "
         "strictly below it"),
        ("smallest", {"per_head": _per_head, "pick": min},
         "you returned the smallest number that fits; the question asks for the largest, "
         "which loses the least accuracy"),
        ("one_when_nothing_fits", {"per_head": _per_head, "none_fits": 1},
         "when even one key/value head does not fit, no number of heads works: the answer "
         "is 0"),
    ]),
)


def head_cases() -> list[Case]:
    gib = 2**30
    return [
        Case(args=(32, 32, 128, 2, 16384, 3 * gib),
             label="32 layers, 32 heads of 128, 2-byte numbers, 16384 tokens, 3 GiB"),
        Case(args=(80, 64, 128, 2, 65536, 60 * 10**9),
             label="80 layers, 64 heads of 128, 2-byte numbers, 65536 tokens, 60 GB"),
        Case(args=(2, 8, 16, 4, 100, 102400),
             label="2 layers, 8 heads of 16, 4-byte numbers, 100 tokens, 102400 bytes"),
        Case(args=(24, 16, 64, 2, 8192, 400 * 2**20), hidden=True),
        Case(args=(12, 12, 64, 4, 2048, 100 * 2**20), hidden=True),
        Case(args=(6, 8, 64, 4, 512, 6 * 2 * 64 * 4 * 512), hidden=True),
        Case(args=(40, 40, 128, 2, 32768, 9 * gib), hidden=True),
        Case(args=(32, 32, 128, 2, 100_000, gib // 2), hidden=True),
    ]


# --------------------------------------------------------------------------- question 6
def two_step_beam(log_p1: Tensor, log_p2: Tensor, beam_size: int) -> tuple[int, int, float]:
    """The reference of question 6: two-token outputs; keep the ``beam_size`` best first
    tokens, extend each by every second token, return the best ``(first, second,
    log_prob)``."""
    vocab = log_p1.shape[0]
    kept = log_p1.topk(min(beam_size, vocab)).indices
    totals = log_p1[kept, None] + log_p2[kept]
    best = int(totals.argmax())
    return int(kept[best // vocab]), best % vocab, float(totals.flatten()[best])


def _beam_variant(keep: Callable[[Tensor, int], Tensor],
                  combine: Callable[[Tensor, Tensor], Tensor] = torch.add,
                  report: Callable[[Tensor, Tensor], Tensor] = torch.add
                  ) -> Callable[..., tuple[int, int, float]]:
    def wrong(log_p1, log_p2, beam_size):
        vocab = log_p1.shape[0]
        kept = keep(log_p1, beam_size)
        ranking = combine(log_p1[kept, None], log_p2[kept])
        best = int(ranking.argmax())
        first, second = int(kept[best // vocab]), best % vocab
        return first, second, float(report(log_p1[first], log_p2[first, second]))

    return wrong


def _beam_diagnose(case: Case, expected: Any, got: Any) -> str | None:
    """A probability for a log-probability, the two tokens swapped, or a first token given
    as its rank among the kept ones instead of its id."""
    if type(got) not in (tuple, list) or len(got) != 3 or type(expected) is not tuple:
        return None
    try:
        first, second, log_prob = (float(v) for v in got)
    except (TypeError, ValueError, RuntimeError):
        return None
    want_first, want_second, want_log = expected
    if (first, second) == (want_first, want_second):
        if math.isclose(log_prob, math.exp(want_log), rel_tol=1e-4):
            return _("your tokens are right, but you returned the output's probability; "
                     "the question asks for its log-probability")
        return None
    if (first, second) == (want_second, want_first):
        return _("your two tokens are swapped: the first token comes first")
    log_p1 = case.args[0]
    rank = int((log_p1 > log_p1[int(want_first)]).sum())
    if first == rank and second == want_second and rank != want_first:
        return _("your first token is its rank among the most likely first tokens, not "
                 "its id in the vocabulary: map the position in the beam back to the token")
    return None


def _top(log_p1: Tensor, k: int) -> Tensor:
    return log_p1.topk(max(1, min(k, log_p1.shape[0]))).indices


def _table(g: torch.Generator, first: list[float], peaks: list[float]
           ) -> tuple[Tensor, Tensor]:
    """Log-probability tables with first-token probabilities ``first`` (by rank, shuffled
    over the tokens) and, after the first token of rank r, one second token of
    probability ``peaks[r]`` (the rest shared at random, each share below it)."""
    vocab = len(first)
    p1 = torch.tensor(first, dtype=torch.float64)
    p1 = p1 * torch.empty(vocab, dtype=torch.float64).uniform_(0.995, 1.005, generator=g)
    p1 = p1 / p1.sum()
    tokens = torch.randperm(vocab, generator=g)
    p2 = torch.empty(vocab, vocab, dtype=torch.float64)
    for rank, token in enumerate(tokens.tolist()):
        rest = torch.softmax(torch.randn(vocab - 1, generator=g, dtype=torch.float64) * 0.3, 0)
        row = torch.cat([torch.tensor([peaks[rank]], dtype=torch.float64),
                         rest * (1 - peaks[rank])])
        p2[token] = row[torch.randperm(vocab, generator=g).argsort()]
    log_p1 = torch.empty(vocab, dtype=torch.float64)
    log_p1[tokens] = p1.log()
    return log_p1.float(), p2.log().float()


def trap_table(g: torch.Generator, vocab: int, beam: int) -> tuple[Tensor, Tensor]:
    """The beam's best output starts with its last kept first token (greedy decoding and a
    narrower beam miss it) and, when the beam is narrower than the vocabulary, the best
    output of all starts with the first token just outside the beam (a wider beam finds
    it). First-token probabilities fall by 7% a rank among the top ones."""
    first = [0.93**r if r <= beam else 0.93**beam * 0.6 * 0.8 ** (r - beam)
             for r in range(vocab)]
    peaks = [0.45 + 0.05 * (r % 2) for r in range(vocab)]
    peaks[beam - 1] = 0.72
    if beam < vocab:
        peaks[beam] = 0.95
    return _table(g, first, peaks)


def far_trap_table(g: torch.Generator, vocab: int, beam: int) -> tuple[Tensor, Tensor]:
    """Like :func:`trap_table`, but a beam one wider still misses the best output: it
    starts with the second first token outside the beam."""
    first = [0.93**r if r <= beam + 1 else 0.93 ** (beam + 1) * 0.6 * 0.8 ** (r - beam - 2)
             for r in range(vocab)]
    peaks = [0.45 + 0.05 * (r % 2) for r in range(vocab)]
    peaks[beam - 1], peaks[beam], peaks[beam + 1] = 0.62, 0.78, 0.95
    return _table(g, first, peaks)


def steep_table(g: torch.Generator, vocab: int, beam: int) -> tuple[Tensor, Tensor]:
    """The most likely first token leads to the best output, although another kept one
    has the more likely second token: the beam's choice is greedy decoding's."""
    first = [0.5**r for r in range(vocab)]
    peaks = [0.45] * vocab
    peaks[0], peaks[beam - 1] = 0.7, 0.95
    return _table(g, first, peaks)


def _beam_case(g: torch.Generator, vocab: int, beam: int, make: Callable[..., tuple]) -> Case:
    return Case(args=(*make(g, vocab, beam), beam), label=f"{vocab} tokens, beam {beam}")


beam_cases = drawn_cases(906, _beam_case, visible=[
    (4, 2, trap_table), (5, 1, trap_table), (6, 3, far_trap_table),
], hidden=[
    (5, 5, trap_table), (7, 2, steep_table), (6, 4, trap_table), (8, 3, steep_table),
    (7, 2, far_trap_table),
])


BEAM_MISTAKES = mistake_table(_beam_variant, [
    ("greedy", {"keep": lambda p, k: _top(p, 1)},
     "that is greedy decoding, one hypothesis whatever the beam size: keep the "
     "beam_size most likely first tokens and extend each of them"),
    ("exhaustive", {"keep": lambda p, k: _top(p, p.shape[0])},
     "you searched every first token, as if the beam were as wide as the "
     "vocabulary; a beam keeps only the beam_size most likely first tokens, so it can "
     "miss the best output"),
    ("one_too_many", {"keep": lambda p, k: _top(p, k + 1)},
     "you kept one first token more than the beam size"),
    ("one_too_few", {"keep": lambda p, k: _top(p, k - 1)},
     "you kept one first token fewer than the beam size"),
    ("second_step_alone", {"keep": _top, "combine": lambda a, b: b + 0 * a},
     "you ranked the extensions by the second token's log-probability alone; a "
     "hypothesis is scored by the sum of the log-probabilities of all its tokens"),
    ("multiplied_logs", {"keep": _top, "combine": torch.mul, "report": torch.mul},
     "you multiplied log-probabilities; the log of a product of probabilities is the "
     "sum of their logs"),
    ("averaged", {"keep": _top, "report": lambda a, b: (a + b) / 2},
     "your tokens are right, but you gave back the mean of the two tokens' "
     "log-probabilities; the output's log-probability is their sum"),
    ("reported_second_only", {"keep": _top, "report": lambda a, b: b},
     "your tokens are right, but the log-probability you give back is the second "
     "token's alone: the output's log-probability adds both tokens'"),
])


# --------------------------------------------------------------------------- the exercise
EXERCISE = Exercise(
    id="09_decoding",
    title="Generating: caches and search",
    forbidden_imports=("attention_course.decoding", "attention_course.masking",
                       "attention_course.multihead", "attention_course.transformer"),
    questions=(
        Question(
            id="q1_cached_step",
            symbol="cached_attention_step",
            title="One attention step against a KV cache",
            kind="implement",
            points=3,
            reference=cached_attention_step,
            cases=step_cases,
            rtol=1e-4,
            atol=1e-5,
            mistakes=STEP_MISTAKES,
            diagnose=_step_diagnose,
            hint=("The new tokens are the last positions of the sequence: their keys and "
                  "values join the end of the cache, and each new token attends to every "
                  "cached key and to the new keys up to its own, with scores scaled by the "
                  "square root of the head size."),
            section=CACHE,
        ),
        Question(
            id="q2_chunked_debug",
            symbol="chunked_attention",
            title="Repair a chunked decoder",
            kind="debug",
            points=3,
            reference=chunked_attention,
            cases=chunk_cases,
            rtol=1e-4,
            atol=1e-5,
            mistakes=CHUNK_MISTAKES,
            diagnose=_chunk_diagnose,
            hint=("Each chunk holds the newest positions of the sequence so far. Ask which "
                  "keys its first and its last token may see, and where in the cache those "
                  "keys sit."),
            section=TOP_LEFT,
        ),
        Question(
            id="q3_work",
            symbol="decoding_work",
            title="The work of decoding, with and without a cache",
            kind="derive",
            points=3,
            reference=decoding_work,
            cases=work_cases,
            parts={"uncached_rows": 1, "uncached_pairs": 1, "cached_pairs": 1},
            rtol=0.0,
            atol=0.0,
            mistakes=WORK_MISTAKES,
            hint=("Write down what step t feeds the decoder with and without the cache, "
                  "count for one step, then add the steps from 1 to T."),
            section=MEASURED,
        ),
        prediction(
            id="q4_predict_mqa",
            symbol="predict_mqa",
            title="What does multi-query attention change?",
            points=3,
            answer=MQA,
            choices=("smaller", "the same", "larger"),
            wrong=MQA_WRONG,
            hint=("Multi-query attention keeps every query head and shares one key head and "
                  "one value head among them. Ask of each quantity whether it counts query "
                  "heads or key/value heads."),
            section=SIZE,
        ),
        Question(
            id="q5_kv_heads",
            symbol="largest_num_kv_heads",
            title="Choose the number of key/value heads under a memory budget",
            kind="derive",
            points=3,
            reference=largest_num_kv_heads,
            cases=head_cases,
            rtol=0.0,
            atol=0.0,
            mistakes=HEAD_MISTAKES,
            hint=("Every token adds a key and a value per layer and key/value head; the "
                  "number of key/value heads must divide the number of query heads."),
            section=SIZE,
        ),
        Question(
            id="q6_beam",
            symbol="two_step_beam",
            title="Beam search over two steps",
            kind="implement",
            points=3,
            reference=two_step_beam,
            cases=beam_cases,
            rtol=1e-5,
            atol=1e-5,
            mistakes=BEAM_MISTAKES,
            diagnose=_beam_diagnose,
            hint=("A hypothesis is scored by the sum of its tokens' log-probabilities. After "
                  "the first step the beam keeps the beam-size best first tokens; the second "
                  "step extends only those."),
            section=BEAM,
        ),
    ),
)
