"""Exercise 11: the parts of a small GPT (chapter 11).

Seven questions, five kinds: RMSNorm (implement); grouped-query causal attention
(implement); predict what a RoPE cache and a pre-norm block notice (predict); repair
a RoPE attention step against a KV cache whose positions are off by one and whose values
are rotated (debug); count a GPT's weights (derive); top-p's set of tokens (implement); and
the smoothing of a bigram baseline, measured (experiment).

The references are short formulas here or the package's chapter-11 code
(``attention_course.gpt``). Every known mistake is a function called like the reference;
the grader names it when the learner's output matches what it outputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from attention_course.grading.spec import Case, Exercise, Question
from attention_course.grading.tables import changed, drawn_cases, mistake_table, prediction
from attention_course.i18n import _

# The chapter's headings, exactly as written in book/11_small_gpt.ipynb.
BLOCK = "11.3 A decoder block as LLaMA builds it"
SAMPLES = "11.6 Samples"
BASELINES = "11.5 How good is it? Perplexity against n-gram baselines"

Tensor = torch.Tensor


# --------------------------------------------------------------------------- question 1
def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-5) -> Tensor:
    """The reference: ``x / sqrt(mean(x^2) + eps) * weight`` over the last axis."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _norm(x: Tensor, weight: Tensor, eps: float = 1e-5, *, dim: Any = -1,
          centre: bool = False, eps_at: str = "inside", gain: bool = True,
          reduce: str = "mean") -> Tensor:
    """RMSNorm with one thing changed: the axis (``dim``), the mean taken away first
    (``centre``: layer normalisation), where ``eps`` goes (``"inside"`` the root,
    ``"outside"`` it, ``"none"``), the gain left out, or the sum instead of the mean."""
    if centre:
        x = x - x.mean(dim, keepdim=True)
    square = x.pow(2)
    power = square.mean(dim, keepdim=True) if reduce == "mean" else square.sum(dim, keepdim=True)
    if eps_at == "inside":
        out = x / torch.sqrt(power + eps)
    elif eps_at == "outside":
        out = x / (torch.sqrt(power) + eps)
    else:
        out = x / torch.sqrt(power)
    return out * weight if gain else out


def _norm_cases(g: torch.Generator, shape: tuple[int, ...], eps: float, label: str) -> Case:
    x = torch.randn(*shape, generator=g) * 3 + 0.5
    weight = torch.rand(shape[-1], generator=g) + 0.5
    return Case(args=(x, weight, eps), label=label)


norm_cases = drawn_cases(1101, _norm_cases, visible=[
    ((2, 3, 5), 1e-5, "(B, T, d) = (2, 3, 5)"),
    ((4, 6), 1e-5, "(T, d) = (4, 6), no batch axis"),
    ((1, 2, 8), 1.0, "(1, 2, 8) with eps = 1"),
], hidden=[((3, 5, 7), 1e-5, ""), ((5, 5), 0.1, ""), ((2, 1, 4, 6), 1e-6, "")])


NORM_MISTAKES = mistake_table(changed(_norm), [
    ("first_axis", {"dim": 0},
     "you normalised along the first axis (across the batch or the positions); RMSNorm "
     "normalises each vector over its own features, the last axis"),
    ("second_last_axis", {"dim": -2},
     "you normalised along the positions (the second-last axis); RMSNorm normalises each "
     "token's vector over its features, the last axis"),
    ("all_axes", {"dim": None},
     "you took one root mean square over the whole tensor; each token's vector gets its "
     "own, over the last axis"),
    ("layer_norm", {"centre": True},
     "you subtracted the mean first: that is layer normalisation; RMSNorm only divides by "
     "the root mean square, without centring"),
    ("eps_outside", {"eps_at": "outside"},
     "your eps is added after the square root; it goes inside it, with the mean of the "
     "squares"),
    ("no_eps", {"eps_at": "none"},
     "you ignore the eps argument (case 3 passes eps = 1): add the eps you are given "
     "inside the square root, with the mean of the squares"),
    ("no_gain", {"gain": False},
     "the normalisation is right, but the result is not multiplied by the learned gain "
     "(weight), one number per feature"),
    ("sum_not_mean", {"reduce": "sum"},
     "you divided by the root of the sum of the squares; RMSNorm uses their mean, so that "
     "the output's entries are about 1 in size whatever the width"),
])


