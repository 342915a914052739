"""The Transformer's layers (Vaswani et al., 2017), block by block, batch-first.

In the order the paper describes them: the sinusoidal positional encoding, the
residual connection with layer normalisation ("add & norm"), the position-wise
feed-forward network, and the encoder and decoder layers and their stacks.
:mod:`attention_course.transformer` builds the whole encoder-decoder model from
them.

Add & norm is **post-norm** as in the paper (``LayerNorm(x + Sublayer(x))``)
unless ``norm_first=True`` asks for pre-norm (``x + Sublayer(LayerNorm(x))``),
the variant most large models use today. Masks follow the course's convention: a
boolean mask is ``True`` where attention is allowed. ``num_kv_heads`` and
``positions`` are handed on to chapter 5's attention; a decoder stack takes a
:class:`StackCache` (chapter 9's
:class:`~attention_course.decoding.DecoderCache` is one).
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_course.multihead import (
    AttentionPositions,
    KeyValueCache,
    MultiHeadAttention,
)

Weights = list[Tensor]


def sinusoidal_positional_encoding(num_positions: int, d_model: int,
                                   base: float = 10000.0) -> Tensor:
    """The table ``PE (num_positions, d_model)`` of sines and cosines.

    ``PE[p, 2i] = sin(p / base^(2i / d_model))`` and
    ``PE[p, 2i + 1] = cos(p / base^(2i / d_model))``; the paper's ``base`` is
    10000. Computed in float64, returned as float32.
    """
    if num_positions < 0 or d_model <= 0:
        raise ValueError(f"need num_positions >= 0 and d_model > 0, got "
                         f"num_positions={num_positions}, d_model={d_model}")
    position = torch.arange(num_positions, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    # (num_positions, ceil(d_model / 2))
    angle = position / base ** (two_i / d_model)
    pe = torch.zeros(num_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.float()


class PositionalEncoding(nn.Module):
    """Add the sinusoidal table to a batch-first input ``(B, N, d_model)``,
    then dropout."""

    def __init__(self, d_model: int, max_len: int, dropout: float = 0.0,
                 base: float = 10000.0) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "pe", sinusoidal_positional_encoding(max_len, d_model, base),
            persistent=False,
        )

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """``x (B, N, d_model)`` at positions ``offset .. offset + N - 1`` ->
        same shape."""
        if (x.dim() != 3 or x.size(-1) != self.pe.size(1) or offset < 0
                or offset + x.size(1) > self.pe.size(0)):
            raise ValueError(f"x must be (B, N, d_model={self.pe.size(1)}) "
                             f"with offset + N <= max_len={self.pe.size(0)}; "
                             f"got shape {tuple(x.shape)}, offset={offset}")
        return self.dropout(x + self.pe[offset: offset + x.size(1)].to(x.dtype))


class PositionWiseFFN(nn.Module):
    """``FFN(x) = W2 ReLU(W1 x + b1) + b2``, the same two layers applied at
    every position."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(F.relu(self.linear1(x))))


class AddNorm(nn.Module):
    """Residual connection and layer normalisation around one sub-layer.

    Post-norm (the paper): ``out = LayerNorm(x + Dropout(Sublayer(x)))``.
    Pre-norm (``norm_first=True``):
    ``out = x + Dropout(Sublayer(LayerNorm(x)))``. Use it in two steps:
    ``y = sublayer(add_norm.sublayer_input(x))``, then ``out = add_norm(x, y)``.
    """

    def __init__(self, d_model: int, dropout: float = 0.0,
                 norm_first: bool = False) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def sublayer_input(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.norm_first else x

    def forward(self, x: Tensor, sublayer_output: Tensor) -> Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer_output)
        return self.norm(x + self.dropout(sublayer_output))


