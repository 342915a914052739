"""Exercise 3: masks (chapter 3).

The references are the package's own chapter-3 code (``attention_course.masking``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from attention_course import masking
from attention_course.grading.spec import Case, Exercise, Question


def _masked_positions_get_zero(
    pick: Callable[[Any], Any] = lambda out: out,
) -> Callable[[Any, Any, Any], str | None]:
    """A ``diagnose`` hook: name the first masked position that got weight, or a bad row sum."""

    def diagnose(case: Any, expected: Any, got: Any) -> str | None:
        want, weights = pick(expected), pick(got)
        if not isinstance(weights, torch.Tensor) or not isinstance(want, torch.Tensor):
            return None
        if weights.shape != want.shape or weights.numel() == 0:
            return None
        w, e = weights.detach().double(), want.double()
        leak = (e == 0) & (w.abs() > 1e-6)
        if bool(leak.any()):
            where = tuple(int(i) for i in leak.nonzero()[0])
            return (
                f"the weights at index {where} should be exactly 0 (a masked position), "
                f"got {w[where].item():.3g}: a masked key must get no weight at all"
            )
        sums, want_sums = w.sum(-1).reshape(-1), e.sum(-1).reshape(-1)
        bad = (sums - want_sums).abs() > 1e-3
        if bool(bad.any()):
            row = int(bad.nonzero()[0])
            return (
                f"row {row} of the weights sums to {sums[row].item():.3g} instead of "
                f"{want_sums[row].item():.3g}: allowed keys share a weight of 1, and a row "
                f"with no allowed key is all zeros"
            )
        return None

    return diagnose


def masked_softmax_cases() -> list[Case]:
    g = torch.Generator().manual_seed(301)
    return [
        Case(
            args=(torch.randn(2, 3, 5, generator=g), torch.tensor([2, 5])),
            label="valid_lens (B,) = [2, 5]",
        ),
        Case(
            args=(torch.randn(2, 2, 4, generator=g) * 5, torch.tensor([[1, 3], [4, 2]])),
            label="valid_lens (B, Nq) = [[1, 3], [4, 2]]",
        ),
        Case(
            args=(torch.randn(3, 2, 6, generator=g), torch.tensor([0, 6, 1])),
            label="valid_lens [0, 6, 1]: a sequence with no valid key",
        ),
        Case(args=(torch.randn(1, 4, 3, generator=g), None), label="valid_lens None"),
    ]


def causal_cases() -> list[Case]:
    return [Case(args=(n,), label=f"n = {n}") for n in (1, 4, 7)]


def padding_cases() -> list[Case]:
    return [
        Case(args=(torch.tensor([3, 1, 5]), 5), label="valid_lens [3, 1, 5], max_len 5"),
        Case(args=(torch.tensor([0, 2]), 4), label="valid_lens [0, 2], max_len 4"),
        Case(args=(torch.tensor([6]), 6), label="valid_lens [6], max_len 6"),
    ]


def attention_cases() -> list[Case]:
    g = torch.Generator().manual_seed(302)

    def qkv(*lead, nq, nk, d=8, dv=4):
        return (
            torch.randn(*lead, nq, d, generator=g),
            torch.randn(*lead, nk, d, generator=g),
            torch.randn(*lead, nk, dv, generator=g),
        )

    pad = torch.tensor([[True] * 5 + [False] * 2, [True] * 7])[:, None, :]  # (2, 1, 7)
    heads_pad = torch.tensor([[True] * 3 + [False] * 3, [True] * 6])[:, None, None, :]
    empty = torch.ones(2, 4, 5, dtype=torch.bool)
    empty[1, 2] = False
    return [
        Case(args=qkv(2, nq=3, nk=5), label="no mask"),
        Case(args=qkv(2, nq=4, nk=7), kwargs={"attn_mask": pad}, label="padding mask (B, 1, Nk)"),
        Case(args=qkv(2, 3, nq=6, nk=6), kwargs={"is_causal": True}, label="causal, with heads"),
        Case(
            args=qkv(2, 2, nq=6, nk=6),
            kwargs={"attn_mask": heads_pad, "is_causal": True},
            label="padding mask (B, 1, 1, Nk) and causal, with heads",
        ),
        Case(
            args=qkv(2, nq=4, nk=5),
            kwargs={"attn_mask": empty},
            label="query 2 of sequence 1 may attend to nothing",
        ),
    ]


EXERCISE = Exercise(
    id="03_masks",
    title="Masks",
    forbidden_imports=("attention_course.masking",),
    questions=(
        Question(
            id="q1_masked_softmax",
            symbol="masked_softmax",
            title="The masked softmax",
            points=3,
            reference=masking.masked_softmax,
            cases=masked_softmax_cases,
            diagnose=_masked_positions_get_zero(),
            hint=(
                "Build allowed = torch.arange(Nk) < valid_lens reshaped to (B, 1, 1) or "
                "(B, Nq, 1); fill the other scores with -inf, subtract the row maximum of the "
                "allowed scores (0 for an empty row), exponentiate, and divide by the row sum "
                "(by 1 where the sum is 0). A row with valid length 0 must be zeros, not NaN."
            ),
        ),
        Question(
            id="q2_causal_mask",
            symbol="causal_mask",
            title="The look-ahead (causal) mask",
            points=1,
            reference=masking.causal_mask,
            cases=causal_cases,
            hint="True where key j <= query i: torch.ones(n, n, dtype=torch.bool).tril().",
        ),
        Question(
            id="q3_padding_mask",
            symbol="padding_mask",
            title="The padding mask",
            points=2,
            reference=masking.padding_mask,
            cases=padding_cases,
            hint=(
                "mask[b, t] = t < valid_lens[b]: compare torch.arange(max_len) with "
                "valid_lens[:, None]."
            ),
        ),
        Question(
            id="q4_masked_attention",
            symbol="masked_attention",
            title="Scaled dot-product attention with masks",
            points=3,
            reference=masking.scaled_dot_product_attention,
            cases=attention_cases,
            diagnose=_masked_positions_get_zero(
                pick=lambda out: (
                    out[1] if isinstance(out, (tuple, list)) and len(out) == 2 else None
                )
            ),
            hint=(
                "scores = q @ k.transpose(-2, -1) / sqrt(d); allowed = attn_mask (broadcast), "
                "AND a causal mask when is_causal; then your masked softmax over the last axis "
                "with that mask (masked keys exactly 0, empty rows zeros); output = weights @ v."
            ),
        ),
    ),
)