# --------------------------------------------------------------------------- question 2
def grouped_query_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The reference: causal attention of ``q (B, H, T, d)`` over ``k, v (B, H_kv, T, d)``,
    query head ``h`` reading key/value head ``h // (H / H_kv)``."""
    return _gqa(q, k, v)


def _gqa(q: Tensor, k: Tensor, v: Tensor, *, mapping: str = "grouped",
         causal: bool | str = True, scale: str = "head", axis: int = -1) -> Tensor:
    """``causal``: ``True``, ``False`` (no mask) or ``"strict"`` (the diagonal masked too:
    a query sees only the positions before its own)."""
    heads, kv_heads = q.shape[1], k.shape[1]
    group = heads // kv_heads
    if mapping == "grouped":
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    elif mapping == "cycled":
        k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
    elif mapping == "first":
        k, v = k[:, :1].expand_as(q), v[:, :1].expand(q.shape[:-1] + v.shape[-1:])
    d, t = q.shape[-1], q.shape[-2]
    factor = {"head": d ** -0.5, "none": 1.0, "model": (d * heads) ** -0.5}[scale]
    scores = q @ k.transpose(-1, -2) * factor
    if causal:
        seen = torch.ones(t, t, dtype=torch.bool).tril(-1 if causal == "strict" else 0)
        scores = scores.masked_fill(~seen, -math.inf)
    return torch.softmax(scores, dim=axis) @ v


def _gqa_case(g: torch.Generator, b: int, heads: int, kv: int, t: int, d: int) -> Case:
    q = torch.randn(b, heads, t, d, generator=g)
    k = torch.randn(b, kv, t, d, generator=g)
    v = torch.randn(b, kv, t, d, generator=g)
    kv_heads = "1 key/value head" if kv == 1 else f"{kv} key/value heads"
    return Case(args=(q, k, v), label=f"B={b}, {heads} query heads, {kv_heads}, T={t}, d={d}")


gqa_cases = drawn_cases(1102, _gqa_case, visible=[
    (2, 4, 2, 5, 4), (1, 6, 3, 4, 8), (1, 4, 1, 6, 4),
], hidden=[(2, 8, 2, 7, 4), (1, 6, 2, 5, 6), (3, 2, 2, 4, 4), (1, 8, 4, 3, 16)])


GQA_MISTAKES = mistake_table(changed(_gqa), [
    ("cycled_heads", {"mapping": "cycled"},
     "your query heads take the key/value heads in turn (head h reads head h mod H_kv): "
     "that is what repeating the whole set of key/value heads gives; each key/value head "
     "serves a group of neighbouring query heads, so head h reads head h // (H / H_kv)"),
    ("first_head_only", {"mapping": "first"},
     "every query head reads the first key/value head: that is multi-query attention; with "
     "H_kv key/value heads, each serves its own group of H / H_kv query heads"),
    ("not_causal", {"causal": False},
     "each query also sees the keys after it: the attention of a language model is causal, "
     "a query sees its own position and the ones before"),
    ("diagonal_masked", {"causal": "strict"},
     "your mask hides the diagonal too: a query must see its own position (and the ones "
     "before); the first query then sees nothing, and a fully masked row gives NaN"),
    ("unscaled", {"scale": "none"},
     "your scores are not divided by the square root of the head size"),
    ("model_scale", {"scale": "model"},
     "your scores are divided by the square root of the whole width (all heads together); "
     "the scale is the size of one head's query and key"),
    ("softmax_over_queries", {"axis": -2},
     "your softmax normalises over the queries (down each column); each query's weights "
     "over its keys must sum to 1"),
])


