"""Chapter 9: generating text. The KV cache, beam search and sampling.

A decoder produces one token per step. Without a cache, step ``t`` runs the whole decoder
over all ``t`` tokens so far, although the keys and values of the earlier ones cannot have
changed (the decoder is causal): the work grows with ``t^2``. A :class:`KVCache` keeps
each attention layer's keys and values, so a step computes the new token's query, key and
value only and attends to everything cached, with the new queries aligned bottom-right
(:func:`attention_course.masking.causal_mask`, ``align="bottom_right"``). Its size,
:func:`kv_cache_bytes_per_token`, is what multi-query and grouped-query attention
(``MultiHeadAttention(..., num_kv_heads=...)``) shrink.

Which token to take next: the most likely one (greedy,
:meth:`attention_course.transformer.Transformer.greedy_decode`), the best of several
hypotheses kept side by side (:func:`beam_search`), or a random draw from a sharpened or
truncated distribution (:func:`sample_next`, :func:`sample_decode`).

The searches need of ``model`` only what :class:`~attention_course.transformer.Transformer`
offers: ``encode(src_ids) -> (memory, ...)``, ``new_cache()`` (an object with
``reorder(index)``), ``decode(tgt_ids, memory, src_ids, cache=cache) -> (logits, ...)``
where ``tgt_ids`` holds the tokens not yet in the cache, ``generate(...)``, ``pad_id`` and
``max_len``.
"""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """The keys and values ``(B, H_kv, T, head_dim)`` of one attention layer, kept across steps.

    ``static=False`` (self-attention): each call appends the new positions' keys and
    values, so ``T`` grows by one per generated token. ``static=True`` (cross-attention to
    the encoder's memory): the first call stores the memory's keys and values, and later
    calls reuse them instead of projecting the memory again.
    """

    def __init__(self, static: bool = False) -> None:
        self.static = static
        self.keys: Tensor | None = None
        self.values: Tensor | None = None

    def __len__(self) -> int:
        """``T``, the number of positions held."""
        return 0 if self.keys is None else self.keys.size(-2)

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``keys`` and ``values`` ``(B, H_kv, t, head_dim)`` of ``t`` new positions.

        Returns everything held, ``(B, H_kv, T + t, head_dim)`` each.
        """
        if self.keys is None or self.values is None:
            self.keys, self.values = keys, values
            return keys, values
        if self.static:
            raise ValueError("a static KVCache is filled once (the encoder memory's keys and "
                             "values); it cannot be appended to")
        for name, held, new in (("keys", self.keys, keys), ("values", self.values, values)):
            if new.dim() != 4 or new.shape[:2] != held.shape[:2] or new.size(3) != held.size(3):
                raise ValueError(f"new {name} of shape {tuple(new.shape)} do not continue the "
                                 f"cached (B, H_kv, T, head_dim) = {tuple(held.shape)}")
        self.keys = torch.cat([self.keys, keys], dim=-2)
        self.values = torch.cat([self.values, values], dim=-2)
        return self.keys, self.values

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (in beam search each new beam continues an old one)."""
        if self.keys is not None and self.values is not None:
            self.keys = self.keys.index_select(0, index)
            self.values = self.values.index_select(0, index)

    @property
    def nbytes(self) -> int:
        """Bytes held by the keys and values."""
        return sum(t.numel() * t.element_size() for t in (self.keys, self.values)
                   if t is not None)


class DecoderCache:
    """The caches of a decoder stack: per layer, ``(self-attention, cross-attention)`` KVCaches.

    ``len(cache)`` is the number of target positions decoded so far (held by the first
    layer's self-attention cache): the position of the next token.
    """

    def __init__(self, num_layers: int) -> None:
        self.layers = [(KVCache(), KVCache(static=True)) for _ in range(num_layers)]

    def __len__(self) -> int:
        return len(self.layers[0][0]) if self.layers else 0

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` in every layer's caches."""
        for self_cache, cross_cache in self.layers:
            self_cache.reorder(index)
            cross_cache.reorder(index)

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for pair in self.layers for c in pair)


def kv_cache_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int,
                             dtype: torch.dtype = torch.float32) -> int:
    """Bytes one more token adds to a self-attention KV cache: ``2 L H_kv d_head`` numbers.

    A key and a value (2) per layer (``num_layers``) and key/value head. Multi-head
    attention has ``num_kv_heads = num_heads``; grouped-query attention fewer; multi-query
    attention 1, so its cache is ``num_heads`` times smaller.
    """
    for name, value in (("num_layers", num_layers), ("num_kv_heads", num_kv_heads),
                        ("head_dim", head_dim)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    return 2 * num_layers * num_kv_heads * head_dim * dtype.itemsize
