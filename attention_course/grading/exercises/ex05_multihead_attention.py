"""Exercise 5: multi-head attention (chapter 5).

The references are the package's own chapter-5 code (``attention_course.multihead``).
"""

from __future__ import annotations

import torch

from attention_course import multihead
from attention_course.grading.compare import rows_sum_to_one
from attention_course.grading.spec import Case, Exercise, Question


class MultiHeadAttentionReference(multihead.MultiHeadAttention):
    """The course's module, called as the exercise asks: ``(query, key, value, attn_mask)``
    -> ``(output, weights)``, always with the per-head weights."""

    def forward(self, query, key, value, attn_mask=None):  # type: ignore[override]
        return super().forward(query, key, value, attn_mask=attn_mask, need_weights=True)


def key_padding_to_attn_mask(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """PyTorch's ``key_padding_mask`` (B, Nk), True = ignore -> ours (B, 1, 1, Nk), True = allow."""
    return (~key_padding_mask)[:, None, None, :]


def split_cases() -> list[Case]:
    g = torch.Generator().manual_seed(501)
    return [
        Case(args=(torch.randn(1, 6, 12, generator=g), 3), label="B=1, N=6, 12 features, 3 heads"),
        Case(args=(torch.randn(2, 4, 8, generator=g), 2), label="B=2, N=4, 8 features, 2 heads"),
        Case(args=(torch.randn(3, 5, 6, generator=g), 1), label="one head"),
    ]


def merge_cases() -> list[Case]:
    g = torch.Generator().manual_seed(502)
    return [
        Case(args=(torch.randn(1, 3, 6, 4, generator=g),), label="B=1, 3 heads, N=6, d_k=4"),
        Case(args=(torch.randn(2, 2, 5, 3, generator=g),), label="B=2, 2 heads, N=5, d_k=3"),
    ]


def _params(embed_dim: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    params = {}
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        params[f"{name}.weight"] = torch.randn(embed_dim, embed_dim, generator=g) / embed_dim**0.5
        params[f"{name}.bias"] = torch.randn(embed_dim, generator=g) * 0.1
    return params


def mha_cases() -> list[Case]:
    g = torch.Generator().manual_seed(503)
    x = torch.randn(2, 5, 8, generator=g)
    real = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    return [
        Case(init_args=(8, 2), params=_params(8, g), args=(x, x, x),
             label="self-attention, B=2, N=5, embed_dim 8, 2 heads"),
        Case(init_args=(12, 3), params=_params(12, g),
             args=(torch.randn(2, 3, 12, generator=g), torch.randn(2, 6, 12, generator=g),
                   torch.randn(2, 6, 12, generator=g)),
             label="cross-attention, Nq=3, Nk=6, 3 heads"),
        Case(init_args=(8, 4), params=_params(8, g), args=(x, x, x), kwargs={"attn_mask": real},
             label="padding mask (B, 1, 1, Nk): sequence 1 has 3 real tokens"),
        Case(init_args=(6, 1), params=_params(6, g),
             args=(torch.randn(1, 4, 6, generator=g),) * 3, label="one head"),
    ]


def padding_conversion_cases() -> list[Case]:
    return [
        Case(args=(torch.tensor([[False, False, True], [False, False, False]]),),
             label="B=2, Nk=3"),
        Case(args=(torch.tensor([[False] * 2 + [True] * 4]),), label="B=1, Nk=6, 4 padded"),
    ]


EXERCISE = Exercise(
    id="05_multihead_attention",
    title="Multi-head attention",
    forbidden_imports=("attention_course.multihead", "attention_course.transformer"),
    questions=(
        Question(
            id="q1_split_heads",
            symbol="split_heads",
            title="Split into heads",
            points=2,
            reference=multihead.split_heads,
            cases=split_cases,
            hint=(
                "(B, N, h * d_k) -> view as (B, N, h, d_k), then move the head axis in front "
                "of the token axis: .transpose(1, 2) gives (B, h, N, d_k). Head i must hold "
                "features i * d_k to (i + 1) * d_k - 1."
            ),
        ),
        Question(
            id="q2_merge_heads",
            symbol="merge_heads",
            title="Concatenate the heads",
            points=1,
            reference=multihead.merge_heads,
            cases=merge_cases,
            hint="The inverse of split_heads: .transpose(1, 2) back to (B, N, h, d_k), "
                 "then .reshape(B, N, h * d_k).",
        ),
        Question(
            id="q3_multihead",
            symbol="MultiHeadAttention",
            call="module",
            title="One multi-head attention forward pass",
            points=4,
            reference=MultiHeadAttentionReference,
            cases=mha_cases,
            diagnose=rows_sum_to_one(
                pick=lambda out: out[1] if isinstance(out, (tuple, list)) and len(out) == 2
                else None,
                what="attention weights"),
            hint=(
                "Project with q_proj, k_proj, v_proj; split each into heads (B, h, N, d_k); "
                "scores = Q K^T / sqrt(d_k) (d_k, not embed_dim); where attn_mask is False "
                "fill -inf; softmax over the keys; heads = weights @ V; merge the heads and "
                "apply out_proj. Return (output, weights) with weights (B, h, Nq, Nk)."
            ),
        ),
        Question(
            id="q4_padding_conversion",
            symbol="key_padding_to_attn_mask",
            title="From PyTorch's key_padding_mask to our mask",
            points=1,
            reference=key_padding_to_attn_mask,
            cases=padding_conversion_cases,
            hint="PyTorch's key_padding_mask is True where a key is IGNORED; ours is True where "
                 "attention is ALLOWED. Invert it and add the head and query axes: "
                 "(~mask)[:, None, None, :].",
        ),
    ),
)