def _gqa_diagnose(case: Case, expected: Any, got: Any) -> str | None:
    """An answer that is right for the first query head of every group but not for the
    others has mapped the heads wrongly."""
    if not (isinstance(got, Tensor) and isinstance(expected, Tensor)):
        return None
    if got.shape != expected.shape:
        return None
    q, k = case.args[0], case.args[1]
    group = q.shape[1] // k.shape[1]
    close = torch.isclose(got.double(), expected.double(), rtol=1e-4, atol=1e-5)
    per_head = close.flatten(2).all(-1).all(0)
    if group > 1 and bool(per_head[::group].all()) and not bool(per_head.all()):
        return _("the first query head of each group is right and the others are not: "
                 "look at which key/value head each query head reads")
    return None


# --------------------------------------------------------------------------- question 4
def rope(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """RoPE as the learner's page gives it: rotate the adjacent pairs of ``x (B, n, d)`` at
    ``positions (n,)`` by ``p * base^(-2i/d)``."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = positions.to(torch.float64)[:, None] * theta
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2)


def rope_cache_step(q_new: Tensor, k_new: Tensor, v_new: Tensor, cache_k: Tensor,
                    cache_v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The reference of question 4: the ``n`` new tokens sit at positions ``T .. T + n -
    1`` after the ``T`` cached ones; their queries and keys are rotated there, their keys
    and values join the cache, and they attend bottom-right."""
    return _rope_step()(q_new, k_new, v_new, cache_k, cache_v)


def _rope_step(offset: str = "cache", values: bool = False, again: bool = False,
               queries: bool = True) -> Callable[..., tuple[Tensor, Tensor, Tensor]]:
    """The step with one thing changed: where the positions start (``"cache"``: at
    ``T``, ``"after"``: at ``T + 1``, ``"before"``: at ``T - 1``, ``"zero"``: at 0), the
    values rotated too, the cached keys rotated again, the queries left unrotated."""

    def step(q_new, k_new, v_new, cache_k, cache_v):
        t, n = cache_k.shape[-2], q_new.shape[-2]
        start = {"cache": t, "after": t + 1, "before": t - 1, "zero": 0}[offset]
        positions = torch.arange(start, start + n)
        q = rope(q_new, positions) if queries else q_new
        k = rope(k_new, positions)
        v = rope(v_new, positions) if values else v_new
        old = rope(cache_k, torch.arange(t)) if again else cache_k
        keys, vals = torch.cat([old, k], -2), torch.cat([cache_v, v], -2)
        allowed = torch.ones(n, t + n, dtype=torch.bool).tril(t)
        scores = (q @ keys.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), -1)
        return weights @ vals, keys, vals

    return step


def _rope_case(g: torch.Generator, b: int, cached: int, n: int, d: int, label: str = "") -> Case:
    q, k, v = (torch.randn(b, n, d, generator=g) for _copy in range(3))
    cache_v = torch.randn(b, cached, d, generator=g)
    cache_k = rope(torch.randn(b, cached, d, generator=g), torch.arange(cached))
    return Case(args=(q, k, v, cache_k, cache_v), label=label)


rope_cases = drawn_cases(1103, _rope_case, visible=[
    (2, 0, 4, 8, "an empty cache: four tokens at once (B=2, T=0, n=4, d=8)"),
    (1, 5, 1, 8, "one new token after 5 cached ones (B=1, T=5, n=1, d=8)"),
    (2, 3, 2, 4, "two new tokens after 3 cached ones (B=2, T=3, n=2, d=4)"),
], hidden=[(1, 7, 3, 6), (2, 2, 1, 4), (1, 9, 2, 8)])


