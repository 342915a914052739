"""Chapter 10: efficient attention -- where time and memory go, and how
to save them.

Plain attention ``softmax(Q K^T / sqrt(d)) V`` writes the ``(Nq, Nk)`` matrix of
weights to memory, so its memory grows with ``N^2``. This module holds three
answers:

* **Exact blockwise attention** (the idea of FlashAttention, Dao et al. 2022):
  :func:`flash_attention` walks over the keys one block at a time and keeps, for
  every query row, an *online softmax* state (Milakov & Gimelshein 2018): the
  running maximum ``m``, the running sum ``l = sum_j exp(s_j - m)`` and the
  unnormalised output ``acc = sum_j exp(s_j - m) v_j``, rescaled whenever ``m``
  grows (:func:`online_softmax_update`). It saves only the output and each row's
  log-sum-exp ``L = m + log l`` (:func:`log_sum_exp`); its backward recomputes
  each block's weights from ``L`` (:func:`recompute_probabilities`) instead of
  storing them. The result is exact (equal to
  :func:`torch.nn.functional.scaled_dot_product_attention` up to rounding) and
  memory stays linear in ``N``.
* **Sliding-window attention**: query ``i`` sees only the ``window`` most recent
  keys (:func:`sliding_window_mask`); :func:`flash_attention` skips the blocks
  outside the window, so its time is linear in ``N`` too.
* **Linear attention** (Katharopoulos et al. 2020): replace ``exp(q . k)`` by
  ``phi(q) . phi(k)`` and use associativity, ``phi(Q) (phi(K)^T V)``
  (:func:`linear_attention`): linear time and memory, but a different
  (approximate) function.

Three measuring helpers serve the chapter: :func:`attention_flops` counts the
arithmetic, :func:`attention_bytes` the traffic to and from memory (the two
axes of a roofline), and :func:`peak_memory` measures the memory a call really
needs; :func:`time_round_robin` times calls that take turns, so that their
ratios are fair on a busy machine. :func:`block_schedule` says which blocks of
scores the blockwise computation visits.

Shapes are batch-first with heads: ``(B, H, N, d)``. Masks follow the package's
single convention: ``True`` where attention is allowed.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from attention_course.masking import causal_mask, scaled_dot_product_attention

_LOW_PRECISION = (torch.float16, torch.bfloat16)
_M_MMAP_THRESHOLD = -3  # glibc's mallopt() parameter number


def _check_count(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "positive" if minimum == 1 else "non-negative"
        raise ValueError(f"{name} must be a {kind} int, got {value!r}")


def sliding_window_mask(n: int, window: int, num_keys: int | None = None,
                        device: torch.device | str | None = None) -> Tensor:
    """Bool ``(n, n)``: True where query ``i`` may attend to key ``j``,
    ``i - window < j <= i``.

    Each query sees itself and the ``window - 1`` keys before it (``window=1``:
    only itself; ``window >= n``: the causal mask), the local attention of
    Longformer (Beltagy et al. 2020) and Mistral, in its causal form. With
    ``num_keys`` the mask is ``(n, num_keys)``, aligned at the top-left corner
    like :func:`attention_course.masking.causal_mask`.
    """
    num_keys = n if num_keys is None else num_keys
    _check_count("n", n, 0)
    _check_count("num_keys", num_keys, 0)
    _check_count("window", window, 1)
    return causal_mask(n, num_keys, device=device).triu(1 - window)


# ------------------------------------------------------------------------------
# The pieces of blockwise attention
# ------------------------------------------------------------------------------


def online_softmax_update(
    row_max: Tensor, row_sum: Tensor, acc: Tensor, scores: Tensor, value: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Fold one block of keys into each query row's running softmax state,
    in place.

    The state of a row after the keys seen so far is ``m = max_j s_j``
    (``row_max``, shape ``(BH, Nq)``), ``l = sum_j exp(s_j - m)`` (``row_sum``,
    ``(BH, Nq)``) and ``acc = sum_j exp(s_j - m) v_j`` (``(BH, Nq, dv)``); start
    from ``m = -inf``, ``l = 0``, ``acc = 0``. ``scores (BH, Nq, b)`` are the
    block's scaled scores (``-inf`` where masked) and ``value (BH, b, dv)`` its
    values; ``BH`` is batch and heads in one dim (``x.flatten(0, 1)``). When the
    maximum grows from ``m`` to ``m'``, the old sum and output are rescaled by
    ``exp(m - m')``.

    After the last block ``acc / l`` is ``softmax(all scores) @ V`` and
    :func:`log_sum_exp` gives ``log sum_j exp(s_j)``. The state and ``scores``
    (which ends up holding ``exp(s - m')``) are overwritten; returns
    ``(row_max, row_sum, acc)``.
    """
    new_max = torch.maximum(row_max, scores.amax(dim=-1))
    # A row with no finite score yet keeps m = -inf; subtract 0 there
    # (-inf - -inf is NaN).
    shift = new_max.masked_fill(new_max == float("-inf"), 0.0)
    rescale = torch.exp(row_max - shift)
    probs = scores.sub_(shift.unsqueeze(-1)).exp_()
    row_sum.mul_(rescale).add_(probs.sum(dim=-1))
    # acc += P V, no temporary
    acc.mul_(rescale.unsqueeze(-1)).baddbmm_(probs, value)
    row_max.copy_(new_max)
    return row_max, row_sum, acc


