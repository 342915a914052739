"""Chapter 8: where am I? Position information, and how far it reaches.

Attention alone does not see order: permute the keys and values together
and every query's output stays the same. A model learns where tokens are in
one of two ways.

* **Absolute** positions are added to the token embeddings: the sinusoidal
  table of Vaswani et al. 2017
  (:func:`attention_course.transformer.sinusoidal_positional_encoding`) or a
  learned table (:class:`LearnedPositionalEmbedding`, Gehring et al. 2017;
  BERT, GPT-2), which has no row for a position beyond ``max_len``.
* **Relative** positions enter attention itself. Rotary embeddings
  (RoPE, Su et al. 2021, :func:`rotary_embedding`) rotate queries and keys so
  that a score ``q . k`` depends on the offset ``p - s`` between their
  positions only. ALiBi (Press et al. 2022, :func:`alibi_bias`) adds
  ``-m_h (i - j)`` to the scores: a linear penalty on distance with one slope
  ``m_h`` per head, and no parameters at all. T5 (Raffel et al. 2020,
  :class:`RelativePositionBias`) learns such a bias instead, one number per
  head and bucket of distances.

The chapter plugs into chapters 5 and 6: :class:`Rotary` and :class:`ALiBi`
are the :class:`~attention_course.multihead.AttentionPositions` that
:class:`~attention_course.multihead.MultiHeadAttention` takes as
``positions``, and importing this module registers ``"learned"``, ``"rope"``
and ``"alibi"`` as :class:`~attention_course.transformer.Transformer`'s
``positional`` schemes, beside chapter 6's ``"sinusoidal"`` and ``"none"``.
Shapes are batch-first; a float bias is added to the scores, ``-inf`` removes
a position.

The experiment of the chapter (length extrapolation) is in
:mod:`attention_course.experiments.positions`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attention_course.masking import query_start
from attention_course.transformer import (
    PositionScheme,
    register_position_scheme,
)


def rotary_embedding(x: Tensor, positions: Tensor | None = None,
                     base: float = 10000.0) -> Tensor:
    """Rotate ``x (..., N, d)`` pair by pair by angles that grow with the
    position (RoPE).

    Features are paired as **adjacent pairs** ``(x[2i], x[2i+1])``,
    ``i = 0 .. d/2 - 1``, as in the derivation of Su et al., where pair
    ``i`` is the complex number ``x[2i] + 1j * x[2i+1]``; the pair at
    position ``p`` is turned by the angle ``p * theta_i`` with
    ``theta_i = base^(-2i/d)``::

        out[2i]     = x[2i] cos(p theta_i) - x[2i+1] sin(p theta_i)
        out[2i + 1] = x[2i] sin(p theta_i) + x[2i+1] cos(p theta_i)

    (Many code bases pair ``x[i]`` with ``x[i + d/2]`` instead, "rotate
    half": the same rotations of permuted features, so weights do not carry
    over between the two.)

    ``positions`` defaults to ``0 .. N-1``; otherwise a tensor (integer or
    float) broadcastable to ``x.shape[:-1]``, e.g. ``(N,)`` or
    ``(B, 1, N)`` for per-sequence positions. Position 0 is the identity,
    norms are kept, and since rotations compose,
    ``<R_p q, R_s k> = <q, R_(s-p) k>`` depends only on ``p - s``.
    Computed in float32 (or float64 for float64 input) and returned in
    ``x``'s dtype and shape.
    """
    if x.dim() < 2 or x.size(-1) % 2:
        raise ValueError(f"x must be (..., N, d) with an even d; got shape "
                         f"{tuple(x.shape)}")
    length, dim = x.shape[-2], x.shape[-1]
    work = torch.promote_types(x.dtype, torch.float32)
    if positions is None:
        positions = torch.arange(length, device=x.device)
    else:
        try:
            fits = (torch.broadcast_shapes(positions.shape, x.shape[:-1])
                    == x.shape[:-1])
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(f"positions of shape "
                             f"{tuple(positions.shape)} do not broadcast to "
                             f"x.shape[:-1] = {tuple(x.shape[:-1])}")
    # (d/2,)
    theta = base ** (
        -torch.arange(0, dim, 2, device=x.device, dtype=work) / dim
    )
    # (..., N, d/2)
    angle = positions.to(device=x.device, dtype=work)[..., None] * theta
    cos, sin = angle.cos(), angle.sin()
    # x[..., 0::2], x[..., 1::2]
    even, odd = x.to(work).unflatten(-1, (dim // 2, 2)).unbind(-1)
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos],
                          dim=-1)
    return rotated.flatten(-2).to(x.dtype)


def relative_distances(n: int, num_keys: int | None = None,
                       align: str = "top_left", device=None) -> Tensor:
    """Long ``(n, num_keys)``: query position minus key position, ``i - j``
    for keys behind.

    ``num_keys`` defaults to ``n``; ``align`` places the queries among the
    keys as :func:`attention_course.masking.causal_mask` does
    (``"bottom_right"``: the queries are the last ``n`` positions, so query
    ``i`` is at ``i + num_keys - n``).
    """
    start = query_start(n, num_keys, align)
    num_keys = n if num_keys is None else num_keys
    return (torch.arange(n, device=device)[:, None] + start
            - torch.arange(num_keys, device=device))


def alibi_slopes(num_heads: int) -> Tensor:
    """ALiBi's slopes ``m_h = 2^(-8h / num_heads)``, ``h = 1..num_heads``:
    float32 ``(num_heads,)``.

    For 8 heads: ``1/2, 1/4, ..., 1/256``, a geometric sequence from
    ``2^(-8/H)`` to ``2^(-8)``. (Press et al. use this formula for powers of
    two and, for other head counts, interleave two such sequences; the course
    uses the formula for every count.)
    """
    if (isinstance(num_heads, bool) or not isinstance(num_heads, int)
            or num_heads <= 0):
        raise ValueError(f"num_heads must be a positive int, "
                         f"got {num_heads!r}")
    h = torch.arange(1, num_heads + 1, dtype=torch.float64)
    return (2.0 ** (-8.0 * h / num_heads)).float()


def alibi_bias(num_heads: int, n: int, num_keys: int | None = None,
               causal: bool = True, align: str = "top_left",
               device=None) -> Tensor:
    """The ALiBi bias added to the scores: float
    ``(num_heads, n, num_keys)``.

    ``bias[h, i, j] = -m_h * (i - j)`` for keys at or before the query
    (``j <= i``), with the slopes ``m_h`` of :func:`alibi_slopes`: the
    further back a key, the lower its score, in every head at its own rate.
    For keys *after* the query (``j > i``): ``causal=True`` gives ``-inf``,
    the look-ahead mask of a decoder (as ALiBi was introduced, for language
    models); ``causal=False`` gives ``-m_h * (j - i)``, the symmetric bias
    ``-m_h |i - j|`` of a bidirectional encoder.

    ``num_keys`` defaults to ``n``. With a different number of keys,
    ``align`` places the queries as
    :func:`attention_course.masking.causal_mask` does: ``"top_left"`` (query
    ``i`` at position ``i``) or ``"bottom_right"`` (the queries are the last
    ``n`` of ``num_keys`` positions, as new tokens attending to a KV cache).
    """
    distance = relative_distances(n, num_keys, align, device)
    slopes = alibi_slopes(num_heads).to(device)
    bias = -slopes[:, None, None] * distance.abs()
    if causal:
        bias = bias.masked_fill(distance < 0, float("-inf"))
    return bias


class LearnedPositionalEmbedding(nn.Module):
    """Add a trainable table ``(max_len, d_model)``, a vector per position,
    to ``(B, N, d_model)``.

    Unlike the sinusoidal table, a learned one has nothing to say about
    positions it never saw: position ``max_len`` and beyond have no row, and
    asking for them is an error; rows below ``max_len`` that no training
    sequence reached keep their random start. Rows start as
    ``N(0, 0.02^2)`` (as in BERT and GPT-2).
    """

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.table = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """``x (B, N, d_model)`` at positions ``offset .. offset + N - 1`` ->
        same shape."""
        d_model = self.table.embedding_dim
        if x.dim() != 3 or x.size(-1) != d_model:
            raise ValueError(f"x must be (B, N, d_model={d_model}); got "
                             f"shape {tuple(x.shape)}")
        last = offset + x.size(1) - 1
        if offset < 0 or last >= self.max_len:
            raise ValueError(f"a learned table has rows for positions "
                             f"0..{self.max_len - 1} only "
                             f"(max_len={self.max_len}); got positions "
                             f"{offset}..{last} (x of shape "
                             f"{tuple(x.shape)}, offset={offset})")
        positions = torch.arange(offset, offset + x.size(1), device=x.device)
        return x + self.table(positions).to(x.dtype)


def relative_position_bucket(distance: Tensor, num_buckets: int = 32,
                             max_distance: int = 128,
                             bidirectional: bool = True) -> Tensor:
    """T5's buckets for ``distance`` = query position - key position
    (Raffel et al. 2020).

    Near distances get a bucket each; from ``num_buckets // 2`` (half of the
    buckets for one direction) on, buckets widen logarithmically up to
    ``max_distance``, and all further distances share the last bucket.
    ``bidirectional=True`` splits the buckets between keys behind the query
    (``distance >= 0``) and keys ahead of it; ``bidirectional=False`` (a
    decoder) puts every key ahead in bucket 0. Same shape, long.
    """
    buckets = torch.zeros_like(distance)
    if bidirectional:
        num_buckets //= 2
        buckets = (distance < 0).long() * num_buckets
        distance = distance.abs()
    else:
        distance = distance.clamp(min=0)
    exact = num_buckets // 2
    far = exact + (torch.log(distance.float().clamp(min=1) / exact)
                   / math.log(max_distance / exact)
                   * (num_buckets - exact)).long()
    far = far.clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < exact, distance, far)


class RelativePositionBias(nn.Module):
    """T5's learned relative position bias: one number per head and
    distance bucket.

    Called as ``bias(n, num_keys=None, align="top_left")`` it returns the
    float ``(num_heads, n, num_keys)`` to add to the scores (pass it as a
    float ``attn_mask``): ``table[bucket(i - j), h]`` with the buckets of
    :func:`relative_position_bucket`. Like ALiBi it depends on distances
    only, but it learns how much each distance matters; the table starts at
    zero (no preference).
    """

    def __init__(self, num_heads: int, num_buckets: int = 32,
                 max_distance: int = 128,
                 bidirectional: bool = True) -> None:
        super().__init__()
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.bidirectional = bidirectional
        self.table = nn.Embedding(num_buckets, num_heads)
        nn.init.zeros_(self.table.weight)

    def forward(self, n: int, num_keys: int | None = None,
                align: str = "top_left") -> Tensor:
        distance = relative_distances(n, num_keys, align,
                                      self.table.weight.device)
        buckets = relative_position_bucket(distance, self.num_buckets,
                                           self.max_distance,
                                           self.bidirectional)
        # (n, num_keys, heads) -> (heads, n, keys)
        return self.table(buckets).permute(2, 0, 1)


class Rotary:
    """RoPE inside attention: rotates the queries and keys of every head by
    :func:`rotary_embedding` with ``base``, at positions ``start, start + 1,
    ...`` (after the cached ones when generating); adds no score bias."""

    def __init__(self, base: float = 10000.0) -> None:
        self.base = base

    def rotate(self, q: Tensor, k: Tensor, start: int) -> tuple[Tensor, Tensor]:
        """``q (B, H, Nq, d)``, ``k (B, H_kv, Nk, d)`` -> the same, rotated."""
        return (rotary_embedding(q, torch.arange(start, start + q.size(-2),
                                                 device=q.device), self.base),
                rotary_embedding(k, torch.arange(start, start + k.size(-2),
                                                 device=k.device), self.base))

    def score_bias(self, num_heads: int, nq: int, nk: int, causal: bool,
                   align: str, device: torch.device) -> None:
        return None

    def __repr__(self) -> str:
        return f"Rotary(base={self.base:g})"


class ALiBi:
    """ALiBi inside attention: adds :func:`alibi_bias` to the scores (causal
    when the attention is, symmetric when not); rotates nothing."""

    def rotate(self, q: Tensor, k: Tensor, start: int) -> tuple[Tensor, Tensor]:
        return q, k

    def score_bias(self, num_heads: int, nq: int, nk: int, causal: bool,
                   align: str, device: torch.device) -> Tensor:
        """Float ``(num_heads, nq, nk)``."""
        return alibi_bias(num_heads, nq, nk, causal=causal, align=align,
                          device=device)

    def __repr__(self) -> str:
        return "ALiBi()"


register_position_scheme("learned",
                         PositionScheme(table=LearnedPositionalEmbedding))
register_position_scheme("rope", PositionScheme(in_attention=Rotary))
register_position_scheme("alibi", PositionScheme(in_attention=ALiBi))