class EncoderLayer(nn.Module):
    """Multi-head self-attention, add & norm, feed-forward network, add & norm.

    ``num_kv_heads`` and ``positions`` (an
    :class:`~attention_course.multihead.AttentionPositions` or ``None``) are
    passed to the self-attention
    (:class:`~attention_course.multihead.MultiHeadAttention`).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int,
                 dropout: float = 0.0, norm_first: bool = False,
                 num_kv_heads: int | None = None,
                 positions: AttentionPositions | None = None) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout,
                                            num_kv_heads=num_kv_heads,
                                            positions=positions)
        self.add_norm1 = AddNorm(d_model, dropout, norm_first)
        self.ffn = PositionWiseFFN(d_model, d_ff, dropout)
        self.add_norm2 = AddNorm(d_model, dropout, norm_first)

    def forward(self, x: Tensor, src_mask: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """``x (B, S, d_model)``, ``src_mask`` broadcastable to
        ``(B, heads, S, S)``.

        Returns the new ``x`` and the self-attention weights
        ``(B, heads, S, S)`` (or None).
        """
        h = self.add_norm1.sublayer_input(x)
        attended, weights = self.self_attn(
            h, h, h, attn_mask=src_mask, need_weights=need_weights
        )
        x = self.add_norm1(x, attended)
        x = self.add_norm2(x, self.ffn(self.add_norm2.sublayer_input(x)))
        return x, weights


class DecoderLayer(nn.Module):
    """Masked (causal) self-attention, cross-attention to the encoder's output,
    FFN; each followed by add & norm.

    ``num_kv_heads`` is passed to both attentions, ``positions`` (an
    :class:`~attention_course.multihead.AttentionPositions` or ``None``) to the
    self-attention only: source and target positions do not compare.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int,
                 dropout: float = 0.0, norm_first: bool = False,
                 num_kv_heads: int | None = None,
                 positions: AttentionPositions | None = None) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout,
                                            num_kv_heads=num_kv_heads,
                                            positions=positions)
        self.add_norm1 = AddNorm(d_model, dropout, norm_first)
        self.cross_attn = MultiHeadAttention(d_model, num_heads,
                                             dropout=dropout,
                                             num_kv_heads=num_kv_heads)
        self.add_norm2 = AddNorm(d_model, dropout, norm_first)
        self.ffn = PositionWiseFFN(d_model, d_ff, dropout)
        self.add_norm3 = AddNorm(d_model, dropout, norm_first)

    def forward(self, y: Tensor, memory: Tensor,
                memory_mask: Tensor | None = None, need_weights: bool = False,
                cache: tuple[KeyValueCache, KeyValueCache] | None = None
                ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """``y (B, T, d_model)`` the target so far, ``memory (B, S, d_model)``
        the encoder's output, ``memory_mask`` broadcastable to
        ``(B, heads, T, S)`` (e.g. source padding).

        Position ``t`` of ``y`` sees only positions ``<= t`` of ``y`` and every
        allowed position of ``memory``. Returns the new ``y``, the
        self-attention weights ``(B, heads, T, T)`` and the cross-attention
        weights ``(B, heads, T, S)`` (or Nones). With ``cache``, a pair of self-
        and cross-attention caches, ``y`` holds only the positions after the
        cached ones and the self-attention weights are
        ``(B, heads, T, cached + T)``.
        """
        self_cache, cross_cache = (None, None) if cache is None else cache
        h = self.add_norm1.sublayer_input(y)
        attended, self_weights = self.self_attn(
            h, h, h, is_causal=True, need_weights=need_weights, cache=self_cache
        )
        y = self.add_norm1(y, attended)
        h = self.add_norm2.sublayer_input(y)
        attended, cross_weights = self.cross_attn(
            h, memory, memory, attn_mask=memory_mask, need_weights=need_weights,
            cache=cross_cache,
        )
        y = self.add_norm2(y, attended)
        y = self.add_norm3(y, self.ffn(self.add_norm3.sublayer_input(y)))
        return y, self_weights, cross_weights


class Encoder(nn.Module):
    """A stack of ``num_layers`` encoder layers
    (plus a final LayerNorm when pre-norm)."""

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int,
                 dropout: float = 0.0, norm_first: bool = False,
                 num_kv_heads: int | None = None,
                 positions: AttentionPositions | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first,
                         num_kv_heads, positions)
            for _ in range(num_layers)
        )
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x: Tensor, src_mask: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Weights]:
        """``x (B, S, d_model)`` ->
        ``(memory (B, S, d_model), [weights per layer])``."""
        weights = []
        for layer in self.layers:
            x, w = layer(x, src_mask, need_weights)
            weights.append(w)
        return self.final_norm(x), weights


class Decoder(nn.Module):
    """A stack of ``num_layers`` decoder layers
    (plus a final LayerNorm when pre-norm)."""

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int,
                 dropout: float = 0.0, norm_first: bool = False,
                 num_kv_heads: int | None = None,
                 positions: AttentionPositions | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first,
                         num_kv_heads, positions)
            for _ in range(num_layers)
        )
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, y: Tensor, memory: Tensor,
                memory_mask: Tensor | None = None, need_weights: bool = False,
                cache: StackCache | None = None
                ) -> tuple[Tensor, Weights, Weights]:
        """``y (B, T, d_model)`` ->
        ``(y, [self weights per layer], [cross weights per layer])``.

        With ``cache``, ``y`` holds the positions after the cached ones.
        """
        self_weights, cross_weights = [], []
        for i, layer in enumerate(self.layers):
            y, w_self, w_cross = layer(
                y, memory, memory_mask, need_weights,
                None if cache is None else cache.layers[i],
            )
            self_weights.append(w_self)
            cross_weights.append(w_cross)
        return self.final_norm(y), self_weights, cross_weights


class StackCache(Protocol):
    """The caches of a decoder stack (chapter 9's
    :class:`~attention_course.decoding.DecoderCache` is one): per layer,
    ``layers[i] = (self-attention cache, cross-attention cache)``, and
    ``len(cache)``, the number of target positions decoded so far."""

    layers: list[tuple[KeyValueCache, KeyValueCache]]

    def __len__(self) -> int:
        ...
