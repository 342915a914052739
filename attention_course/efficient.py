"""Chapter 10: efficient attention -- exact blockwise attention and its
sliding window.

Plain attention ``softmax(Q K^T / sqrt(d)) V`` writes the ``(Nq, Nk)`` matrix of
weights to memory, so its memory grows with ``N^2``. This module holds the
exact answers:

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
  memory stays linear in ``N``. :func:`block_schedule` says which blocks of
  scores the blockwise computation visits.
* **Sliding-window attention**: query ``i`` sees only the ``window`` most recent
  keys (:func:`sliding_window_mask`); :func:`flash_attention` skips the blocks
  outside the window, so its time is linear in ``N`` too.

The chapter's third answer, linear attention (Katharopoulos et al. 2020), an
approximation, is in :mod:`attention_course.linear_attention`; what the
chapter measures (the arithmetic and memory traffic of a roofline, timings,
peak memory) is in :mod:`attention_course.experiments.efficient`.

Shapes are batch-first with heads: ``(B, H, N, d)``. Masks follow the package's
single convention: ``True`` where attention is allowed.
"""
from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from attention_course.masking import causal_mask

_LOW_PRECISION = (torch.float16, torch.bfloat16)


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
