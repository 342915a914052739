"""What the unit tests of the chapter modules share: seeded generators, and our multi-head
attention's weights copied into PyTorch's (to compare the two on the same inputs)."""

from __future__ import annotations

import torch
from torch import nn


def seeded(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``."""
    return torch.Generator().manual_seed(seed)


def copy_attention(ours: nn.Module, ref: nn.MultiheadAttention) -> None:
    """Give PyTorch's ``ref`` the weights and biases of our ``MultiHeadAttention``
    ``ours``: its packed input projection (or the three separate ones, when keys or values
    have their own size) and its output projection."""
    with torch.no_grad():
        if ref._qkv_same_embed_dim:
            ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight,
                                                ours.v_proj.weight]))
        else:
            ref.q_proj_weight.copy_(ours.q_proj.weight)
            ref.k_proj_weight.copy_(ours.k_proj.weight)
            ref.v_proj_weight.copy_(ours.v_proj.weight)
        if ref.in_proj_bias is not None:
            ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias,
                                              ours.v_proj.bias]))
            ref.out_proj.bias.copy_(ours.out_proj.bias)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