ROPE_MISTAKES = mistake_table(_rope_step, [
    ("starter", {"offset": "after", "values": True},
     "this is what the given code computes: two things are still wrong, where the new "
     "tokens' positions start and what is rotated"),
    ("values_still_rotated", {"values": True},
     "the positions are right now, but the values are still rotated: RoPE turns the queries "
     "and the keys, whose dot products must depend on the offset, and leaves the values, "
     "the content that is mixed, as they are"),
    ("offset_still_off_by_one", {"offset": "after"},
     "the values are right now, but the new tokens still sit one position too far: after T "
     "cached tokens (positions 0 to T - 1) the first new token is at position T; with an "
     "empty cache the outputs hide this bug, the keys you give back do not"),
    ("offset_one_short", {"offset": "before"},
     "your new tokens sit one position too early: after T cached tokens (positions 0 to "
     "T - 1) the first new token is at position T"),
    ("positions_restart", {"offset": "zero"},
     "your new tokens are rotated as if they were the first of the sequence (positions from "
     "0): they come after the T cached tokens, at positions T, T + 1, ..."),
    ("cache_rotated_again", {"again": True},
     "you rotated the cached keys again; they were rotated at their own positions when they "
     "were new, and a rotation done twice turns them too far"),
    ("queries_not_rotated", {"queries": False},
     "the new queries are not rotated; a query must be turned by its own position too, so "
     "that each score depends on the offset between query and key"),
])


def _rope_diagnose(case: Case, expected: Any, got: Any) -> str | None:
    if type(got) not in (tuple, list) or len(got) != 3 or type(expected) is not tuple:
        return None
    if not all(isinstance(x, Tensor) for x in got) or any(
            a.shape != b.shape for a, b in zip(got, expected, strict=True)):
        return None
    close = [bool(torch.allclose(a.double(), b.double(), rtol=1e-4, atol=1e-5))
             for a, b in zip(got, expected, strict=True)]
    if close[0] and not close[1]:
        return _("your output is right, but the keys you return are not: the cache must hold "
                 "every key rotated at its own position, for the steps to come")
    return None


# --------------------------------------------------------------------------- question 5
def gpt_weights(vocab_size: int, d_model: int, num_layers: int, num_heads: int,
                num_kv_heads: int, d_ff: int) -> dict[str, int]:
    """The reference of question 5: the weights of one block's attention and feed-forward
    network, and of the whole model (tied embedding, no biases, RMSNorm gains)."""
    return _count(vocab_size, d_model, num_layers, num_heads, num_kv_heads, d_ff)


def _count(vocab: int, d: int, layers: int, heads: int, kv: int, d_ff: int, *,
           kv_width: str = "grouped", ffn_mats: int = 3, tied: bool = True,
           norms: str = "rms", biases: bool = False,
           gains_in_parts: bool = False) -> dict[str, int]:
    head = d // heads
    kv_dim = {"grouped": kv * head, "full": d, "one": head}[kv_width]
    attention = 2 * d * d + 2 * d * kv_dim
    ffn = ffn_mats * d * d_ff
    if biases:
        attention += 2 * d + 2 * kv_dim
        ffn += d_ff * (ffn_mats - 1) + d
    per_norm = {"rms": d, "layer": 2 * d, "none": 0}[norms]
    total = vocab * d * (1 if tied else 2) + layers * (attention + ffn + 2 * per_norm) + per_norm
    if gains_in_parts:  # each sub-layer's RMSNorm counted with it (the total is right)
        attention, ffn = attention + per_norm, ffn + per_norm
    return {"attention": attention, "ffn": ffn, "total": total}


