"""Chapter 3: masks, and scaled dot-product attention with masks (Vaswani et
al. 2017).

One convention across the package: a **boolean mask is True where attention
is allowed**, as in
:func:`torch.nn.functional.scaled_dot_product_attention`. (Note that
``torch.nn.MultiheadAttention``'s ``key_padding_mask`` means the opposite.)
A floating mask is *added* to the scores, so ``0`` keeps a position and
``-inf`` removes it.

A masked position always gets weight exactly ``0``, and a query that may
attend to nothing at all (a fully masked row) gets all-zero weights and a
zero output, never ``NaN`` (a plain ``torch.softmax`` over a row of ``-inf``
gives ``NaN``; PyTorch's own ``scaled_dot_product_attention`` gave ``NaN``
there in older releases and zeros in recent ones). Softmaxes of
``float16``/``bfloat16`` scores are computed in ``float32`` and cast back,
so large scores neither overflow nor produce ``NaN``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _softmax_where(
    scores: torch.Tensor, allowed: torch.Tensor | None
) -> torch.Tensor:
    """Softmax over the last dim that gives exactly 0 where ``allowed`` is
    False.

    ``allowed`` is a bool tensor broadcastable to ``scores`` (or None: all
    allowed). A score of ``-inf`` is treated like a masked position; a row
    with nothing left gets all zeros (and zero gradients) instead of
    ``NaN``.
    """
    work = scores.float() if scores.dtype in _LOW_PRECISION else scores
    if allowed is not None:
        work = work.masked_fill(~allowed, float("-inf"))
    row_max = work.amax(dim=-1, keepdim=True).detach()
    row_max = torch.where(
        torch.isfinite(row_max), row_max, torch.zeros_like(row_max)
    )
    exp = torch.exp(work - row_max)  # exp(-inf) = 0 at masked positions
    # >= 1 when any position is left, else 0
    denom = exp.sum(dim=-1, keepdim=True)
    weights = exp / denom.masked_fill(denom == 0, 1.0)
    return weights.to(scores.dtype)


def _as_lengths(
    valid_lens: torch.Tensor | Sequence[int], name: str
) -> torch.Tensor:
    """Check ``valid_lens`` holds whole, non-negative numbers; return an
    int64 tensor."""
    lens = torch.as_tensor(valid_lens)
    if lens.dtype == torch.bool or lens.is_complex():
        raise ValueError(
            f"{name} must hold integer lengths, got dtype {lens.dtype}"
        )
    if lens.is_floating_point():
        if not torch.equal(lens, lens.round()):
            raise ValueError(
                f"{name} must hold whole numbers, got {lens.tolist()}"
            )
        lens = lens.long()
    if (lens < 0).any():
        raise ValueError(
            f"{name} must be non-negative, got {lens.tolist()}"
        )
    return lens.long()


def masked_softmax(
    scores: torch.Tensor,
    valid_lens: torch.Tensor | Sequence[int] | None = None,
) -> torch.Tensor:
    """Softmax over the keys that gives weight exactly 0 at and beyond each
    valid length.

    ``scores`` is ``(B, Nq, Nk)`` (extra dims between ``B`` and ``Nq``, such
    as heads, are allowed). ``valid_lens`` is ``None`` (every key is real),
    ``(B,)`` (one length per sequence, shared by all its queries) or
    ``(B, Nq)`` (one length per query). Key ``j`` of a query with valid
    length ``L`` is kept when ``j < L``. A row with valid length 0 comes
    back as all zeros, never ``NaN``. Returns ``(B, Nq, Nk)``.
    """
    if scores.dim() < 3:
        raise ValueError(
            f"scores must have shape (B, Nq, Nk), got {tuple(scores.shape)}"
        )
    if valid_lens is None:
        return _softmax_where(scores, None)
    lens = _as_lengths(valid_lens, "valid_lens").to(scores.device)
    batch, num_queries, num_keys = (
        scores.shape[0], scores.shape[-2], scores.shape[-1]
    )
    middle = [1] * (scores.dim() - 3)
    if lens.shape == (batch,):
        lens = lens.reshape(batch, *middle, 1, 1)
    elif lens.shape == (batch, num_queries):
        lens = lens.reshape(batch, *middle, num_queries, 1)
    else:
        raise ValueError(
            f"valid_lens must have shape (B,) = ({batch},) or (B, Nq) = "
            f"({batch}, {num_queries}) for scores {tuple(scores.shape)}; "
            f"got {tuple(lens.shape)}"
        )
    allowed = torch.arange(num_keys, device=scores.device) < lens
    return _softmax_where(scores, allowed)


def padding_mask(
    valid_lens: torch.Tensor | Sequence[int], max_len: int
) -> torch.Tensor:
    """Bool ``(B, max_len)``: True on the first ``valid_lens[b]`` (real)
    tokens of row ``b``.

    To use it as an attention mask over the keys, insert the query (and
    head) dims: ``padding_mask(lens, S)[:, None, :]`` is ``(B, 1, S)``,
    broadcast over ``(B, Nq, S)``. A length above ``max_len`` simply marks
    the whole row as real.
    """
    lens = _as_lengths(valid_lens, "valid_lens")
    if lens.dim() != 1:
        raise ValueError(
            f"valid_lens must have shape (B,), got {tuple(lens.shape)}"
        )
    if (isinstance(max_len, bool) or not isinstance(max_len, int)
            or max_len < 0):
        raise ValueError(
            f"max_len must be a non-negative int, got {max_len!r}"
        )
    return torch.arange(max_len, device=lens.device) < lens[:, None]


ALIGNMENTS = ("top_left", "bottom_right")


def query_start(
    n: int, num_keys: int | None = None, align: str = "top_left"
) -> int:
    """Position of query ``0`` among ``num_keys`` keys (default ``n``):
    ``0`` or ``num_keys - n``.

    ``align="top_left"`` (PyTorch's ``is_causal=True``): queries and keys
    both start at position 0. ``align="bottom_right"``: the ``n`` queries
    are the *last* ``n`` of the ``num_keys`` positions, as when new tokens
    attend to a KV cache (PyTorch's ``causal_lower_right``). Query ``i``
    then sits at position ``i + query_start(...)``.
    """
    num_keys = n if num_keys is None else num_keys
    for name, value in (("n", n), ("num_keys", num_keys)):
        if (isinstance(value, bool) or not isinstance(value, int)
                or value < 0):
            raise ValueError(
                f"{name} must be a non-negative int, got {value!r}"
            )
    if align not in ALIGNMENTS:
        raise ValueError(
            f"align must be one of {ALIGNMENTS}, got {align!r}"
        )
    return num_keys - n if align == "bottom_right" else 0


def causal_mask(n: int, num_keys: int | None = None, device=None,
                align: str = "top_left") -> torch.Tensor:
    """Bool look-ahead mask ``(n, num_keys)``: True where query ``i`` may
    attend to key ``j``.

    Query ``i`` sees the keys up to its own position,
    ``j <= i + query_start(n, num_keys, align)``. Without ``num_keys`` the
    mask is ``(n, n)`` with ``j <= i``. With more keys than queries,
    ``align="top_left"`` (the default, as PyTorch's ``is_causal=True``)
    still lets query ``i`` see keys ``0..i``; ``align="bottom_right"`` lets
    it see keys ``j <= i + num_keys - n``, so the last query sees every key:
    what new tokens need when they attend to a KV cache (PyTorch's
    ``causal_lower_right``).
    """
    start = query_start(n, num_keys, align)
    num_keys = n if num_keys is None else num_keys
    ones = torch.ones(n, num_keys, dtype=torch.bool, device=device)
    return ones.tril(start)


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Combine boolean masks (True = allowed) with a logical AND,
    broadcasting their shapes.

    ``None`` entries are skipped; with no mask left the result is ``None``.
    For example, with ``pad = padding_mask(lens, n)``,
    ``combine_masks(pad[:, None, :], causal_mask(n))`` is ``(B, n, n)``.
    """
    present = [m for m in masks if m is not None]
    for m in present:
        if m.dtype != torch.bool:
            raise ValueError(
                f"combine_masks takes bool masks, got dtype {m.dtype}"
            )
    if not present:
        return None
    try:
        shape = torch.broadcast_shapes(*(m.shape for m in present))
    except RuntimeError as err:
        shapes = ", ".join(str(tuple(m.shape)) for m in present)
        raise ValueError(
            f"masks of shapes {shapes} do not broadcast together"
        ) from err
    combined = torch.ones(shape, dtype=torch.bool, device=present[0].device)
    for m in present:
        combined = combined & m
    return combined


def _check_qkv(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
) -> None:
    shapes = (
        f"query {tuple(query.shape)}, key {tuple(key.shape)}, "
        f"value {tuple(value.shape)}"
    )
    if min(query.dim(), key.dim(), value.dim()) < 2:
        raise ValueError(
            f"query, key and value need shape (..., N, d); got {shapes}"
        )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key must share their last dim (d); got {shapes}"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must have the same number of keys (Nk); "
            f"got {shapes}"
        )
    try:
        torch.broadcast_shapes(
            query.shape[:-2], key.shape[:-2], value.shape[:-2]
        )
    except RuntimeError as err:
        raise ValueError(
            f"the leading (batch, head) dims do not broadcast; got {shapes}"
        ) from err


def _check_mask(attn_mask: torch.Tensor, scores_shape: torch.Size) -> None:
    if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
        raise ValueError(
            f"attn_mask must be bool (True = allowed) or floating (added "
            f"to the scores); got dtype {attn_mask.dtype} with shape "
            f"{tuple(attn_mask.shape)}"
        )
    try:
        broadcast = torch.broadcast_shapes(attn_mask.shape, scores_shape)
    except RuntimeError:
        broadcast = None
    if broadcast != scores_shape:
        raise ValueError(
            f"attn_mask of shape {tuple(attn_mask.shape)} does not "
            f"broadcast to the scores' shape (..., Nq, Nk) = "
            f"{tuple(scores_shape)}"
        )


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax(Q K^T / sqrt(d) + mask) V``, returning
    ``(output, weights)``.

    Shapes: ``query (..., Nq, d)``, ``key (..., Nk, d)``,
    ``value (..., Nk, dv)`` with any leading (batch, head) dims that
    broadcast; ``output (..., Nq, dv)``, ``weights (..., Nq, Nk)``.
    ``attn_mask`` broadcasts to ``(..., Nq, Nk)``: a bool mask is True where
    attention is allowed, a floating mask is added to the scores.
    ``is_causal`` lets query ``i`` see keys ``j <= i`` only (the top-left
    alignment of :func:`causal_mask`, as in PyTorch); unlike PyTorch it may
    be combined with ``attn_mask`` (both must then allow a position).
    ``scale`` defaults to ``1/sqrt(d)``. Dropout (``dropout_p > 0``) is
    applied to the weights whenever it is asked for, as in PyTorch (pass
    ``0.0`` in evaluation); the returned weights are the ones used, so
    ``output == weights @ value`` always holds.

    Matches :func:`torch.nn.functional.scaled_dot_product_attention` (which
    returns no weights). Fully masked rows give zero weights and a zero
    output here, in any PyTorch version; PyTorch's own function gives
    ``NaN`` there in older releases.
    """
    _check_qkv(query, key, value)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    low = query.dtype in _LOW_PRECISION
    q, k = (query.float(), key.float()) if low else (query, key)
    scores = q @ k.transpose(-2, -1) * scale
    allowed = None
    if attn_mask is not None:
        _check_mask(attn_mask, scores.shape)
        if attn_mask.dtype == torch.bool:
            allowed = attn_mask
        else:
            scores = scores + attn_mask.to(scores.dtype)
    if is_causal:
        causal = causal_mask(
            scores.shape[-2], scores.shape[-1], device=scores.device
        )
        allowed = combine_masks(allowed, causal)
    weights = _softmax_where(scores, allowed).to(value.dtype)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p, training=True)
    return weights @ value, weights


class OneLayerLM(nn.Module):
    """A language model with one attention layer: at position ``t`` it
    predicts token ``t + 1``.

    Token embeddings plus learned position embeddings, one head of
    :func:`scaled_dot_product_attention` whose keys are masked beyond each
    sequence's valid length, a residual connection, layer norm and a linear
    read-out to the vocabulary. Whether the look-ahead mask is used is
    chosen at every call, so that a model trained without it can be
    evaluated with it (chapter 3 does exactly that).
    """

    def __init__(
        self, vocab_size: int, d_model: int = 32, max_len: int = 64
    ) -> None:
        super().__init__()
        sizes = {"vocab_size": vocab_size, "d_model": d_model,
                 "max_len": max_len}
        for name, value in sizes.items():
            if (isinstance(value, bool) or not isinstance(value, int)
                    or value < 1):
                raise ValueError(
                    f"{name} must be a positive int, got {value!r}"
                )
        self.max_len = max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(max_len, d_model)
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(
        self,
        ids: torch.Tensor,
        valid_lens: torch.Tensor,
        is_causal: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``ids (B, T)`` token ids and ``valid_lens (B,)``, the number of
        real tokens of each row (the keys after them are padding and get
        weight 0). ``is_causal`` adds the look-ahead mask. Returns
        ``logits (B, T, vocab_size)`` and the attention weights
        ``(B, T, T)``.
        """
        if ids.dim() != 2:
            raise ValueError(
                f"ids must have shape (B, T), got {tuple(ids.shape)}"
            )
        batch, length = ids.shape
        if length > self.max_len:
            raise ValueError(
                f"ids has {length} positions, more than max_len = "
                f"{self.max_len}"
            )
        if torch.as_tensor(valid_lens).shape != (batch,):
            raise ValueError(
                f"valid_lens must have shape (B,) = ({batch},), got "
                f"{tuple(torch.as_tensor(valid_lens).shape)}"
            )
        positions = torch.arange(length, device=ids.device)
        x = self.embed(ids) + self.position(positions)
        keys = padding_mask(valid_lens, length).to(ids.device)[:, None, :]
        mixed, weights = scaled_dot_product_attention(
            self.q_proj(x), self.k_proj(x), self.v_proj(x),
            attn_mask=keys, is_causal=is_causal,
        )
        hidden = self.norm(x + self.out_proj(mixed))
        return self.head(hidden), weights
