"""Exercise 5: multi-head attention (chapter 5).

Seven questions: split and merge heads (implement), one multi-head attention module
(implement, it builds on the two), a debugging question on PyTorch's two masks, a
prediction on what more heads change, a derivation for grouped-query attention, and an
experiment that measures what the classic split mistake does to a causal mask.

The references are the package's own chapter-5 code (``attention_course.multihead``)
where there is one. Every known mistake is computed by the same small functional
implementation with one thing changed, so a learner's output is recognised by what it
is, not by how it was written.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attention_course import multihead
from attention_course.grading.spec import Case, Exercise, Mistake, Question
from attention_course.grading.tables import mistake_table, prediction
from attention_course.i18n import N_, _

EXERCISE_ID = "05_multihead_attention"


# --------------------------------------------------------------------------- split, merge
def _split(x: torch.Tensor, num_heads: int, how: str = "ok") -> torch.Tensor:
    """``(B, N, h d_k)`` -> heads, the right way or one of the ways learners get wrong."""
    batch, length, dim = x.shape
    head_dim = dim // num_heads
    if how == "ok":
        return x.reshape(batch, length, num_heads, head_dim).transpose(1, 2)
    if how == "no_transpose":  # the right shape in one step: reads memory in the wrong order
        return x.reshape(batch, num_heads, length, head_dim)
    if how == "interleaved":  # head i gets features i, i + h, i + 2h, ...
        return x.reshape(batch, length, head_dim, num_heads).permute(0, 3, 1, 2)
    if how == "not_moved":  # cut into heads, but the head axis stays behind the tokens
        return x.reshape(batch, length, num_heads, head_dim)
    if how == "last_two_swapped":  # the wrong pair of axes transposed
        return x.reshape(batch, length, num_heads, head_dim).transpose(2, 3)
    if how == "dk_heads":  # d_k heads of num_heads features
        return x.reshape(batch, length, head_dim, num_heads).transpose(1, 2)
    if how == "transposed_first":  # tokens and features swapped before the cut
        return x.transpose(1, 2).reshape(batch, num_heads, length, head_dim)
    raise ValueError(how)


def _merge(x: torch.Tensor, how: str = "ok") -> torch.Tensor:
    """``(B, h, N, d_k)`` -> ``(B, N, h d_k)``, right or wrong."""
    batch, heads, length, head_dim = x.shape
    if how == "ok":
        return x.transpose(1, 2).reshape(batch, length, heads * head_dim)
    if how == "no_transpose":
        return x.reshape(batch, length, heads * head_dim)
    if how == "interleaved":
        return x.permute(0, 2, 3, 1).reshape(batch, length, heads * head_dim)
    if how == "sum":
        return x.sum(dim=1)
    if how == "mean":
        return x.mean(dim=1)
    raise ValueError(how)


def _splitting(how: str):
    """``split_heads`` done the wrong way ``how`` (see :func:`_split`)."""
    return lambda x, h: _split(x, h, how)


def _merging(how: str):
    """``merge_heads`` done the wrong way ``how`` (see :func:`_merge`)."""
    return lambda x: _merge(x, how)


def split_cases() -> list[Case]:
    g = torch.Generator().manual_seed(501)
    return [
        Case(args=(torch.randn(1, 6, 12, generator=g), 3), label="B=1, N=6, 12 features, 3 heads"),
        Case(args=(torch.randn(2, 4, 8, generator=g), 2), label="B=2, N=4, 8 features, 2 heads"),
        Case(args=(torch.randn(3, 5, 6, generator=g), 1), label="one head"),
        Case(args=(torch.randn(2, 3, 12, generator=g), 4), hidden=True),
        Case(args=(torch.randn(1, 7, 10, generator=g), 5), hidden=True),
    ]


def merge_cases() -> list[Case]:
    g = torch.Generator().manual_seed(502)
    return [
        Case(args=(torch.randn(1, 3, 6, 4, generator=g),), label="B=1, 3 heads, N=6, d_k=4"),
        Case(args=(torch.randn(2, 2, 5, 3, generator=g),), label="B=2, 2 heads, N=5, d_k=3"),
        Case(args=(torch.randn(2, 4, 3, 2, generator=g),), hidden=True),
        Case(args=(torch.randn(1, 5, 7, 2, generator=g),), hidden=True),
    ]


def _same_numbers_elsewhere(what: str):
    """A ``diagnose`` hook: the output holds exactly the input's numbers, in other places.
    ``what`` (marked with ``N_``, translated here) says where they belong."""

    def diagnose(case: Case, expected, got) -> str | None:
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            return None
        if got.numel() and torch.equal(got.flatten().sort().values,
                                       expected.flatten().sort().values):
            return _("your output holds exactly the right numbers, but in the wrong "
                     "places: {what}").format(what=_(what))
        return None

    return diagnose


# --------------------------------------------------------------------------- the module
class MultiHeadAttentionReference(multihead.MultiHeadAttention):
    """The course's module, called as the exercise asks: ``(query, key, value, attn_mask)``
    -> ``(output, weights)``, always with the per-head weights."""

    def forward(self, query, key, value, attn_mask=None):  # type: ignore[override]
        return super().forward(query, key, value, attn_mask=attn_mask, need_weights=True)


class _Variant(nn.Module):
    """Multi-head attention written out step by step; subclasses change one step."""

    split, merge, scale, mask, softmax_dim = "ok", "ok", "d_k", "ok", -1
    out_proj_used, average, inputs, residual = True, False, "ok", False

    def __init__(self, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query, key, value, attn_mask=None):
        if self.inputs == "from_query":
            key = value = query
        elif self.inputs == "swapped":
            key, value = value, key
        q = _split(self.q_proj(query), self.num_heads, self.split)
        k = _split(self.k_proj(key), self.num_heads, self.split)
        v = _split(self.v_proj(value), self.num_heads, self.split)
        divisor = {"d_k": math.sqrt(q.shape[-1]), "embed_dim": math.sqrt(self.embed_dim),
                   "none": 1.0, "d_k_not_root": float(q.shape[-1])}[self.scale]
        scores = q @ k.transpose(-2, -1) / divisor
        try:
            torch.broadcast_shapes(scores.shape, () if attn_mask is None else attn_mask.shape)
        except RuntimeError:  # keys from the wrong sequence: the mask cannot even apply
            attn_mask = None
        if attn_mask is not None:
            if self.mask == "ok":
                scores = scores.masked_fill(~attn_mask, float("-inf"))
            elif self.mask == "inverted":
                scores = scores.masked_fill(attn_mask, float("-inf"))
            elif self.mask == "zero":
                scores = scores.masked_fill(~attn_mask, 0.0)
            elif self.mask == "ignored":
                pass
        weights = scores.softmax(dim=self.softmax_dim)
        out = _merge(weights @ v, self.merge)
        if self.out_proj_used:
            out = self.out_proj(out)
        if self.residual:
            out = query + out
        return out, weights.mean(dim=1) if self.average else weights


def _variant(name: str, **changes) -> type[_Variant]:
    return type(name, (_Variant,), changes)


def _params(embed_dim: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    params = {}
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        params[f"{name}.weight"] = torch.randn(embed_dim, embed_dim, generator=g) / embed_dim**0.5
        params[f"{name}.bias"] = torch.randn(embed_dim, generator=g) * 0.1
    return params


def _padding(lengths: list[int], n: int) -> torch.Tensor:
    """Bool ``(B, 1, 1, n)``, True on the real keys."""
    return (torch.arange(n)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]


def mha_cases() -> list[Case]:
    g = torch.Generator().manual_seed(503)
    x = torch.randn(2, 5, 8, generator=g)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    y = torch.randn(3, 4, 16, generator=g)
    memory = torch.randn(3, 7, 16, generator=g)
    z = torch.randn(2, 6, 8, generator=g)
    return [
        Case(init_args=(8, 2), params=_params(8, g), args=(x, x, x),
             label="self-attention, B=2, N=5, embed_dim 8, 2 heads, no mask"),
        Case(init_args=(12, 3), params=_params(12, g),
             args=(torch.randn(2, 3, 12, generator=g), torch.randn(2, 6, 12, generator=g),
                   torch.randn(2, 6, 12, generator=g)),
             label="cross-attention, Nq=3, Nk=6, 3 heads, no mask"),
        Case(init_args=(8, 4), params=_params(8, g), args=(x, x, x),
             kwargs={"attn_mask": _padding([5, 3], 5)},
             label="padding mask (B, 1, 1, Nk): sequence 0 has 5 real tokens, sequence 1 has 3"),
        Case(init_args=(8, 2), params=_params(8, g), args=(x, x, x),
             kwargs={"attn_mask": causal}, label="causal mask (N, N), 2 heads"),
        Case(init_args=(6, 1), params=_params(6, g),
             args=(torch.randn(1, 4, 6, generator=g),) * 3, label="one head"),
        Case(init_args=(16, 4), params=_params(16, g), args=(y, memory, memory),
             kwargs={"attn_mask": _padding([7, 2, 5], 7)}, hidden=True),
        Case(init_args=(8, 2), params=_params(8, g), args=(z, z, z),
             kwargs={"attn_mask": _padding([6, 4], 6) & torch.ones(6, 6, dtype=torch.bool).tril()},
             hidden=True),
    ]


def _weights_of(got):
    output = got["output"] if isinstance(got, dict) else got
    if isinstance(output, (tuple, list)) and len(output) == 2:
        return output[1]
    return None


def _score_factor(w: torch.Tensor, want: torch.Tensor) -> float | None:
    """``c`` when ``w`` is the softmax of ``c`` times the reference's scores (rows shifted
    freely), else ``None``: the signature of a wrong scale."""
    support = want > 1e-12
    if not torch.equal(support, w > 1e-12) or not bool(support.any()):
        return None
    count = support.sum(dim=-1, keepdim=True).clamp_min(1)

    def centred(t):
        logs = torch.where(support, t.clamp_min(1e-300).log(), torch.zeros_like(t))
        return torch.where(support, logs - logs.sum(dim=-1, keepdim=True) / count,
                           torch.zeros_like(t))

    a, b = centred(w), centred(want)
    if float((b * b).sum()) < 1e-12:
        return None
    factor = float((a * b).sum() / (b * b).sum())
    residual = float((a - factor * b).norm()) / max(float(a.norm()), 1e-12)
    return factor if residual < 1e-3 and abs(factor - 1) > 1e-3 else None


def diagnose_mha(case: Case, expected, got) -> str | None:
    """What the learner's attention weights say, when no known mistake matched."""
    weights = _weights_of(got)
    want = _weights_of(expected)
    if not isinstance(weights, torch.Tensor) or not isinstance(want, torch.Tensor):
        return None
    if weights.shape != want.shape:
        return None
    w, want = weights.detach().double(), want.detach().double()

    def close(a, b) -> bool:
        return bool(torch.isclose(a.detach().double(), b.detach().double(), rtol=1e-4,
                                  atol=1e-6, equal_nan=True).all())

    if close(w, want):
        if isinstance(got, dict) and isinstance(expected, dict):
            output, reference = got["output"][0], expected["output"][0]
            if isinstance(output, torch.Tensor) and output.shape == reference.shape and close(
                    output, reference):
                wrong = [name for name, g, e in zip(("query", "key", "value"), got["gradients"],
                                                    expected["gradients"], strict=False)
                         if g.shape != e.shape or not close(g, e)]
                if wrong:
                    return _("your output has the right values on this case (one sequence "
                             "passed three times), but its gradient with respect to the "
                             "{argument} argument is wrong: each of query, key and value must "
                             "be projected from its own argument").format(argument=wrong[0])
        return _("your attention weights are right but the output is not: look at the "
                 "values (projected from the value argument), the concatenation of the heads "
                 "and the output projection")
    mask = case.kwargs.get("attn_mask")
    if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
        allowed = mask.expand(w.shape)
        safe = torch.nan_to_num(w, nan=0.0)
        mixed = (allowed.any(dim=-1) & (~allowed).any(dim=-1))[..., None].expand(w.shape)
        if (bool(mixed.any()) and bool((safe[allowed & mixed].abs() < 1e-9).all())
                and bool((safe[~allowed & mixed] > 1e-6).any())):
            return _("your weights are zero on every allowed position and positive on the "
                     "masked ones: the mask is used the wrong way round (in this course a "
                     "boolean mask is True where attention is allowed)")
        if bool((safe[~allowed].abs() > 1e-6).any()):
            return _("masked keys still get some weight: a masked score must become minus "
                     "infinity before the softmax, so that its weight is exactly 0")
    if not bool(torch.isfinite(w).all()):
        return None
    dropped = (w == 0) & (want > 1e-9)
    if bool(dropped.any()) and bool(((w - want).abs() > 1e-6)[~dropped].any()):
        return _("some of your weights are exactly 0 where the softmax is not, and the "
                 "others are larger: is a dropout active? The grader calls your module as it "
                 "is built (in training mode), and this exercise's module has no dropout")
    sums = w.sum(dim=-1)
    if bool(((sums - 1).abs() > 1e-3).any()):
        return _("a row of your weights does not sum to 1: each query's weights are a "
                 "softmax over the keys, the last axis")
    factor = _score_factor(w, want)
    if factor is not None:
        embed_dim, num_heads = case.init_args
        return _("your weights are a softmax of scores {factor} times the right ones: the "
                 "scale is wrong. Each head divides its dot products by the square root of "
                 "its own d_k, here {d_k}").format(factor=f"{factor:.3g}",
                                                   d_k=embed_dim // num_heads)
    return None


# --------------------------------------------------------------------------- PyTorch's masks
def torch_masks_to_ours(key_padding_mask: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
    """PyTorch's masks, True = do not attend: ``key_padding_mask (B, Nk)`` and
    ``attn_mask (Nq, Nk)`` -> ours, True = allowed, bool ``(B, 1, Nq, Nk)``."""
    return (~key_padding_mask)[:, None, None, :] & ~attn_mask


def _masks_variant(padding: str = "ok", axis: str = "keys", combine: str = "and",
                   attn: str = "ok", heads: bool = True):
    """One of the typical wrong conversions."""

    def wrong(key_padding_mask, attn_mask):
        kpm = ~key_padding_mask if padding == "ok" else key_padding_mask
        am = ~attn_mask if attn == "ok" else attn_mask
        if axis == "keys":
            pad = kpm[:, None, None, :]
        else:  # the padding put on the query axis (every case is square: Nq == Nk)
            pad = kpm[:, None, :, None]
        if attn == "ignored":
            return pad
        out = pad & am if combine == "and" else pad | am
        return out if heads else out[:, 0]

    return wrong


def mask_cases() -> list[Case]:
    def causal(n):
        return ~torch.ones(n, n, dtype=torch.bool).tril()  # PyTorch: True = not allowed

    def pad(lengths, n):
        return torch.arange(n)[None, :] >= torch.tensor(lengths)[:, None]  # True = padding

    i, j = torch.arange(5)[:, None], torch.arange(5)[None, :]
    window = ~((j <= i) & (j > i - 3))  # each query sees itself and the two tokens before
    prefix = ~((j <= i) | (j < 2))  # the first two tokens are seen by every query
    return [
        Case(args=(pad([4, 2], 4), causal(4)),
             label="self-attention, B=2, N=4, lengths 4 and 2, causal"),
        Case(args=(pad([3, 5, 1], 5), causal(5)), label="B=3, N=5, lengths 3, 5 and 1, causal"),
        Case(args=(pad([5, 3], 5), window), hidden=True),
        Case(args=(pad([2, 4], 5), prefix), hidden=True),
    ]


def diagnose_masks(case: Case, expected, got) -> str | None:
    if not isinstance(got, torch.Tensor) or got.dtype != torch.bool or got.shape != expected.shape:
        return None
    key_padding_mask, attn_mask = case.args
    wrongly_allowed = (got & ~expected).nonzero()
    if len(wrongly_allowed):
        b, _head, i, j = (int(v) for v in wrongly_allowed[0])
        if bool(key_padding_mask[b, j]):
            return _("your mask lets sequence {b} attend to key {j}, which is padding "
                     "(PyTorch's key padding mask is True there: ignore it)").format(b=b, j=j)
        return _("your mask lets query {i} attend to key {j}, which PyTorch's attention "
                 "mask forbids (True there means not allowed)").format(i=i, j=j)
    wrongly_forbidden = (expected & ~got).nonzero()
    if len(wrongly_forbidden):
        b, _head, i, j = (int(v) for v in wrongly_forbidden[0])
        return _("your mask forbids query {i} of sequence {b} to attend to key {j}, a real "
                 "key that PyTorch's attention mask allows").format(i=i, b=b, j=j)
    return None


# --------------------------------------------------------------------------- predict
PREDICTION = {"score_flops": "same", "weight_entries": "more", "output": "different"}


# --------------------------------------------------------------------------- derive (GQA)
def gqa_numbers(embed_dim: int, num_heads: int, num_kv_heads: int) -> dict:
    """Parameters of the four projections (with biases), numbers one token adds to one
    layer's KV cache, and the key/value head each query head uses."""
    head_dim = embed_dim // num_heads
    kv_dim = num_kv_heads * head_dim
    group = num_heads // num_kv_heads
    return {
        "parameters": 2 * (embed_dim * embed_dim + embed_dim) + 2 * (embed_dim * kv_dim + kv_dim),
        "cache_per_token": 2 * kv_dim,
        "kv_head": torch.arange(num_heads) // group,
    }


def _gqa(**change):
    def wrong(embed_dim, num_heads, num_kv_heads):
        out = gqa_numbers(embed_dim, num_heads, num_kv_heads)
        head_dim = embed_dim // num_heads
        kv_dim = num_kv_heads * head_dim
        d = embed_dim
        over_groups = d // num_kv_heads  # key/value width embed_dim / num_kv_heads
        values = {
            "kv_over_groups": 2 * (d * d + d) + 2 * (d * over_groups + over_groups),
            "cache_over_groups": 2 * over_groups,
            "queries_cached": 2 * kv_dim + d,
            "full_width": 4 * (d * d + d),
            "no_bias": 2 * d * d + 2 * d * kv_dim,
            "no_out_proj": (d * d + d) + 2 * (d * kv_dim + kv_dim),
            "kv_no_bias": 2 * (d * d + d) + 2 * d * kv_dim,
            "kv_bias_full": 2 * (d * d + d) + 2 * (d * kv_dim + d),
            "keys_only": kv_dim,
            "mha_cache": 2 * d,
            "no_head_dim": 2 * num_kv_heads,
            "bytes": 2 * kv_dim * 4,
            "doubled": 2 * kv_dim * 2,
            "round_robin": torch.arange(num_heads) % num_kv_heads,
            "by_kv_heads": torch.arange(num_heads) // num_kv_heads,
        }
        for key, name in change.items():
            out[key] = values[name]
        return out

    return wrong


def gqa_cases() -> list[Case]:
    return [
        Case(args=(768, 12, 2), label="embed_dim 768, 12 query heads, 2 key/value heads"),
        Case(args=(512, 8, 8), label="8 key/value heads: ordinary multi-head attention"),
        Case(args=(512, 8, 1), label="1 key/value head: multi-query attention"),
        Case(args=(512, 8, 2), hidden=True),
        Case(args=(768, 12, 4), hidden=True),
        Case(args=(96, 6, 3), hidden=True),
        Case(args=(64, 4, 2), hidden=True),
    ]


# --------------------------------------------------------------------------- experiment
def _split_without_transpose(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """The notebook's given ``split_heads_without_transpose``."""
    batch, length, dim = x.shape
    return x.reshape(batch, num_heads, length, dim // num_heads)


def _causal_self_attention(x, weights, num_heads, split):
    """The notebook's given helper: causal multi-head self-attention with ``split``."""
    n = x.shape[1]
    q, k, v = (split(x @ weights[name], num_heads) for name in "qkv")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    attention = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
    heads = attention @ v
    return torch.cat(heads.unbind(1), dim=-1) @ weights["o"]


def measure_dependencies(n: int, num_heads: int, split) -> torch.Tensor:
    embed_dim = 4 * num_heads
    g = torch.Generator().manual_seed(7)
    weights = {name: torch.randn(embed_dim, embed_dim, generator=g, dtype=torch.float64)
               / math.sqrt(embed_dim) for name in "qkvo"}
    x = torch.randn(1, n, embed_dim, generator=g, dtype=torch.float64)
    base = _causal_self_attention(x, weights, num_heads, split)
    depends = torch.zeros(n, n, dtype=torch.bool)
    for j in range(n):
        moved = x.clone()
        moved[0, j] += torch.randn(embed_dim, generator=g, dtype=torch.float64)
        changed = (_causal_self_attention(moved, weights, num_heads, split) - base).abs()
        depends[:, j] = changed[0].amax(dim=-1) > 1e-12
    return depends


def dependency_map(n: int, num_heads: int) -> torch.Tensor:
    """Bool ``(n, n)``: ``[i, j]`` is True when output token i of the causal attention that
    splits without the transpose changes when input token j changes.

    Worked out rather than measured (:func:`measure_dependencies` measures it; the tests
    check that both agree): piece ``m`` of head ``i`` is a slice of token
    ``(i n + m) // h``, and output token ``t`` mixes pieces ``0..t`` of every head.
    """
    depends = torch.zeros(n, n, dtype=torch.bool)
    for t in range(n):
        for head in range(num_heads):
            for m in range(t + 1):
                depends[t, (head * n + m) // num_heads] = True
    return depends


def experiment_cases() -> list[Case]:
    return [
        Case(args=(6, 3), label="N=6 tokens, 3 heads"),
        Case(args=(4, 2), label="N=4 tokens, 2 heads"),
        Case(args=(8, 4), hidden=True),
        Case(args=(7, 2), hidden=True),
        Case(args=(5, 1), hidden=True),
    ]


def diagnose_dependencies(case: Case, expected, got) -> str | None:
    if not isinstance(got, torch.Tensor) or got.dtype != torch.bool or got.shape != expected.shape:
        return None
    missed = (expected & ~got).nonzero()
    if len(missed):
        i, j = (int(v) for v in missed[0])
        return _("entry ({i}, {j}) is False in your map, but output token {i} does change "
                 "when input token {j} changes (is your threshold too large, or the change "
                 "too small?)").format(i=i, j=j)
    extra = (got & ~expected).nonzero()
    if len(extra):
        i, j = (int(v) for v in extra[0])
        return _("entry ({i}, {j}) is True in your map, but output token {i} stays exactly "
                 "the same when only input token {j} changes").format(i=i, j=j)
    return None


def _lower_triangle(n, num_heads):
    return torch.ones(n, n, dtype=torch.bool).tril()


# --------------------------------------------------------------------------- the exercise
EXERCISE = Exercise(
    id=EXERCISE_ID,
    title="Multi-head attention",
    forbidden_imports=("attention_course.multihead", "attention_course.transformer",
                       "attention_course.decoding"),
    questions=(
        Question(
            id="q1_split_heads",
            symbol="split_heads",
            title="Split into heads",
            kind="implement",
            points=1,
            reference=multihead.split_heads,
            cases=split_cases,
            mistakes=mistake_table(_splitting, [
                ("no_transpose", {"how": "no_transpose"},
                 "the shape is right, but tokens and features are mixed up: going "
                 "from (B, N, h d_k) to (B, h, N, d_k) in one step reads the numbers "
                 "in memory order, so head 0 gets the first tokens' features. Cut each "
                 "token's features into h pieces first, then move the head axis in "
                 "front of the token axis"),
                ("interleaved", {"how": "interleaved"},
                 "your head i holds every h-th feature (features i, i + h, i + 2h and "
                 "so on); a head holds one contiguous block of d_k features, head i "
                 "the block that starts at feature i times d_k"),
                ("not_moved", {"how": "not_moved"},
                 "you cut the features into heads but left the head axis behind the "
                 "token axis, (B, N, h, d_k); the heads must come first, "
                 "(B, h, N, d_k), so that every head is a separate batch of matrix "
                 "products"),
                ("transposed_first", {"how": "transposed_first"},
                 "you swapped the token and feature axes before cutting, so each "
                 "'token' of a head is made of one feature of several tokens; cut "
                 "each token's own features into heads"),
                ("last_two_swapped", {"how": "last_two_swapped"},
                 "you swapped the last two axes, which gives (B, N, d_k, h); it is the "
                 "head axis and the token axis that change places, giving "
                 "(B, h, N, d_k)"),
                ("dk_heads", {"how": "dk_heads"},
                 "you made d_k heads of num_heads features each; there are num_heads "
                 "heads, each d_k = features / num_heads wide"),
            ]),
            diagnose=_same_numbers_elsewhere(
                N_("head i, token n must hold features i d_k to (i + 1) d_k - 1 of token n")),
            hint="Head i of token n is a contiguous slice of token n's features; only the "
                 "order of the axes changes, the numbers stay.",
            section="5.2 The shapes, step by step: 我想吃酸菜鱼",
        ),
        Question(
            id="q2_merge_heads",
            symbol="merge_heads",
            title="Concatenate the heads",
            kind="implement",
            points=1,
            reference=multihead.merge_heads,
            cases=merge_cases,
            mistakes=mistake_table(_merging, [
                ("no_transpose", {"how": "no_transpose"},
                 "the shape is right, but features of different tokens are mixed: "
                 "joining (B, h, N, d_k) into (B, N, h d_k) in one step reads the "
                 "numbers in memory order (all of head 0 first). Move the head axis "
                 "back behind the token axis before joining the heads"),
                ("interleaved", {"how": "interleaved"},
                 "your features alternate between the heads (one feature of each head "
                 "in turn); the concatenation puts all of head 0's d_k features first, "
                 "then all of head 1's, and so on"),
                ("sum", {"how": "sum"},
                 "you added the heads up; the heads are concatenated side by side, so "
                 "the result is h times wider than one head"),
                ("mean", {"how": "mean"},
                 "you averaged the heads; the heads are concatenated side by side, so "
                 "the result is h times wider than one head"),
            ]),
            diagnose=_same_numbers_elsewhere(
                N_("token n must hold head 0's d_k features of token n, then head 1's, and so "
                   "on")),
            hint="The inverse of the split: each token gets its heads' features back, "
                 "side by side, head 0 first.",
            section="5.2 The shapes, step by step: 我想吃酸菜鱼",
        ),
        Question(
            id="q3_multihead",
            symbol="MultiHeadAttention",
            title="One multi-head attention forward pass",
            kind="implement",
            call="module",
            points=4,
            reference=MultiHeadAttentionReference,
            cases=mha_cases,
            grad=True,
            builds_on=("q1_split_heads", "q2_merge_heads"),
            mistakes=mistake_table(_variant, [
                ("scale_embed_dim", {"name": "ScaleEmbedDim", "scale": "embed_dim"},
                 "your scores are divided by the square root of embed_dim; each "
                 "head's dot products have only d_k = embed_dim / num_heads terms, so "
                 "divide by the square root of d_k"),
                ("no_scale", {"name": "NoScale", "scale": "none"},
                 "your scores are not scaled: divide each head's dot products by the "
                 "square root of d_k before the softmax"),
                ("scale_not_root", {"name": "ScaleNotRoot", "scale": "d_k_not_root"},
                 "your scores are divided by d_k itself, not by its square root"),
                ("inverted_mask", {"name": "InvertedMask", "mask": "inverted"},
                 "your module blocks exactly the positions the mask allows and lets "
                 "through the ones it forbids (a row where every key is allowed then "
                 "has nothing left, hence the NaN); in this course a boolean mask is "
                 "True where attention is allowed"),
                ("mask_zero", {"name": "MaskZero", "mask": "zero"},
                 "masked keys still get weight: you set their scores to 0, but a "
                 "score of 0 still counts in the softmax. A masked score must be "
                 "minus infinity, so that its weight is exactly 0"),
                ("mask_ignored", {"name": "MaskIgnored", "mask": "ignored"},
                 "your module gives the same result with and without the mask: the "
                 "attention mask is not applied to the scores"),
                ("split_no_transpose", {"name": "SplitNoTranspose", "split": "no_transpose"},
                 "your module gives what a split into heads without the transpose "
                 "gives (tokens and features mixed up): see question 1; the rest of "
                 "your module looks right"),
                ("split_interleaved", {"name": "SplitInterleaved", "split": "interleaved"},
                 "your module gives heads made of every h-th feature instead of "
                 "contiguous blocks: see question 1; the rest of your module looks "
                 "right"),
                ("merge_no_transpose", {"name": "MergeNoTranspose", "merge": "no_transpose"},
                 "your module joins the heads without moving the head axis back behind "
                 "the token axis, which mixes the tokens: see question 2; the rest of "
                 "your module looks right"),
                ("softmax_queries", {"name": "SoftmaxQueries", "softmax_dim": -2},
                 "your weights sum to 1 over the queries (down each column) instead of "
                 "over the keys (along each row): the softmax runs over the keys, the "
                 "last axis of (B, h, Nq, Nk)"),
                ("no_out_proj", {"name": "NoOutProj", "out_proj_used": False},
                 "your weights are right, but the output is the concatenated heads "
                 "without the output projection: apply out_proj, the W^O of the "
                 "chapter, last"),
                ("residual", {"name": "Residual", "residual": True},
                 "you added the query to the output: that residual connection belongs "
                 "to the Transformer layer around the attention (chapter 6), not inside "
                 "multi-head attention"),
                ("averaged_weights", {"name": "Averaged", "average": True},
                 "you hand back the weights averaged over the heads, (B, Nq, Nk); the "
                 "exercise asks for every head's weights, (B, num_heads, Nq, Nk)"),
                ("kv_from_query", {"name": "KVFromQuery", "inputs": "from_query"},
                 "your keys and values are computed from the query: in "
                 "cross-attention they come from the key and value arguments, "
                 "another sequence"),
                ("key_value_swapped", {"name": "KeyValueSwapped", "inputs": "swapped"},
                 "your keys are projected from the value argument and your values "
                 "from the key argument: k_proj reads the keys, v_proj the values"),
            ]),
            diagnose=diagnose_mha,
            hint="Follow the seven steps of section 5.2 (project, split, scaled scores, "
                 "mask, softmax over the keys, weighted values, concatenate and project); a "
                 "boolean mask is True where attention is allowed.",
            section="5.2 The shapes, step by step: 我想吃酸菜鱼",
        ),
        Question(
            id="q4_torch_masks",
            symbol="torch_masks_to_ours",
            title="Debug: from PyTorch's two masks to ours",
            kind="debug",
            points=2,
            reference=torch_masks_to_ours,
            cases=mask_cases,
            mistakes=mistake_table(_masks_variant, [
                ("unchanged", {"padding": "kept", "axis": "queries"},
                 "this is exactly what the broken function gives: both of its bugs "
                 "are still there. Compare, for one padded sequence, which of its "
                 "entries are allowed with which should be"),
                ("padding_not_inverted", {"padding": "kept"},
                 "the padding is on the right axis now, but it still has PyTorch's "
                 "meaning (True = ignore): your mask allows only the padded keys. Ours "
                 "is True where attention is allowed"),
                ("padding_on_queries", {"axis": "queries"},
                 "the padding has the right meaning now, but it masks queries (rows) "
                 "instead of keys (columns): a padded key is a column of the (Nq, Nk) "
                 "mask, the same for every query"),
                ("or_instead_of_and", {"combine": "or"},
                 "you allow a key when it is real OR when the attention mask allows "
                 "it; it must be both: real AND allowed"),
                ("attn_not_inverted", {"attn": "kept"},
                 "the padding is right, but the attention mask keeps PyTorch's "
                 "meaning (True = not allowed): your causal mask lets each query see "
                 "only the future"),
                ("attn_ignored", {"attn": "ignored"},
                 "your mask holds only the padding: PyTorch's attention mask (the "
                 "causal part) must be combined with it, which gives the shape "
                 "(B, 1, Nq, Nk)"),
                ("no_head_axis", {"heads": False},
                 "your mask has no head axis: ours broadcasts to (B, num_heads, Nq, "
                 "Nk), so give it the shape (B, 1, Nq, Nk)"),
            ]),
            diagnose=diagnose_masks,
            hint="Look at one padded sequence and one query: which keys may it see? Both "
                 "PyTorch masks say where NOT to attend; ours says where attention is "
                 "allowed, and a padded key is a column.",
            section="Masks in multi-head attention",
        ),
        prediction(
            id="q5_predict_heads",
            symbol="predict_more_heads",
            title="Predict: from 1 head to 8 heads",
            points=3,
            answer=PREDICTION,
            choices=("more", "same", "fewer", "different"),
            wrong=[
                ("flops_more", "score_flops", "more",
                 "there are 8 score matrices instead of 1, but each comes from dot "
                 "products 8 times shorter (d_k = embed_dim / h): h times d_k stays "
                 "embed_dim, so the multiply-adds do not grow"),
                ("flops_fewer", "score_flops", "fewer",
                 "each head's dot products are shorter, but there are h heads, each "
                 "with its own full Nq by Nk score matrix: the savings and the extra "
                 "heads cancel"),
                ("flops_different", "score_flops", "different",
                 "for a count, answer more, same or fewer"),
                ("weights_same", "weight_entries", "same",
                 "every head has its own Nq by Nk map of weights (the chapter draws "
                 "one heatmap per head), and a map's size does not depend on d_k"),
                ("weights_fewer", "weight_entries", "fewer",
                 "narrower heads give shorter dot products, not smaller maps: each "
                 "of the h heads has a full Nq by Nk map of weights"),
                ("weights_different", "weight_entries", "different",
                 "for the number of weight entries, answer more, same or fewer"),
                ("output_same", "output", "same",
                 "the four weight matrices are the same, but with 8 heads every head "
                 "takes its own softmax over scores made from only d_k features: the "
                 "weights change, and so does the output. The split is not mere "
                 "bookkeeping"),
                ("output_more", "output", "more",
                 "the output has the same shape whatever the number of heads; the "
                 "question is whether its values change: answer same or different"),
                ("output_fewer", "output", "fewer",
                 "the output's shape does not depend on the number of heads; say "
                 "whether its values stay the same or become different"),
            ],
            hint="Write the cost of one head's score matrix with d_k = embed_dim / h, then "
                 "multiply by h; and ask what each head's softmax sees.",
            section="Try it: how many heads?",
        ),
        Question(
            id="q6_gqa",
            symbol="gqa_numbers",
            title="Derive: grouped-query attention",
            kind="derive",
            points=3,
            reference=gqa_numbers,
            cases=gqa_cases,
            parts={"parameters": 1, "cache_per_token": 1, "kv_head": 1},
            mistakes=mistake_table(_gqa, [
                ("full_width", {"parameters": "full_width"},
                 "you counted full-width key and value projections, as in ordinary "
                 "multi-head attention: with fewer key/value heads, k_proj and v_proj "
                 "produce only num_kv_heads times d_k features"),
                ("kv_width_over_groups",
                 {"parameters": "kv_over_groups", "cache_per_token": "cache_over_groups"},
                 "your key and value heads are embed_dim / num_kv_heads wide; every "
                 "head, query or key/value, is d_k = embed_dim / num_heads wide, so "
                 "k_proj and v_proj produce num_kv_heads times d_k features"),
                ("no_bias", {"parameters": "no_bias"},
                 "you counted the weight matrices but not the biases: each of the four "
                 "layers also has one bias per output feature"),
                ("no_out_proj", {"parameters": "no_out_proj"},
                 "you counted three projections; the output projection W^O, "
                 "embed_dim by embed_dim plus its bias, is a parameter too"),
                ("kv_no_bias", {"parameters": "kv_no_bias"},
                 "you counted the biases of the query and output projections but not "
                 "those of the key and value projections"),
                ("kv_bias_full", {"parameters": "kv_bias_full"},
                 "the key and value projections have one bias per output feature, "
                 "num_kv_heads times d_k each, not embed_dim"),
                ("keys_only", {"cache_per_token": "keys_only"},
                 "you counted one tensor per token; the cache keeps both the keys and "
                 "the values"),
                ("queries_cached", {"cache_per_token": "queries_cached"},
                 "you also cached the query; a new token's query is used once, at its "
                 "own step, and only keys and values are kept for later tokens"),
                ("mha_cache", {"cache_per_token": "mha_cache"},
                 "that is the cache of ordinary multi-head attention (one key and one "
                 "value per query head); with grouped-query attention only the "
                 "num_kv_heads shared heads are stored"),
                ("no_head_dim", {"cache_per_token": "no_head_dim"},
                 "each cached head is a vector of d_k numbers, not a single number"),
                ("bytes", {"cache_per_token": "bytes"},
                 "you counted bytes of float32 numbers; the question asks how many "
                 "numbers are stored"),
                ("doubled", {"cache_per_token": "doubled"},
                 "your count is twice the answer: did you count bytes of 16-bit "
                 "numbers, or the keys and the values twice?"),
                ("round_robin", {"kv_head": "round_robin"},
                 "you hand the query heads out in turn (head 0 to group 0, head 1 to "
                 "group 1, and so on); the groups are blocks of consecutive query "
                 "heads"),
                ("by_kv_heads", {"kv_head": "by_kv_heads"},
                 "you divided the head number by the number of key/value heads; "
                 "divide it by the size of a group, num_heads / num_kv_heads query "
                 "heads"),
            ]),
            hint="Count each of the four layers as inputs times outputs plus one bias per "
                 "output; a group is a block of num_heads / num_kv_heads consecutive query "
                 "heads.",
            section="5.1 Why several heads?",
        ),
        Question(
            id="q7_dependency_map",
            symbol="dependency_map",
            title="Experiment: the split mistake breaks the causal mask",
            kind="experiment",
            points=2,
            reference=dependency_map,
            cases=experiment_cases,
            mistakes=(
                Mistake("correct_split", _lower_triangle,
                        "this is the map of a correct split (each output depends on its own "
                        "token and the earlier ones); measure the attention that splits "
                        "without the transpose, the given broken split"),
                Mistake("transposed", lambda n, h: dependency_map(n, h).T,
                        "rows and columns are swapped: entry (i, j) says whether output "
                        "token i changes when input token j changes"),
                Mistake("everything", lambda n, h: torch.ones(n, n, dtype=torch.bool),
                        "every output depends on every input in your map: change one input "
                        "token at a time, and compare each output token with its value "
                        "before the change"),
            ),
            diagnose=diagnose_dependencies,
            hint="Change one input token at a time and see which output tokens move; an "
                 "output that does not depend on a token stays exactly the same.",
            section="Masks in multi-head attention",
        ),
    ),
)