def count_cases() -> list[Case]:
    return [
        Case(args=(512, 128, 4, 4, 2, 344), label="the chapter's model: V=512, d=128, 4 "
                                                  "layers, 4 heads, 2 key/value heads, "
                                                  "d_ff=344"),
        Case(args=(32000, 4096, 32, 32, 8, 11008),
             label="V=32000, d=4096, 32 layers, 32 heads, 8 key/value heads, d_ff=11008"),
        Case(args=(100, 64, 2, 8, 8, 176), label="V=100, d=64, 2 layers, 8 heads, 8 "
                                                 "key/value heads, d_ff=176"),
        Case(args=(1000, 96, 3, 6, 1, 256), hidden=True),
        Case(args=(50257, 768, 12, 12, 4, 2048), hidden=True),
        Case(args=(300, 48, 1, 4, 2, 128), hidden=True),
    ]


COUNT_MISTAKES = mistake_table(changed(_count), [
    ("kv_full_width", {"kv_width": "full"},
     "your key and value projections are as wide as the query's: with grouped-query "
     "attention they produce num_kv_heads heads of d_model / num_heads features each"),
    ("kv_one_head", {"kv_width": "one"},
     "your key and value projections produce one head: that is multi-query attention; "
     "here they produce num_kv_heads heads"),
    ("two_ffn_matrices", {"ffn_mats": 2},
     "you counted two matrices in the feed-forward network, as in the ReLU network of "
     "chapter 6; SwiGLU has three: the gate, the up and the down projection"),
    ("untied", {"tied": False},
     "you counted the output layer apart from the embedding; here they share one matrix "
     "(tied weights), counted once"),
    ("no_norms", {"norms": "none"},
     "your total leaves out the RMSNorm gains: two per block and a final one, d_model "
     "numbers each"),
    ("layer_norm", {"norms": "layer"},
     "you counted a bias in every norm, as layer normalisation has; RMSNorm has a gain only"),
    ("gains_in_parts", {"gains_in_parts": True},
     "you counted each sub-layer's RMSNorm gain with its attention or feed-forward "
     "network; those two parts are their projections only, the gains count in the total"),
    ("biases", {"biases": True},
     "you counted biases in the linear layers; the model has none"),
])


# --------------------------------------------------------------------------- question 3
SAME, CHANGES = "the same", "changes"
INVARIANCE = {"reversed_cache": SAME, "shifted_positions": SAME, "scaled_input": CHANGES}
INVARIANCE_WRONG = [
    ("reversed_cache_changes", "reversed_cache", CHANGES,
     "the new token sees every cached key, and each key carries its position in its own "
     "rotation, not in its place in the cache: attention is a weighted sum over a set, so "
     "the order in which the pairs are stored changes nothing"),
    ("shifted_positions_change", "shifted_positions", CHANGES,
     "RoPE makes each score depend on the offset between the query's and the key's "
     "positions only; adding the same number to every position keeps every offset"),
    ("scaled_input_same", "scaled_input", SAME,
     "RMSNorm makes the attention's output the same for 10 x as for x, but the residual "
     "path adds it to 10 x itself: divided by 10, the block's output is x plus a tenth of "
     "the attention's output, not x plus all of it"),
]


# --------------------------------------------------------------------------- question 6
def top_p_keep(probs: Tensor, p: float) -> Tensor:
    """The reference of question 6: bool, True for the smallest set of most likely tokens
    whose probabilities sum to at least ``p`` (ties at the edge broken by order)."""
    return _keep(probs, p)


def _keep(probs: Tensor, p: float, *, rule: str = "before", order: str = "descending",
          unsort: bool = True) -> Tensor:
    descending = order == "descending"
    sorted_probs, index = probs.sort(dim=-1, descending=descending, stable=True)
    total = sorted_probs.cumsum(-1)
    if rule == "before":      # the mass of the more likely tokens is still short of p
        kept = total - sorted_probs < p
    elif rule == "within":    # the running total stays within p: the crossing token is lost
        kept = total <= p
    else:                     # every token at least p likely
        kept = sorted_probs >= p
    if not unsort:
        return kept
    return torch.zeros_like(kept).scatter(-1, index, kept)


def _probs(g: torch.Generator, rows: int, vocab: int, sharpness: float) -> Tensor:
    return torch.softmax(torch.randn(rows, vocab, generator=g) * sharpness, -1)