def log_sum_exp(row_max: Tensor, row_sum: Tensor) -> Tensor:
    """``log sum_j exp(s_j) = m + log l`` of each row, from its
    online-softmax state.

    ``row_max`` and ``row_sum`` are ``(..., Nq)``; so is the result. A row that
    saw only masked keys gets ``-inf``. This is the one number per row the
    forward saves.
    """
    return row_max + torch.log(row_sum)


def recompute_probabilities(scores: Tensor, lse: Tensor) -> Tensor:
    """A block's softmax weights ``P = exp(S - L)`` from the row's log-sum-exp,
    in place.

    ``scores (..., Nq, b)`` (scaled, ``-inf`` where masked) and
    ``lse (..., Nq)`` from :func:`log_sum_exp`: each entry is the weight the
    full softmax gives that key, with no need to see the other blocks.
    ``scores`` is overwritten and returned.
    """
    # a fully masked row: weights 0
    shift = lse.masked_fill(lse == float("-inf"), 0.0)
    return scores.sub_(shift.unsqueeze(-1)).exp_()


def softmax_backward(probs: Tensor, grad_probs: Tensor,
                     delta: Tensor) -> Tensor:
    """The gradient of the scores through the softmax, ``dS = P * (dP - D)``,
    in place.

    ``probs`` and ``grad_probs`` (``dP = dO V^T``) are ``(..., Nq, b)``,
    ``delta (..., Nq)`` is ``D_i = sum_j P_ij dP_ij``, which equals
    ``rowsum(dO * O)`` and so needs no full row of ``P``. ``grad_probs`` is
    overwritten and returned.
    """
    return grad_probs.sub_(delta.unsqueeze(-1)).mul_(probs)


def block_schedule(num_queries: int, num_keys: int, block_size: int,
                   is_causal: bool = False, window: int | None = None
                   ) -> list[tuple[slice, slice]]:
    """``(keys, rows)`` of every block of keys some query may see, in order.

    The keys are cut into blocks of ``block_size`` (the last one shorter when
    ``block_size`` does not divide ``num_keys``); ``rows`` is the slice of
    queries that compute scores against that block. Without a mask every query
    sees every block. With ``is_causal`` (top-left aligned) a block starting at
    key ``j0`` is seen only by the rows ``i >= j0``, so the rows above it are
    skipped; with a ``window`` also the rows ``i >= j0 + block_size + window -
    1``, which see none of its keys. Blocks that no query sees are left out.
    """
    _check_count("num_queries", num_queries, 0)
    _check_count("num_keys", num_keys, 0)
    _check_count("block_size", block_size, 1)
    if window is not None:
        _check_count("window", window, 1)
        if not is_causal:
            raise ValueError(f"window={window} needs is_causal=True")
    schedule = []
    for start in range(0, num_keys, block_size):
        stop = min(start + block_size, num_keys)
        first = start if is_causal else 0
        last = (num_queries if window is None
                else min(num_queries, stop + window - 1))
        if first >= last:  # no query sees this block, nor any later one
            break
        schedule.append((slice(start, stop), slice(first, last)))
    return schedule


