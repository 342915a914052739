"""Multi-head attention: project, split into heads, attend per head, concatenate, project.

One module serves self-attention (query, key and value are the same sequence) and
cross-attention (the query comes from one sequence, keys and values from another).
It has two paths that compute the same function:

* the **explicit** path (``need_weights=True``) runs
  :func:`attention_course.masking.scaled_dot_product_attention` and returns the
  attention weights of every head, ``(B, num_heads, Nq, Nk)``, for teaching and plots;
* the **fused** path (``need_weights=False``, the default) calls
  :func:`torch.nn.functional.scaled_dot_product_attention`, which never materialises
  the ``(Nq, Nk)`` weight matrix and so needs memory linear in the sequence length.

Masks follow the course's single convention: a boolean mask is ``True`` where attention
is *allowed*; a float mask is added to the scores. Shapes are batch-first.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_course.masking import scaled_dot_product_attention


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """``(B, N, num_heads * head_dim)`` -> ``(B, num_heads, N, head_dim)`` (a view)."""
    batch, length, dim = x.shape
    if dim % num_heads:
        raise ValueError(f"last dimension {dim} of x (shape {tuple(x.shape)}) is not "
                         f"divisible by num_heads={num_heads}")
    return x.view(batch, length, num_heads, dim // num_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """``(B, num_heads, N, head_dim)`` -> ``(B, N, num_heads * head_dim)``: the concatenation."""
    batch, num_heads, length, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, num_heads * head_dim)


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention (Vaswani et al., 2017).

    ``embed_dim`` is split into ``num_heads`` heads of ``embed_dim // num_heads``
    dimensions each. ``kdim`` and ``vdim`` are the feature sizes of keys and values
    (default ``embed_dim``), so the module also does cross-attention between sequences
    of different widths. The projections are the ``nn.Linear`` submodules ``q_proj``,
    ``k_proj``, ``v_proj`` and ``out_proj``.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
    ) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be positive, got "
                             f"embed_dim={embed_dim}, num_heads={num_heads}")
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim={embed_dim} is not divisible by num_heads={num_heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.head_dim = embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(self.kdim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(self.vdim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``query (B, Nq, embed_dim)`` to ``key (B, Nk, kdim)`` and ``value``.

        ``attn_mask`` is broadcastable to ``(B, num_heads, Nq, Nk)``: boolean (``True`` =
        allowed) or float (added to the scores); a key-padding mask ``(B, Nk)`` becomes
        ``mask[:, None, None, :]``. ``is_causal`` lets query ``i`` see keys ``j <= i`` only
        (combined with ``attn_mask`` when both are given). Returns the output
        ``(B, Nq, embed_dim)`` and, when ``need_weights``, the weights of every head
        ``(B, num_heads, Nq, Nk)``, else ``None``. Unbatched inputs ``(N, dim)`` give
        unbatched results.
        """
        if query.dim() == 2 and key.dim() == 2 and value.dim() == 2:
            out, weights = self(query[None], key[None], value[None], attn_mask, is_causal,
                                need_weights)
            return out[0], None if weights is None else weights[0]
        self._check_inputs(query, key, value)
        attn_mask = self._prepare_mask(attn_mask, is_causal, query.size(1), key.size(1), query)
        q, k, v = self._project(query, key, value)
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            out, weights = scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, is_causal=is_causal and attn_mask is None,
                dropout_p=dropout_p)
        else:
            out, weights = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, is_causal=is_causal and attn_mask is None,
                dropout_p=dropout_p), None
        return self.out_proj(merge_heads(out)), weights

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The three input projections, each split into heads ``(B, num_heads, N, head_dim)``.

        In self-attention (one tensor passed as query, key and value) the three
        projections run as one matrix product, which saves two passes over the input.
        """
        if query is key and key is value and self.kdim == self.vdim == self.embed_dim:
            weight = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
            bias = None
            if self.q_proj.bias is not None:
                bias = torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
            batch, length, _ = query.shape
            qkv = F.linear(query, weight, bias).view(batch, length, 3, self.num_heads,
                                                    self.head_dim)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            return q, k, v
        return (split_heads(self.q_proj(query), self.num_heads),
                split_heads(self.k_proj(key), self.num_heads),
                split_heads(self.v_proj(value), self.num_heads))

    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor) -> None:
        shapes = (f"query {tuple(query.shape)}, key {tuple(key.shape)}, "
                  f"value {tuple(value.shape)}")
        if not query.dim() == key.dim() == value.dim() == 3:
            raise ValueError(f"query, key and value must all be (B, N, dim) (or all unbatched "
                             f"(N, dim)); got {shapes}")
        if query.size(-1) != self.embed_dim:
            raise ValueError(f"query's last dimension must be embed_dim={self.embed_dim}; "
                             f"got {shapes}")
        if key.size(-1) != self.kdim or value.size(-1) != self.vdim:
            raise ValueError(f"key's last dimension must be kdim={self.kdim} and value's "
                             f"vdim={self.vdim}; got {shapes}")
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(f"key and value must have the same batch size and length; "
                             f"got {shapes}")
        if query.size(0) != key.size(0):
            raise ValueError(f"query and key must have the same batch size; got {shapes}")

    def _prepare_mask(self, attn_mask: Tensor | None, is_causal: bool, nq: int, nk: int,
                      query: Tensor) -> Tensor | None:
        """Check ``attn_mask`` and fold ``is_causal`` into it when both are given."""
        if attn_mask is None:
            return None
        if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
            raise ValueError(f"attn_mask must be bool (True = allowed) or float (added to the "
                             f"scores); got dtype {attn_mask.dtype}")
        target = (query.size(0), self.num_heads, nq, nk)
        try:
            if attn_mask.dim() > 4:
                raise RuntimeError
            torch.broadcast_shapes(attn_mask.shape, target)
        except RuntimeError:
            raise ValueError(f"attn_mask of shape {tuple(attn_mask.shape)} is not broadcastable "
                             f"to (B, num_heads, Nq, Nk) = {target}") from None
        if attn_mask.is_floating_point():
            attn_mask = attn_mask.to(query.dtype)
        if not is_causal:
            return attn_mask
        causal = torch.ones(nq, nk, dtype=torch.bool, device=query.device).tril()
        if attn_mask.dtype == torch.bool:
            return attn_mask & causal
        return attn_mask.masked_fill(~causal, float("-inf"))