def _top_p_case(g: torch.Generator, rows: int, vocab: int, sharpness: float, p: float) -> Case:
    rows_label = "1 distribution" if rows == 1 else f"{rows} distributions"
    return Case(args=(_probs(g, rows, vocab, sharpness), p),
                label=f"{rows_label} over {vocab} tokens, p = {p:g}")


top_p_cases = drawn_cases(1106, _top_p_case, visible=[
    (2, 6, 1.5, 0.6), (3, 10, 3.0, 0.9), (1, 5, 0.3, 0.5),
], hidden=[(4, 8, 2.0, 0.75), (2, 12, 4.0, 0.3), (3, 7, 1.0, 0.95), (2, 9, 2.5, 0.05)])


TOP_P_MISTAKES = mistake_table(changed(_keep), [
    ("crossing_token_lost", {"rule": "within"},
     "you kept the tokens whose running total stays within p, so the token that takes the "
     "total past p is lost (and a confident distribution keeps nothing); keep the most "
     "likely tokens until they reach at least p, that token included"),
    ("least_likely", {"order": "ascending"},
     "you kept the least likely tokens: sort the probabilities from the largest down"),
    ("each_at_least_p", {"rule": "each"},
     "you kept the tokens that are each at least p likely; top-p keeps the most likely "
     "tokens until their probabilities together reach p"),
    ("sorted_order", {"unsort": False},
     "your mask is in the sorted order; put each token's answer back at its own place in "
     "the vocabulary"),
])


# --------------------------------------------------------------------------- question 7
def smoothing_experiment(train_ids: Tensor, val_ids: Tensor, vocab_size: int,
                         alphas: list[float]) -> dict[str, Any]:
    """The reference of question 7: the validation perplexity of the add-alpha bigram for
    every alpha, and the alpha with the lowest."""
    return _smoothing(train_ids, val_ids, vocab_size, alphas)


def _bigram_ppl(train: Tensor, val: Tensor, vocab: int, alpha: float, *,
                context: str = "pairs", direction: str = "next", denominator: str = "full",
                average: str = "mean") -> float:
    a, b = (train[:-1], train[1:]) if direction == "next" else (train[1:], train[:-1])
    counts = torch.zeros(vocab, vocab, dtype=torch.float64)
    counts.index_put_((a, b), torch.ones(len(a), dtype=torch.float64), accumulate=True)
    if context == "pairs":
        rows = counts.sum(1)
    elif context == "all_tokens":
        rows = torch.bincount(train, minlength=vocab).double()
    else:
        rows = torch.full((vocab,), float(len(a)), dtype=torch.float64)
    extra = {"full": alpha * vocab, "one": alpha, "none": 0.0,
             "seen": alpha * (int(train.max()) + 1)}[denominator]
    probs = (counts + alpha) / (rows[:, None] + extra)
    nll = -probs[val[:-1], val[1:]].log()
    return math.exp(nll.mean().item() if average == "mean" else nll.sum().item())


def _smoothing(train: Tensor, val: Tensor, vocab: int, alphas: list[float],
               **change: str) -> dict[str, Any]:
    perplexities = [_bigram_ppl(train, val, vocab, a, **change) for a in alphas]
    # A mistake keeps the right best alpha: best_alpha takes one of three or four values
    # and several mistakes pick the same one, so it is never matched to a mistake (the
    # diagnosis, _best_alpha_diagnose, says where a wrong one comes from).
    right = [_bigram_ppl(train, val, vocab, a) for a in alphas] if change else perplexities
    best = alphas[min(range(len(alphas)), key=right.__getitem__)]
    return {"perplexities": perplexities, "best_alpha": best}