def _key_blocks(query: Tensor, key: Tensor, is_causal: bool, block_size: int,
                window: int | None) -> Iterator[tuple[slice, slice, Tensor]]:
    """Yield ``(keys, rows, scores)`` for every block of
    :func:`block_schedule`.

    ``query (BH, Nq, d)`` (already scaled) and ``key (BH, Nk, d)``;
    ``scores = query[rows] @ key[keys]^T`` with the masked positions at
    ``-inf``. Near the diagonal the pattern of masked positions is the same for
    every block, so it is built once.
    """
    num_queries, num_keys = query.size(1), key.size(1)
    block_size = min(block_size, num_keys)
    if is_causal:
        near = min(num_queries,
                   block_size + (0 if window is None else window - 1))
        if window is None:
            allowed = causal_mask(near, block_size, device=query.device)
        else:
            allowed = sliding_window_mask(near, window, block_size,
                                          device=query.device)
        blocked = ~allowed
    schedule = block_schedule(num_queries, num_keys, block_size, is_causal,
                              window)
    for keys, rows in schedule:
        scores = query[:, rows] @ key[:, keys].transpose(1, 2)
        if is_causal:
            diagonal = scores[:, : blocked.size(0)]
            diagonal.masked_fill_(
                blocked[: diagonal.size(1), : keys.stop - keys.start],
                float("-inf"))
        yield keys, rows, scores


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    """float16/bfloat16 are computed in float32; float32 and float64 as
    they are."""
    return torch.float32 if dtype in _LOW_PRECISION else dtype


def _heads_flat(x: Tensor) -> Tensor:
    """``(B, H, N, d)`` -> ``(B * H, N, d)`` in the work dtype
    (a view when it can be)."""
    return x.flatten(0, 1).to(_work_dtype(x.dtype))


def flash_attention_forward(query: Tensor, key: Tensor, value: Tensor,
                            is_causal: bool = False, block_size: int = 128,
                            scale: float | None = None,
                            window: int | None = None) -> tuple[Tensor, Tensor]:
    """The blockwise forward: ``(output (B, H, Nq, dv), lse (B, H, Nq))``.

    ``query (B, H, Nq, d)``, ``key (B, H, Nk, d)``, ``value (B, H, Nk, dv)``.
    One pass over the keys, ``block_size`` at a time, with
    :func:`online_softmax_update`; memory beyond the inputs is
    ``O(Nq * block_size)``. ``lse`` is each row's log-sum-exp of the scores
    (:func:`log_sum_exp`), in float32 for half-precision inputs. Arguments are
    those of :func:`flash_attention`, which checks them; call that one.
    """
    batch, heads, num_queries, head_dim = query.shape
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    q, k, v = _heads_flat(query) * scale, _heads_flat(key), _heads_flat(value)
    row_max = q.new_full(q.shape[:2], float("-inf"))
    row_sum = q.new_zeros(q.shape[:2])
    acc = q.new_zeros((*q.shape[:2], v.size(-1)))
    for keys, rows, scores in _key_blocks(q, k, is_causal, block_size, window):
        online_softmax_update(row_max[:, rows], row_sum[:, rows],
                              acc[:, rows], scores, v[:, keys])
    # l >= 1 for every row that saw a key (its maximum contributes exp(0) = 1);
    # a row that saw none (possible with a window) has acc = 0 and gets the
    # output 0.
    out = acc.div_(row_sum.clamp_min(1.0).unsqueeze(-1))
    lse = log_sum_exp(row_max, row_sum)
    return (out.view(batch, heads, num_queries, v.size(-1)).to(query.dtype),
            lse.view(batch, heads, num_queries))


