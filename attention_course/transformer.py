"""The Transformer (Vaswani et al., 2017): the whole encoder-decoder model.

Built from the layers of :mod:`attention_course.transformer_layers` (which this
module re-exports, so that ``attention_course.transformer.Encoder`` and the rest
keep working): scaled token embeddings, the positional encoding, the encoder and
decoder stacks, an output layer tied to the target embedding, training on
targets shifted right, and greedy decoding.

Part II plugs into the same model: position schemes by name (``positional``:
this chapter's sinusoidal table by default, or none; chapter 8's
:mod:`attention_course.positions` registers a learned table, RoPE and ALiBi
with :func:`register_position_scheme`), grouped-query attention
(``num_kv_heads``), and a KV cache for decoding (chapter 9's
:mod:`attention_course.decoding` plugs its cache in with
:func:`register_decoder_cache`; any :class:`StackCache` will do).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_course.multihead import AttentionPositions
from attention_course.transformer_layers import (
    AddNorm,
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    PositionalEncoding,
    PositionWiseFFN,
    StackCache,
    Weights,
    sinusoidal_positional_encoding,
)

__all__ = [
    "POSITION_SCHEMES", "AddNorm", "Decoder", "DecoderLayer", "Encoder",
    "EncoderLayer", "PositionScheme", "PositionWiseFFN", "PositionalEncoding",
    "StackCache", "Transformer", "position_scheme", "register_decoder_cache",
    "register_position_scheme", "sinusoidal_positional_encoding",
    "translation_loss",
]

NextToken = Callable[[Tensor], Tensor]


class PositionScheme(NamedTuple):
    """How positions enter a :class:`Transformer`: ``table(max_len, d_model)``
    makes a module that adds a vector per position to the embeddings (called
    as ``table(x, offset)``), ``in_attention()`` an
    :class:`~attention_course.multihead.AttentionPositions` for every
    self-attention; either may be ``None``."""

    table: Callable[[int, int], nn.Module] | None = None
    in_attention: Callable[[], AttentionPositions] | None = None


POSITION_SCHEMES: dict[str, PositionScheme] = {
    "sinusoidal": PositionScheme(
        table=lambda max_len, d_model: PositionalEncoding(d_model, max_len)),
    "none": PositionScheme(),  # no position information at all (ablations)
}


def register_position_scheme(name: str, scheme: PositionScheme) -> None:
    """Make ``positional=name`` available to :class:`Transformer` (chapter 8
    registers ``"learned"``, ``"rope"`` and ``"alibi"``)."""
    POSITION_SCHEMES[name] = scheme


def position_scheme(name: str) -> PositionScheme:
    """The registered scheme called ``name``; a clear error for others."""
    if name not in POSITION_SCHEMES:
        raise ValueError(
            f"positional must be one of {sorted(POSITION_SCHEMES)}, got "
            f"{name!r} (chapter 8's 'learned', 'rope' and 'alibi' are "
            f"registered when attention_course.positions is imported)")
    return POSITION_SCHEMES[name]


_DECODER_CACHE: list[Callable[[int], StackCache]] = []


def register_decoder_cache(factory: Callable[[int], StackCache]) -> None:
    """Give :meth:`Transformer.new_cache` its cache: ``factory(num_layers)``
    (chapter 9 registers :class:`~attention_course.decoding.DecoderCache`)."""
    _DECODER_CACHE[:] = [factory]


class Transformer(nn.Module):
    """The encoder-decoder Transformer for sequence-to-sequence tasks such as
    translation.

    Token ids equal to ``pad_id`` are padding: no query attends to a padded
    source token. The decoder is causal, so with right-padded targets no real
    position sees padding either. Embeddings are multiplied by ``sqrt(d_model)``
    before the positional encoding is added, and the output layer reuses the
    target embedding matrix (weight tying). ``num_decoder_layers`` defaults to
    ``num_layers``. Sequences are at most ``max_len`` tokens long.

    ``positional`` names how positions enter (:data:`POSITION_SCHEMES`):
    ``"sinusoidal"`` (the default: the paper's table added to the embeddings)
    or ``"none"`` (no position information at all, for ablations); with
    :mod:`attention_course.positions` imported also ``"learned"`` (a trainable
    table), ``"rope"`` or ``"alibi"`` (inside every self-attention, with no
    table added; cross-attention gets none). ``num_kv_heads`` makes every
    attention grouped-query (``1``: multi-query).
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, d_model: int,
                 num_heads: int, num_layers: int, d_ff: int,
                 dropout: float = 0.0, pad_id: int = 0, max_len: int = 256,
                 norm_first: bool = False,
                 num_decoder_layers: int | None = None,
                 positional: str = "sinusoidal",
                 num_kv_heads: int | None = None) -> None:
        super().__init__()
        scheme = position_scheme(positional)
        self.d_model, self.pad_id, self.max_len = d_model, pad_id, max_len
        self.positional = positional
        self.src_embedding = nn.Embedding(src_vocab_size, d_model)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, d_model)
        self.positional_encoding = (None if scheme.table is None
                                    else scheme.table(max_len, d_model))
        self.embedding_dropout = nn.Dropout(dropout)
        positions = (None if scheme.in_attention is None
                     else scheme.in_attention())
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout,
                               norm_first, num_kv_heads, positions)
        self.decoder = Decoder(
            num_layers if num_decoder_layers is None else num_decoder_layers,
            d_model, num_heads, d_ff, dropout, norm_first, num_kv_heads,
            positions,
        )
        self.output = nn.Linear(d_model, tgt_vocab_size)
        # tied: one matrix, used both ways
        self.output.weight = self.tgt_embedding.weight
        for embedding in (self.src_embedding, self.tgt_embedding):
            # unit variance once scaled
            nn.init.normal_(embedding.weight, std=d_model**-0.5)
        nn.init.zeros_(self.output.bias)

    def embed(self, ids: Tensor, embedding: nn.Embedding,
              offset: int = 0) -> Tensor:
        """Token ids ``(B, N)`` -> ``(B, N, d_model)``: look up, scale by
        sqrt(d_model), add the positional table's rows
        ``offset .. offset + N - 1`` (if the scheme has a table), dropout."""
        x = embedding(ids) * math.sqrt(self.d_model)
        if self.positional_encoding is not None:
            x = self.positional_encoding(x, offset)
        return self.embedding_dropout(x)

    def source_mask(self, src_ids: Tensor) -> Tensor:
        """Bool ``(B, 1, 1, S)``, True on real (non-padding) source tokens."""
        return (src_ids != self.pad_id)[:, None, None, :]

    def encode(self, src_ids: Tensor,
               need_weights: bool = False) -> tuple[Tensor, Weights]:
        """``src_ids (B, S)`` ->
        ``(memory (B, S, d_model), [encoder self-attention weights])``."""
        self._check_ids(src_ids, "src_ids")
        return self.encoder(self.embed(src_ids, self.src_embedding),
                            self.source_mask(src_ids), need_weights)

    def new_cache(self) -> StackCache:
        """An empty KV cache for :meth:`decode` (the one chapter 9 registers):
        per decoder layer, a self-attention cache that grows by the new
        positions at every call and a cross-attention cache that holds the
        memory's keys and values, projected at the first call."""
        if not _DECODER_CACHE:
            raise RuntimeError("no KV cache is registered: import "
                               "attention_course.decoding (chapter 9), or "
                               "decode with use_cache=False")
        return _DECODER_CACHE[0](len(self.decoder.layers))

    def decode(self, tgt_ids: Tensor, memory: Tensor, src_ids: Tensor,
               need_weights: bool = False, cache: StackCache | None = None
               ) -> tuple[Tensor, Weights, Weights]:
        """Logits ``(B, T, tgt_vocab_size)`` for decoder input
        ``tgt_ids (B, T)``, and the decoder's self- and cross-attention weights
        per layer.

        With ``cache`` (from :meth:`new_cache`), ``tgt_ids`` holds only the
        tokens after the ``len(cache)`` already decoded (one per step when
        generating): they sit at positions ``len(cache) ..``, attend to
        everything cached, and are cached in turn.
        """
        offset = 0 if cache is None else len(cache)
        self._check_ids(tgt_ids, "tgt_ids", offset)
        y, self_weights, cross_weights = self.decoder(
            self.embed(tgt_ids, self.tgt_embedding, offset), memory,
            self.source_mask(src_ids), need_weights, cache)
        return self.output(y), self_weights, cross_weights

    def forward(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        """``src_ids (B, S)``, ``tgt_ids (B, T)`` (the target shifted right) ->
        logits ``(B, T, tgt_vocab_size)``; position ``t`` predicts target token
        ``t + 1``."""
        if (src_ids.dim() == 2 and tgt_ids.dim() == 2
                and src_ids.size(0) != tgt_ids.size(0)):
            raise ValueError(f"src_ids {tuple(src_ids.shape)} and tgt_ids "
                             f"{tuple(tgt_ids.shape)} must have the same "
                             f"batch size")
        memory, _ = self.encode(src_ids)
        return self.decode(tgt_ids, memory, src_ids)[0]

    def attention_weights(self, src_ids: Tensor,
                          tgt_ids: Tensor) -> dict[str, Tensor]:
        """Every attention map, each ``(num_layers, B, heads, Nq, Nk)``: keys
        ``"encoder_self"``, ``"decoder_self"`` and ``"cross"``."""
        memory, enc = self.encode(src_ids, need_weights=True)
        _, dec_self, cross = self.decode(tgt_ids, memory, src_ids,
                                         need_weights=True)
        return {"encoder_self": torch.stack(enc),
                "decoder_self": torch.stack(dec_self),
                "cross": torch.stack(cross)}

    @torch.no_grad()
    def greedy_decode(self, src_ids: Tensor, bos_id: int, eos_id: int,
                      max_len: int | None = None,
                      use_cache: bool = True) -> Tensor:
        """Translate by taking the most likely next token, one step at a time.

        Returns ``(B, L)`` ids without ``<bos>``: each row ends with ``eos_id``
        (unless ``max_len`` steps ran out) followed by ``pad_id``. The same ids
        with and without the KV cache (see :meth:`generate`).
        """
        return self.generate(src_ids, bos_id, eos_id,
                             lambda logits: logits.argmax(-1),
                             max_len, use_cache)

    @torch.no_grad()
    def generate(self, src_ids: Tensor, bos_id: int, eos_id: int,
                 next_token: NextToken, max_len: int | None = None,
                 use_cache: bool = True) -> Tensor:
        """Generate one token per step; ``next_token`` picks it from the logits
        ``(B, V)``.

        Returns ``(B, L)`` ids without ``<bos>``: each row ends with ``eos_id``
        (unless ``max_len`` steps ran out; at most, and by default,
        ``self.max_len - 1``) followed by ``pad_id``. The encoder runs once.
        Without the cache every step feeds the decoder all tokens so far; with
        it (chapter 9's, registered when :mod:`attention_course.decoding` is
        imported; without it, the same ids the slow way), only the newest
        token, whose keys and values join the cache, while the memory's keys
        and values are projected only once.
        """
        max_len = (self.max_len - 1 if max_len is None
                   else min(max_len, self.max_len - 1))
        memory, _ = self.encode(src_ids)
        cache = self.new_cache() if use_cache and _DECODER_CACHE else None
        ys = torch.full((src_ids.size(0), 1), bos_id, dtype=torch.long,
                        device=src_ids.device)
        done = torch.zeros(src_ids.size(0), dtype=torch.bool,
                           device=src_ids.device)
        for _ in range(max_len):
            logits = self.decode(ys if cache is None else ys[:, -1:], memory,
                                 src_ids, cache=cache)[0][:, -1]
            next_ids = next_token(logits).masked_fill(done, self.pad_id)
            ys = torch.cat([ys, next_ids[:, None]], dim=1)
            done |= next_ids == eos_id
            if done.all():
                break
        return ys[:, 1:]

    def _check_ids(self, ids: Tensor, name: str, offset: int = 0) -> None:
        if (ids.dim() != 2
                or ids.dtype not in (torch.long, torch.int32, torch.int64)):
            raise ValueError(f"{name} must be integer token ids (B, N); got "
                             f"shape {tuple(ids.shape)}, dtype {ids.dtype}")
        if offset + ids.size(1) > self.max_len:
            after = f" after {offset} cached positions" if offset else ""
            raise ValueError(f"{name} has length {ids.size(1)}{after}, more "
                             f"than max_len={self.max_len}")


def translation_loss(model: Transformer, batch) -> Tensor:
    """Cross-entropy of the next-token predictions, padding ignored.

    ``batch`` holds ``src (B, S)``, ``tgt_in (B, T)`` (``<bos>`` + target: the
    target shifted right) and ``tgt_out (B, T)`` (target + ``<eos>``), as made
    by :mod:`attention_course.data.translation`. The decoder reads ``tgt_in``
    and predicts ``tgt_out`` at every position at once; the causal mask keeps it
    from peeking.
    """
    logits = model(batch.src, batch.tgt_in)
    return F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(),
                           ignore_index=model.pad_id)