def _text_ids(g: torch.Generator, length: int, vocab: int) -> Tensor:
    """Token ids of a made-up text: a Markov chain with a few likely successors per token,
    so that a bigram model has something to learn and smoothing matters."""
    logits = torch.randn(vocab, vocab, generator=g) * 2.5
    ids = [int(torch.randint(vocab, (1,), generator=g))]
    for _step in range(length - 1):
        ids.append(int(torch.multinomial(torch.softmax(logits[ids[-1]], 0), 1, generator=g)))
    return torch.tensor(ids)


def _smoothing_case(g: torch.Generator, vocab: int, train: int, val: int,
                    alphas: list[float], used: int | None = None) -> Case:
    """``used``: the text's ids are drawn from 0 .. used - 1 only, so that the highest
    ids of the vocabulary never occur (neither in training nor in validation)."""
    ids = _text_ids(g, train + val, used or vocab)
    return Case(args=(ids[:train], ids[train:], vocab, alphas),
                label=f"{vocab} tokens, {train} training and {val} validation ids, "
                      f"alphas {alphas}")


def _best_alpha_diagnose(case: Case, expected: Any, got: Any) -> str | None:
    """best_alpha takes one of three or four values, and several mistakes pick the same:
    it is never matched to one; the feedback says where a wrong best_alpha comes from."""
    if not isinstance(expected, float) or expected not in case.args[3]:
        return None  # not the best_alpha part
    if isinstance(got, int) and not isinstance(got, bool):
        return _("your best_alpha is an integer: return the alpha of your lowest "
                 "perplexity, not its index in alphas")
    return _("your best_alpha is not the alpha of the lowest perplexity: if your "
             "perplexities are wrong, fix those first, best_alpha follows from them; if "
             "not, return the alpha (not its index) at which they are lowest")


smoothing_cases = drawn_cases(1107, _smoothing_case, visible=[
    (8, 200, 60, [0.01, 0.1, 1.0]), (20, 400, 100, [0.05, 0.5, 2.0]),
], hidden=[(12, 300, 80, [0.02, 0.2, 1.0, 5.0]), (30, 200, 200, [0.1, 1.0, 10.0]),
           (12, 300, 80, [0.05, 0.5, 2.0], 10)])


SMOOTHING_MISTAKES = mistake_table(
    lambda **change: lambda train, val, vocab, alphas: _smoothing(train, val, vocab, alphas,
                                                                  **change), [
        ("counted_every_token", {"context": "all_tokens"},
         "you divided a pair's count by how often its first token occurs in the whole "
         "training text; the last training token starts no pair, so count the pairs that "
         "start with it (the row sums of the pair counts)"),
        ("divided_by_all_pairs", {"context": "total"},
         "you divided every pair's count by the number of all pairs: that is the joint "
         "probability p(a, b); the bigram model needs p(b | a), divided by how often a "
         "starts a pair"),
        ("reversed", {"direction": "previous"},
         "you counted each pair the wrong way round, p(a | b): the model predicts the next "
         "token from the one before"),
        ("alpha_once", {"denominator": "one"},
         "you added alpha once to the denominator; every one of the vocab_size possible next "
         "tokens got alpha added to its count, so the row's total grows by alpha times "
         "vocab_size (else the probabilities do not sum to 1)"),
        ("vocab_from_ids", {"denominator": "seen"},
         "you added alpha for each id up to the largest one in the training text; the model "
         "predicts over all vocab_size tokens, also those the training text never shows, "
         "so the denominator grows by alpha times vocab_size"),
        ("summed", {"average": "sum"},
         "your perplexity is the exponential of the summed negative log-likelihood; it is "
         "that of the mean, per predicted token"),
    ])