def flash_attention_backward(grad_out: Tensor, query: Tensor, key: Tensor,
                             value: Tensor, out: Tensor, lse: Tensor,
                             is_causal: bool = False, block_size: int = 128,
                             scale: float | None = None,
                             window: int | None = None
                             ) -> tuple[Tensor, Tensor, Tensor]:
    """The blockwise backward: ``(grad_query, grad_key, grad_value)``, shaped
    like the inputs.

    ``grad_out`` and ``out`` are ``(B, H, Nq, dv)``, ``lse (B, H, Nq)`` from
    :func:`flash_attention_forward`. Per block of keys: recompute
    ``P = exp(S - L)`` (:func:`recompute_probabilities`), then ``dV = P^T dO``,
    ``dP = dO V^T``, ``dS = P * (dP - D)`` with ``D = rowsum(dO * O)``
    (:func:`softmax_backward`), ``dQ += scale * dS K`` and
    ``dK = scale * dS^T Q``. Nothing of size ``Nq * Nk`` is kept.
    """
    head_dim = query.size(-1)
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    q, k, v = _heads_flat(query) * scale, _heads_flat(key), _heads_flat(value)
    # The upstream gradient of a sum is an expanded view (every stride 0): the
    # matrix products below would copy it again for every block.
    grad_o = _heads_flat(grad_out).contiguous()
    delta = (grad_o * _heads_flat(out)).sum(dim=-1)
    lse = lse.flatten(0, 1)
    grad_q, grad_k, grad_v = (torch.zeros_like(q), torch.zeros_like(k),
                              torch.zeros_like(v))
    for keys, rows, scores in _key_blocks(q, k, is_causal, block_size, window):
        probs = recompute_probabilities(scores, lse[:, rows])
        grad_v[:, keys] = probs.transpose(1, 2) @ grad_o[:, rows]
        grad_scores = softmax_backward(
            probs, grad_o[:, rows] @ v[:, keys].transpose(1, 2), delta[:, rows]
        )
        grad_q[:, rows].baddbmm_(grad_scores, k[:, keys])
        # q holds scale * Q
        grad_k[:, keys] = grad_scores.transpose(1, 2) @ q[:, rows]
    grad_q.mul_(scale)
    return (grad_q.view(query.shape).to(query.dtype),
            grad_k.view(key.shape).to(key.dtype),
            grad_v.view(value.shape).to(value.dtype))


class FlashAttention(torch.autograd.Function):
    """Exact attention whose backward recomputes the weights: memory linear
    in ``N``.

    The forward saves the inputs, the output and the ``(B, H, Nq)`` log-sum-exp,
    nothing of size ``Nq * Nk``. Call it through :func:`flash_attention`, which
    checks the inputs.
    """

    @staticmethod
    def forward(ctx, query: Tensor, key: Tensor, value: Tensor,
                is_causal: bool, block_size: int, scale: float | None,
                window: int | None) -> Tensor:
        out, lse = flash_attention_forward(query, key, value, is_causal,
                                           block_size, scale, window)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.options = (is_causal, block_size, scale, window)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        grads = flash_attention_backward(grad_out, *ctx.saved_tensors,
                                         *ctx.options)
        return (*grads, None, None, None, None)


def _check_qkv(query: Tensor, key: Tensor, value: Tensor) -> None:
    """Shapes ``(B, H, Nq, d)``, ``(B, H, Nk, d)``, ``(B, H, Nk, dv)``, one
    float dtype."""
    shapes = (f"query {tuple(query.shape)}, key {tuple(key.shape)}, "
              f"value {tuple(value.shape)}")
    if not query.dim() == key.dim() == value.dim() == 4:
        raise ValueError(f"query, key and value must all be (B, H, N, d); "
                         f"got {shapes}")
    if not query.shape[:2] == key.shape[:2] == value.shape[:2]:
        raise ValueError(f"query, key and value must have the same (B, H); "
                         f"got {shapes}")
    if query.size(-1) != key.size(-1):
        raise ValueError(f"query and key must have the same head dim d; "
                         f"got {shapes}")
    if key.size(2) != value.size(2):
        raise ValueError(f"key and value must have the same number of keys "
                         f"Nk; got {shapes}")
    if key.size(2) == 0:
        raise ValueError(f"there must be at least one key; got {shapes}")
    if (not query.dtype == key.dtype == value.dtype
            or not query.is_floating_point()):
        raise ValueError(f"query, key and value must share one floating "
                         f"dtype; got {query.dtype}, {key.dtype}, "
                         f"{value.dtype}")
    if not query.device == key.device == value.device:
        raise ValueError(f"query, key and value must be on one device; got "
                         f"{query.device}, {key.device}, {value.device}")


