"""Chapter 10: linear attention (Katharopoulos et al. 2020), the chapter's
approximate answer to attention's quadratic cost.

Replace ``exp(q . k)`` by ``phi(q) . phi(k)`` with a positive feature map
(:func:`elu_feature_map`) and use associativity, ``phi(Q) (phi(K)^T V)``
(:func:`linear_attention`): linear time and memory in ``N``, but a different
function from softmax attention, not the same one computed faster (for that,
see :func:`attention_course.efficient.flash_attention`).

Shapes are batch-first with heads: ``(B, H, N, d)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from attention_course.efficient import _check_count, _check_qkv, _work_dtype
from attention_course.masking import causal_mask


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