# --------------------------------------------------------------------------- the exercise
EXERCISE = Exercise(
    id="11_small_gpt",
    title="A small GPT on real text",
    forbidden_imports=("attention_course.gpt", "attention_course.experiments.gpt",
                       "attention_course.decoding", "attention_course.multihead",
                       "attention_course.positions"),
    questions=(
        Question(
            id="q1_rms_norm",
            symbol="rms_norm",
            title="RMSNorm",
            kind="implement",
            points=2,
            reference=rms_norm,
            cases=norm_cases,
            grad=True,
            rtol=1e-5,
            atol=1e-6,
            mistakes=NORM_MISTAKES,
            hint=("Each token's vector is divided by the square root of the mean of its "
                  "squared features plus eps, then multiplied feature by feature by the "
                  "gain."),
            section=BLOCK,
        ),
        Question(
            id="q2_gqa",
            symbol="grouped_query_attention",
            title="Grouped-query causal attention",
            kind="implement",
            points=3,
            reference=grouped_query_attention,
            cases=gqa_cases,
            rtol=1e-4,
            atol=1e-5,
            mistakes=GQA_MISTAKES,
            diagnose=_gqa_diagnose,
            hint=("Give every query head its key/value head (neighbouring query heads share "
                  "one), then run causal scaled dot-product attention head by head."),
            section=BLOCK,
        ),
        prediction(
            id="q3_predict_invariance",
            symbol="predict_invariance",
            title="Predict: what changes?",
            points=3,
            answer=INVARIANCE,
            choices=(SAME, CHANGES),
            wrong=INVARIANCE_WRONG,
            hint=("Ask of each change what the attention's scores read: a key's rotation, "
                  "its place in the cache, or the length of a normalised vector; and what "
                  "the residual path adds the attention's output to."),
            section=BLOCK,
        ),
        Question(
            id="q4_rope_cache",
            symbol="rope_cache_step",
            title="Repair a RoPE step against a KV cache",
            kind="debug",
            points=3,
            reference=rope_cache_step,
            cases=rope_cases,
            rtol=1e-4,
            atol=1e-5,
            mistakes=ROPE_MISTAKES,
            diagnose=_rope_diagnose,
            hint=("Count the positions: which ones do the cached tokens hold, and where does "
                  "the first new token sit? Then ask which of the query, the key and the "
                  "value RoPE turns."),
            section=BLOCK,
        ),
        Question(
            id="q5_weights",
            symbol="gpt_weights",
            title="Count a GPT's weights",
            kind="derive",
            points=3,
            reference=gpt_weights,
            cases=count_cases,
            parts={"attention": 1, "ffn": 1, "total": 1},
            rtol=0.0,
            atol=0.0,
            mistakes=COUNT_MISTAKES,
            hint=("Write down the shape of every matrix of one block (the query, key, value "
                  "and output projections, the three of SwiGLU) and of the norms, then add "
                  "the embedding, which the output layer shares."),
            section=BLOCK,
        ),
        Question(
            id="q6_top_p",
            symbol="top_p_keep",
            title="The nucleus of top-p sampling",
            kind="implement",
            points=2,
            reference=top_p_keep,
            cases=top_p_cases,
            rtol=0.0,
            atol=0.0,
            mistakes=TOP_P_MISTAKES,
            hint=("Sort the tokens from the most likely down and keep them until their "
                  "probabilities together reach p: the token that gets there is kept too."),
            section=SAMPLES,
        ),
        Question(
            id="q7_smoothing",
            symbol="smoothing_experiment",
            title="Measure: how much smoothing does a bigram baseline need?",
            kind="experiment",
            points=3,
            reference=smoothing_experiment,
            cases=smoothing_cases,
            parts={"perplexities": 2, "best_alpha": 1},
            rtol=1e-6,
            atol=1e-9,
            mistakes=SMOOTHING_MISTAKES,
            diagnose=_best_alpha_diagnose,
            hint=("Count the pairs (a, b) of neighbouring training tokens; p(b | a) is the "
                  "pair's count plus alpha over the count of pairs that start with a plus "
                  "alpha for each of the vocab_size next tokens. The perplexity is the "
                  "exponential of the mean negative log-probability of the validation "
                  "pairs."),
            section=BASELINES,
        ),
    ),
)