def flash_attention(query: Tensor, key: Tensor, value: Tensor,
                    is_causal: bool = False, block_size: int = 128,
                    scale: float | None = None,
                    window: int | None = None) -> Tensor:
    """Exact ``softmax(Q K^T * scale) V``, computed block by block: memory
    linear in ``N``.

    ``query (B, H, Nq, d)``, ``key (B, H, Nk, d)``, ``value (B, H, Nk, dv)`` ->
    ``(B, H, Nq, dv)``; ``scale`` defaults to ``1 / sqrt(d)``. The same function
    as :func:`torch.nn.functional.scaled_dot_product_attention` (up to
    rounding), forward and gradients, on any device; float16/bfloat16 inputs are
    computed in float32.

    ``is_causal`` lets query ``i`` see keys ``j <= i``, aligned at the top-left
    corner as in PyTorch when ``Nq != Nk``; blocks of keys that no query sees
    are skipped, which halves the work. ``window`` (needs ``is_causal``) narrows
    that to ``i - window < j <= i`` (:func:`sliding_window_mask`), and the work
    grows linearly in ``N``; a query that sees no key at all
    (``Nq >= Nk + window``) gets the output 0. ``block_size`` keys are processed
    at a time (any ``N`` works; the last block is shorter). A
    :class:`FlashAttention` autograd function: the backward recomputes each
    block's weights from the saved per-row log-sum-exp.
    """
    _check_qkv(query, key, value)
    _check_count("block_size", block_size, 1)
    if window is not None:
        _check_count("window", window, 1)
        if not is_causal:
            raise ValueError(f"window={window} needs is_causal=True: a sliding "
                             f"window lets query i see keys "
                             f"i - window < j <= i")
    return FlashAttention.apply(query, key, value, is_causal, block_size,
                                scale, window)


# ------------------------------------------------------------------------------
# Linear attention
# ------------------------------------------------------------------------------


def elu_feature_map(x: Tensor) -> Tensor:
    """``phi(x) = elu(x) + 1`` (Katharopoulos et al. 2020): positive, so
    ``phi(q) . phi(k) > 0``."""
    return F.elu(x) + 1.0


def linear_attention(query: Tensor, key: Tensor, value: Tensor,
                     is_causal: bool = False,
                     feature_map: Callable[[Tensor], Tensor] = elu_feature_map,
                     chunk_size: int = 64, eps: float = 1e-6) -> Tensor:
    """Linear attention (Katharopoulos et al. 2020): ``exp(q . k)`` replaced by
    ``phi(q) . phi(k)``.

    ``query (B, H, Nq, d)``, ``key (B, H, Nk, d)``, ``value (B, H, Nk, dv)`` ->
    ``(B, H, Nq, dv)``. Output ``i`` is ``phi(q_i)^T S / (phi(q_i)^T z + eps)``
    with ``S = sum_j phi(k_j) v_j^T`` (``(d, dv)``) and ``z = sum_j phi(k_j)``:
    by associativity, ``phi(Q) (phi(K)^T V)`` costs ``O(N d dv)`` instead of
    ``O(N^2 d)``. It equals attention with the weights ``phi(q_i) . phi(k_j)``
    normalised over ``j``, which is not the softmax: an approximation of it, not
    the same function.

    ``is_causal`` (needs ``Nq == Nk``) sums only ``j <= i``: ``S`` and ``z``
    become prefix sums, updated once per chunk of ``chunk_size`` positions
    (within a chunk the masked weights are used directly), so memory stays
    linear in ``N``. float16/bfloat16 inputs are computed in float32.
    """
    _check_qkv(query, key, value)
    _check_count("chunk_size", chunk_size, 1)
    if is_causal and query.size(2) != key.size(2):
        raise ValueError(f"causal linear attention needs as many queries as "
                         f"keys; got Nq={query.size(2)}, Nk={key.size(2)}")
    work = _work_dtype(query.dtype)
    q, k, v = (feature_map(query.to(work)), feature_map(key.to(work)),
               value.to(work))
    if not is_causal:
        # S = sum_j phi(k_j) v_j^T, (B, H, d, dv)
        state = k.transpose(-2, -1) @ v
        # z, (B, H, d, 1)
        normaliser = k.sum(dim=-2, keepdim=True).transpose(-2, -1)
        return ((q @ state) / (q @ normaliser + eps)).to(query.dtype)
    state = q.new_zeros((*q.shape[:2], q.size(-1), v.size(-1)))
    normaliser = q.new_zeros((*q.shape[:2], q.size(-1), 1))
    chunk_size = min(chunk_size, q.size(2))
    within = causal_mask(chunk_size, device=q.device)
    outputs = []
    for start in range(0, q.size(2), chunk_size):
        chunk = slice(start, start + chunk_size)
        qc, kc, vc = q[:, :, chunk], k[:, :, chunk], v[:, :, chunk]
        n = qc.size(2)
        weights = (qc @ kc.transpose(-2, -1)).masked_fill(~within[:n, :n], 0.0)
        numerator = qc @ state + weights @ vc
        denominator = qc @ normaliser + weights.sum(dim=-1, keepdim=True) + eps
        outputs.append(numerator / denominator)
        state = state + kc.transpose(-2, -1) @ vc
        normaliser = normaliser + kc.sum(dim=-2, keepdim=True).transpose(-2, -1)
    return torch.cat(outputs, dim=2).to(query.dtype)


