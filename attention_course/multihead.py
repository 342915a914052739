"""Multi-head attention: project, split into heads, attend per head,
concatenate, project.

One module serves self-attention (query, key and value are the same sequence)
and cross-attention (the query comes from one sequence, keys and values from
another). It has two paths that compute the same function:

* the **explicit** path (``need_weights=True``) runs
  :func:`attention_course.masking.scaled_dot_product_attention` and returns the
  attention weights of every head, ``(B, num_heads, Nq, Nk)``, for teaching and
  plots;
* the **fused** path (``need_weights=False``, the default) calls
  :func:`torch.nn.functional.scaled_dot_product_attention`, which never
  materialises the ``(Nq, Nk)`` weight matrix and so needs memory linear in the
  sequence length.

Masks follow the course's single convention: a boolean mask is ``True`` where
attention is *allowed*; a float mask is added to the scores. Shapes are
batch-first.

Part II plugs into this module through three small extension points, which
this module defines and later chapters fill:

* ``num_kv_heads`` gives grouped-query attention (fewer key and value heads than
  query heads, each shared by a group, :func:`share_kv_heads`; ``1`` is
  multi-query attention);
* ``positions``, an :class:`AttentionPositions` object, puts relative positions
  inside attention (chapter 8's RoPE and ALiBi,
  :mod:`attention_course.positions`);
* ``cache``, a :class:`KeyValueCache`, keeps the keys and values of earlier
  calls, for generating one token at a time (chapter 9's
  :class:`~attention_course.decoding.KVCache`).

Section 5.4's experiment (heads that specialise) is in
:mod:`attention_course.experiments.multihead`.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_course.masking import causal_mask, scaled_dot_product_attention


class AttentionPositions(Protocol):
    """Position information inside attention (chapter 8 implements it).

    ``rotate`` turns the queries ``(B, H, Nq, d)`` and keys ``(B, H_kv, Nk, d)``
    of the positions ``start, start + 1, ...`` (RoPE; the identity for schemes
    that do not rotate); ``score_bias`` returns a float ``(num_heads, nq, nk)``
    added to the scores, or ``None`` (ALiBi's distance penalty; ``causal`` and
    ``align`` as in :func:`attention_course.masking.causal_mask`).
    """

    def rotate(self, q: Tensor, k: Tensor, start: int) -> tuple[Tensor, Tensor]:
        ...

    def score_bias(self, num_heads: int, nq: int, nk: int, causal: bool,
                   align: str, device: torch.device) -> Tensor | None:
        ...


class KeyValueCache(Protocol):
    """The keys and values ``(B, H_kv, T, head_dim)`` one attention layer keeps
    from call to call (chapter 9 implements it).

    A growing cache (``static`` false) appends each call's keys and values in
    ``update`` and returns all it holds; a static one (cross-attention) is
    filled once, and ``keys`` / ``values`` are then reused. ``len(cache)`` is
    ``T``.
    """

    static: bool
    keys: Tensor | None
    values: Tensor | None

    def __len__(self) -> int:
        ...

    def update(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        ...


def _sdpa_takes_enable_gqa() -> bool:
    """Whether this PyTorch's fused kernel shares key/value heads itself
    (2.5 and later)."""
    query, key_value = torch.zeros(1, 2, 1, 1), torch.zeros(1, 1, 1, 1)
    try:
        F.scaled_dot_product_attention(query, key_value, key_value,
                                       enable_gqa=True)
    except TypeError:
        return False
    return True


_SDPA_GQA = _sdpa_takes_enable_gqa()


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """``(B, N, num_heads * head_dim)`` -> ``(B, num_heads, N, head_dim)``
    (a view)."""
    batch, length, dim = x.shape
    if dim % num_heads:
        raise ValueError(f"last dimension {dim} of x (shape "
                         f"{tuple(x.shape)}) is not divisible by "
                         f"num_heads={num_heads}")
    head_dim = dim // num_heads
    return x.view(batch, length, num_heads, head_dim).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """``(B, num_heads, N, head_dim)`` -> ``(B, N, num_heads * head_dim)``:
    the concatenation."""
    batch, num_heads, length, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, num_heads * head_dim)


def share_kv_heads(k: Tensor, v: Tensor,
                   num_heads: int) -> tuple[Tensor, Tensor]:
    """Repeat each of the ``H_kv`` key/value heads ``(B, H_kv, Nk, d)`` for its
    group of ``num_heads // H_kv`` query heads: ``(B, num_heads, Nk, d)``
    (query head ``h`` gets key/value head ``h // group``)."""
    group = num_heads // k.size(1)
    if group == 1:
        return k, v
    return (k.repeat_interleave(group, dim=1),
            v.repeat_interleave(group, dim=1))


def fused_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None,
                    is_causal: bool, dropout_p: float) -> Tensor:
    """PyTorch's fused kernel on heads ``q (B, H, Nq, d)``,
    ``k, v (B, H_kv, Nk, d)``: ``(B, H, Nq, d)``; it shares key/value heads
    itself where it can (PyTorch 2.5 and later)."""
    options = dict(attn_mask=attn_mask, is_causal=is_causal,
                   dropout_p=dropout_p)
    if k.size(1) == q.size(1):
        return F.scaled_dot_product_attention(q, k, v, **options)
    if _SDPA_GQA:
        return F.scaled_dot_product_attention(q, k, v, **options,
                                              enable_gqa=True)
    return F.scaled_dot_product_attention(q, *share_kv_heads(k, v, q.size(1)),
                                          **options)


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention (Vaswani et al., 2017).

    ``embed_dim`` is split into ``num_heads`` heads of
    ``embed_dim // num_heads`` dimensions each. ``kdim`` and ``vdim`` are the
    feature sizes of keys and values (default ``embed_dim``), so the module also
    does cross-attention between sequences of different widths. The projections
    are the ``nn.Linear`` submodules ``q_proj``, ``k_proj``, ``v_proj`` and
    ``out_proj``.

    ``num_kv_heads`` (default ``num_heads``) gives grouped-query attention
    (Ainslie et al. 2023): ``k_proj`` and ``v_proj`` produce
    ``num_kv_heads * head_dim`` features, and query head ``h`` uses key/value
    head ``h // (num_heads // num_kv_heads)``; ``num_kv_heads=1`` is multi-query
    attention (Shazeer 2019).

    ``positions`` (an :class:`AttentionPositions`, e.g. chapter 8's
    :class:`~attention_course.positions.Rotary` or
    :class:`~attention_course.positions.ALiBi`) puts relative positions inside
    attention: it rotates queries and keys after the head split and before the
    kernel, or adds a bias to the scores. Queries and keys are at positions
    ``0, 1, ...``, after the cached ones when there is a cache. Meant for
    self-attention.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        num_kv_heads: int | None = None,
        positions: AttentionPositions | None = None,
    ) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be positive, got "
                             f"embed_dim={embed_dim}, num_heads={num_heads}")
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim={embed_dim} is not divisible by "
                             f"num_heads={num_heads}")
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_kv_heads <= 0 or num_heads % num_kv_heads:
            raise ValueError(f"num_kv_heads must be positive and divide "
                             f"num_heads={num_heads} (each key/value head "
                             f"serves a group of query heads), got "
                             f"num_kv_heads={num_kv_heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if positions is not None and not (hasattr(positions, "rotate")
                                          and hasattr(positions, "score_bias")):
            raise ValueError(f"positions must be None or an AttentionPositions "
                             f"object (with rotate and score_bias methods, "
                             f"e.g. attention_course.positions.Rotary()), got "
                             f"{positions!r}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.dropout = dropout
        self.num_kv_heads, self.positions = num_kv_heads, positions
        self.head_dim = embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        kv_dim = num_kv_heads * self.head_dim
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(self.kdim, kv_dim, bias=bias)
        self.v_proj = nn.Linear(self.vdim, kv_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: KeyValueCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``query (B, Nq, embed_dim)`` to ``key (B, Nk, kdim)`` and
        ``value``.

        ``attn_mask`` is broadcastable to ``(B, num_heads, Nq, Nk)``: boolean
        (``True`` = allowed) or float (added to the scores); a key-padding mask
        ``(B, Nk)`` becomes ``mask[:, None, None, :]``. ``is_causal`` lets query
        ``i`` see keys ``j <= i`` only (combined with ``attn_mask`` when both
        are given). Returns the output ``(B, Nq, embed_dim)`` and, when
        ``need_weights``, the weights of every (query) head
        ``(B, num_heads, Nq, Nk)``, else ``None``. Unbatched inputs ``(N, dim)``
        give unbatched results. ``cache``: see :meth:`_heads`.
        """
        if query.dim() == 2 and key.dim() == 2 and value.dim() == 2:
            out, weights = self(query[None], key[None], value[None], attn_mask,
                                is_causal, need_weights, cache)
            return out[0], None if weights is None else weights[0]
        self._check_inputs(query, key, value, is_causal, cache)
        q, k, v = self._heads(query, key, value, cache)  # 1-2: project, split
        mask, causal = self._prepare_mask(attn_mask, is_causal, query,
                                          q.size(-2), k.size(-2), cache)
        dropout = self.dropout if self.training else 0.0
        if need_weights:  # 3-5 step by step: scores, softmax, weighted sum
            out, weights = scaled_dot_product_attention(
                q, *share_kv_heads(k, v, self.num_heads), attn_mask=mask,
                is_causal=causal, dropout_p=dropout)
        else:  # 3-5 in one fused kernel
            out, weights = fused_attention(q, k, v, mask, causal, dropout), None
        return self.out_proj(merge_heads(out)), weights  # 6-7: concat, project

    def _project(self, query: Tensor, key: Tensor,
                 value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The three input projections, split into heads:
        ``q (B, num_heads, Nq, head_dim)``, ``k`` and
        ``v (B, num_kv_heads, Nk, head_dim)``.

        In self-attention (one tensor passed as query, key and value) the three
        projections run as one matrix product, which saves two passes over the
        input.
        """
        if (query is key and key is value
                and self.kdim == self.vdim == self.embed_dim):
            weight = torch.cat([self.q_proj.weight, self.k_proj.weight,
                                self.v_proj.weight])
            bias = None
            if self.q_proj.bias is not None:
                bias = torch.cat([self.q_proj.bias, self.k_proj.bias,
                                  self.v_proj.bias])
            kv_dim = self.num_kv_heads * self.head_dim
            q, k, v = F.linear(query, weight, bias).split(
                [self.embed_dim, kv_dim, kv_dim], -1
            )
        else:
            q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        return (split_heads(q, self.num_heads),
                split_heads(k, self.num_kv_heads),
                split_heads(v, self.num_kv_heads))

    def _heads(self, query: Tensor, key: Tensor, value: Tensor,
               cache: KeyValueCache | None) -> tuple[Tensor, Tensor, Tensor]:
        """Steps 1-2 (:meth:`_project`), then what Part II plugs in: the
        positions rotate queries and keys (RoPE), and the cache adds this
        call's keys and values to those of earlier calls.

        A growing cache (self-attention while generating): the queries, the
        newest positions, attend to all ``Nk`` cached keys; ``is_causal`` then
        aligns bottom-right (a single new query sees every cached key), and the
        positions count from the start of the cache. A static cache
        (cross-attention): the first call stores the projected ``key`` and
        ``value``, later calls reuse them without projecting again.
        """
        if cache is not None and cache.static and len(cache):
            return (split_heads(self.q_proj(query), self.num_heads),
                    cache.keys, cache.values)
        q, k, v = self._project(query, key, value)
        if self.positions is not None:
            start = 0 if cache is None else len(cache)
            q, k = self.positions.rotate(q, k, start)
        if cache is not None:
            k, v = cache.update(k, v)
        return q, k, v

    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor,
                      is_causal: bool, cache: KeyValueCache | None) -> None:
        shapes = (f"query {tuple(query.shape)}, key {tuple(key.shape)}, "
                  f"value {tuple(value.shape)}")
        if not query.dim() == key.dim() == value.dim() == 3:
            raise ValueError(f"query, key and value must all be (B, N, dim) "
                             f"(or all unbatched (N, dim)); got {shapes}")
        if query.size(-1) != self.embed_dim:
            raise ValueError(f"query's last dimension must be "
                             f"embed_dim={self.embed_dim}; got {shapes}")
        if key.size(-1) != self.kdim or value.size(-1) != self.vdim:
            raise ValueError(f"key's last dimension must be kdim={self.kdim} "
                             f"and value's vdim={self.vdim}; got {shapes}")
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(f"key and value must have the same batch size "
                             f"and length; got {shapes}")
        if query.size(0) != key.size(0):
            raise ValueError(f"query and key must have the same batch size; "
                             f"got {shapes}")
        if (cache is not None and cache.static
                and (is_causal or self.positions is not None)):
            raise ValueError("a static cache holds cross-attention keys (the "
                             "encoder memory): it takes neither is_causal nor "
                             "positions")

    def _prepare_mask(self, attn_mask: Tensor | None, is_causal: bool,
                      query: Tensor, nq: int, nk: int,
                      cache: KeyValueCache | None
                      ) -> tuple[Tensor | None, bool]:
        """Check ``attn_mask``; fold ``is_causal`` (aligned bottom-right with a
        cache, top-left without) and the positions' score bias into it.

        Returns the mask for the kernel and whether the kernel should apply its
        own (top-left) causal mask, its fastest way, instead.
        """
        align = "top_left" if cache is None else "bottom_right"
        if attn_mask is not None:
            if (attn_mask.dtype != torch.bool
                    and not attn_mask.is_floating_point()):
                raise ValueError(
                    f"attn_mask must be bool (True = allowed) or float "
                    f"(added to the scores); got dtype {attn_mask.dtype}"
                )
            target = (query.size(0), self.num_heads, nq, nk)
            try:
                if attn_mask.dim() > 4:
                    raise RuntimeError
                torch.broadcast_shapes(attn_mask.shape, target)
            except RuntimeError:
                raise ValueError(
                    f"attn_mask of shape {tuple(attn_mask.shape)} is not "
                    f"broadcastable to (B, num_heads, Nq, Nk) = {target}"
                ) from None
            if attn_mask.is_floating_point():
                attn_mask = attn_mask.to(query.dtype)
        bias = (None if self.positions is None
                else self.positions.score_bias(self.num_heads, nq, nk,
                                               is_causal, align, query.device))
        if bias is not None:
            return _add_to_bias(bias.to(query.dtype), attn_mask), False
        if not is_causal:
            return attn_mask, False
        if attn_mask is None:
            if align == "top_left" or nq == nk:
                return None, True
            if nq == 1:  # a single new query sees every cached key
                return None, False
        causal = causal_mask(nq, nk, device=query.device, align=align)
        if attn_mask is None:
            return causal, False
        if attn_mask.dtype == torch.bool:
            return attn_mask & causal, False
        return _add_to_bias(attn_mask, causal), False


def _add_to_bias(bias: Tensor, mask: Tensor | None) -> Tensor:
    """A float ``bias`` combined with ``mask``: ``-inf`` where a bool mask is
    False, a float mask added; shapes broadcast."""
    if mask is None:
        return bias
    if mask.dtype == torch.bool:
        return torch.where(mask, bias, float("-inf"))
    return bias + mask