# ------------------------------------------------------------------------------
# Measuring
# ------------------------------------------------------------------------------


def attention_flops(num_queries: int, num_keys: int, head_dim: int,
                    batch: int = 1, heads: int = 1, is_causal: bool = False,
                    window: int | None = None) -> int:
    """Floating-point operations of the two matrix products of attention's
    forward pass.

    ``Q K^T`` and ``P V`` each cost ``2 * head_dim`` operations (a multiply and
    an add) per query-key pair that is computed, so the count is
    ``4 * head_dim * pairs * B * H`` with ``pairs = Nq * Nk``, or only the
    allowed pairs with ``is_causal`` (top-left aligned) and ``window``: what a
    kernel that skips masked blocks must do at least. The softmax adds
    ``O(pairs)``; a recomputing backward does 2.5 times the forward's products
    (five instead of two).
    """
    for name, value in (("num_queries", num_queries), ("num_keys", num_keys),
                        ("head_dim", head_dim), ("batch", batch),
                        ("heads", heads)):
        _check_count(name, value, 0)
    if window is not None:
        _check_count("window", window, 1)
        if not is_causal:
            raise ValueError(f"window={window} needs is_causal=True")
    if is_causal:
        # keys j <= i
        seen = torch.arange(1, num_queries + 1).clamp(max=num_keys)
        if window is not None:
            seen = seen - (
                torch.arange(1, num_queries + 1) - window
            ).clamp(0, num_keys)
        pairs = int(seen.sum())
    else:
        pairs = num_queries * num_keys
    return 4 * head_dim * pairs * batch * heads


def attention_bytes(num_queries: int, num_keys: int, head_dim: int,
                    batch: int = 1, heads: int = 1, tiled: bool = False,
                    block_size: int = 128, element_size: int = 4) -> int:
    """Bytes that attention's forward pass moves between the processor and
    main memory, at least: a model for the roofline.

    Every kernel reads ``Q`` (``Nq x d``), ``K`` and ``V`` (``Nk x d``) and
    writes ``O`` (``Nq x d``). The explicit path also writes the scores
    ``S`` (``Nq x Nk``), reads them back for the softmax, writes the weights
    ``P`` and reads them for ``P V``: ``4 Nq Nk`` more elements. A ``tiled``
    kernel (a fused one, FlashAttention) keeps a block of ``block_size``
    queries and their scores on chip and streams ``K`` and ``V`` past it, so it
    reads ``K`` and ``V`` once per block of queries and never writes ``S`` or
    ``P``. ``element_size`` is 4 for float32. Counts for ``batch * heads``
    heads, without masks.
    """
    for name, value in (("num_queries", num_queries), ("num_keys", num_keys),
                        ("head_dim", head_dim), ("batch", batch),
                        ("heads", heads)):
        _check_count(name, value, 0)
    _check_count("block_size", block_size, 1)
    _check_count("element_size", element_size, 1)
    query_and_output = 2 * num_queries * head_dim
    if tiled:
        query_blocks = -(-num_queries // block_size)  # ceil
        elements = query_and_output + query_blocks * 2 * num_keys * head_dim
    else:
        elements = (query_and_output + 2 * num_keys * head_dim
                    + 4 * num_queries * num_keys)
    return elements * element_size * batch * heads


def time_round_robin(steps: Mapping[str, Callable[[], object]],
                     repeats: int = 5, warmup: int = 1,
                     device: torch.device | str | None = None
                     ) -> dict[str, list[float]]:
    """Seconds each call of each step took, the steps taking turns:
    ``{name: [seconds of round 1, round 2, ...]}``.

    Each of ``repeats`` rounds calls every step once, in an order rotated from
    round to round, so that a machine that speeds up or slows down (a shared
    one) affects every step alike: the ratio of two steps' times *in the same
    round* is a fair comparison, and its median over the rounds a robust one.
    ``warmup`` untimed rounds come first (first calls load kernels and
    allocate). On a CUDA ``device`` each call is synchronised.
    """
    _check_count("repeats", repeats, 1)
    _check_count("warmup", warmup, 0)
    cuda = device is not None and torch.device(device).type == "cuda"

    def call(step: Callable[[], object]) -> float:
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    names = list(steps)
    for _ in range(warmup):
        for name in names:
            call(steps[name])
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        shift = r % max(len(names), 1)
        for name in names[shift:] + names[:shift]:
            times[name].append(call(steps[name]))
    return times


def _resident_kib() -> tuple[int, int]:
    """``(VmRSS, VmHWM)`` from ``/proc/self/status`` in KiB: resident memory now
    and its peak."""
    status = dict(line.split(":", 1)
                  for line in Path("/proc/self/status").read_text().splitlines()
                  if ":" in line)
    return int(status["VmRSS"].split()[0]), int(status["VmHWM"].split()[0])


def peak_memory(fn: Callable[[], object],
                device: torch.device | str = "cpu") -> float:
    """The peak memory, in MiB, that calling ``fn()`` needs on top of what is
    held before.

    On a CUDA device: PyTorch's own count of the peak allocated bytes. On the
    CPU (Linux only): the growth of the process's peak resident set, ``VmHWM``,
    after resetting it to the current size by writing ``5`` to
    ``/proc/self/clear_refs``. glibc's malloc keeps freed blocks below a
    threshold it raises as it goes, which inflates such readings for code that
    allocates many medium blocks (blockwise attention); the first call therefore
    sets that threshold to 128 KiB (``mallopt(M_MMAP_THRESHOLD)``, the same as
    ``MALLOC_MMAP_THRESHOLD_=131072``), so large blocks go back to the system
    when freed, for the rest of the process. That makes the process's later
    work slower (every large block is faulted in page by page again): to time
    code in the same process, measure its memory with :class:`StepMemory`,
    which does it in a process of its own.
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - before) / 2**20
    clear_refs = Path("/proc/self/clear_refs")
    if device.type != "cpu" or not clear_refs.exists():
        raise RuntimeError(f"peak_memory measures CUDA devices, or the CPU on "
                           f"Linux; got device {device}")
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, 131072)
        # free memory kept from earlier work: not resident, not reused free
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: measure as it is
        pass
    clear_refs.write_text("5")
    before, _ = _resident_kib()
    fn()
    return (_resident_kib()[1] - before) / 1024


STEP_PATHS = ("explicit", "blockwise", "fused")


def _attention_step(path: str, n: int, heads: int, head_dim: int,
                    block_size: int, device: torch.device | str
                    ) -> Callable[[], None]:
    """One training step of attention on random ``(1, heads, n, head_dim)``
    inputs: forward, ``.sum().backward()``, gradients dropped."""
    if path not in STEP_PATHS:
        raise ValueError(f"path must be one of {', '.join(STEP_PATHS)}, got "
                         f"{path!r}")
    _check_count("n", n, 1)
    _check_count("block_size", block_size, 1)
    generator = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(1, heads, n, head_dim, device=device,
                           generator=generator, requires_grad=True)
               for _ in range(3))

    def attend() -> Tensor:
        if path == "explicit":
            return scaled_dot_product_attention(q, k, v)[0]
        if path == "blockwise":
            return flash_attention(q, k, v, block_size=block_size)
        return F.scaled_dot_product_attention(q, k, v)

    def step() -> None:
        attend().sum().backward()
        q.grad = k.grad = v.grad = None

    return step


def _serve_step_memory() -> None:
    """The child of :class:`StepMemory`: one request a line on stdin
    (``{"path", "n", "heads", "head_dim", "block_size"}``), one answer a line
    on stdout (``{"mib": ...}`` or ``{"error": ...}``)."""
    # the parent's Ctrl-C (or its kernel's interrupt) is the parent's: this
    # process ends when its stdin closes
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if threads > 0:
        torch.set_num_threads(threads)
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write to the answers
    for path in STEP_PATHS:  # first calls load kernels: not part of a reading
        _attention_step(path, 64, 2, 16, 32, "cpu")()
    print(json.dumps({"ready": True}), file=out, flush=True)
    for line in sys.stdin:
        try:
            request = json.loads(line)
            step = _attention_step(request["path"], request["n"],
                                   request["heads"], request["head_dim"],
                                   request["block_size"], "cpu")
            answer = {"mib": peak_memory(step)}
            del step
        except Exception as error:  # reported to the parent, which raises
            answer = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(answer), file=out, flush=True)


class StepMemory:
    """Peak memory, in MiB, of one training step of attention (forward and
    backward) on random inputs: ``memory(path, n, block_size=128)``.

    ``path`` is ``"explicit"``
    (:func:`attention_course.masking.scaled_dot_product_attention`),
    ``"blockwise"`` (:func:`flash_attention` with ``block_size``) or
    ``"fused"`` (:func:`torch.nn.functional.scaled_dot_product_attention`), on
    inputs ``(1, heads, n, head_dim)`` in float32.

    On a CUDA ``device`` the step runs here and :func:`peak_memory` reads
    PyTorch's count. On the CPU it runs in a Python process of its own, started
    at the first call, with as many threads as this one, that reads the growth
    of its peak resident set (:func:`peak_memory`) with glibc's malloc set to
    give every block of 128 KiB or more pages of its own
    (``MALLOC_MMAP_THRESHOLD_=131072``): set in this process, that would slow
    down everything it times afterwards, since every such block would be
    faulted in page by page again. Use it as a context manager, or
    :meth:`close` it.
    """

    def __init__(self, device: torch.device | str = "cpu", heads: int = 8,
                 head_dim: int = 64) -> None:
        _check_count("heads", heads, 1)
        _check_count("head_dim", head_dim, 1)
        self.device = torch.device(device)
        if self.device.type not in ("cpu", "cuda"):
            raise RuntimeError(f"StepMemory measures CUDA devices, or the CPU "
                               f"on Linux; got device {self.device}")
        self.heads, self.head_dim = heads, head_dim
        self._child: subprocess.Popen | None = None

    def __call__(self, path: str, n: int, block_size: int = 128) -> float:
        if self.device.type == "cuda":
            return peak_memory(_attention_step(path, n, self.heads,
                                               self.head_dim, block_size,
                                               self.device), self.device)
        if path not in STEP_PATHS:
            raise ValueError(f"path must be one of {', '.join(STEP_PATHS)}, "
                             f"got {path!r}")
        child = self._start()
        request = {"path": path, "n": n, "heads": self.heads,
                   "head_dim": self.head_dim, "block_size": block_size}
        child.stdin.write(json.dumps(request) + "\n")
        child.stdin.flush()
        answer = self._read(child)
        if "error" in answer:
            raise RuntimeError(f"StepMemory: {answer['error']}")
        return answer["mib"]

    def _start(self) -> subprocess.Popen:
        if self._child is not None and self._child.poll() is None:
            return self._child
        if not Path("/proc/self/clear_refs").exists():
            raise RuntimeError("StepMemory measures the CPU on Linux only")
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072",
               "OMP_NUM_THREADS": str(torch.get_num_threads())}
        self._child = subprocess.Popen(
            [sys.executable, "-c",
             "from attention_course.efficient import _serve_step_memory; "
             "_serve_step_memory()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self._read(self._child)  # ready
        return self._child

    @staticmethod
    def _read(child: subprocess.Popen) -> dict:
        line = child.stdout.readline()
        if not line:
            raise RuntimeError(f"StepMemory: the measuring process ended "
                               f"(exit status {child.wait()})")
        return json.loads(line)

    def close(self) -> None:
        """End the measuring process, if one runs."""
        if self._child is not None:
            self._child.stdin.close()
            self._child.wait()
            self._child = None

    def __enter__(self) -> StepMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
