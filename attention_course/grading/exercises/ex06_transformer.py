"""Exercise 6: the Transformer (chapter 6).

The references are the package's own chapter-6 code (``attention_course.transformer``).
"""

from __future__ import annotations

import torch
from torch import nn

from attention_course import transformer
from attention_course.grading.spec import Case, Exercise, Question
from attention_course.masking import causal_mask


def decoder_self_attention_mask(tgt_ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Bool ``(B, 1, T, T)``: position t may attend to s when s <= t and token s is not padding."""
    real = (tgt_ids != pad_id)[:, None, None, :]
    return real & causal_mask(tgt_ids.shape[1])


class EncoderLayerReference(nn.Module):
    """The course's post-norm :class:`~attention_course.transformer.EncoderLayer`, with the
    parameter names the exercise asks for: ``self_attn.{q,k,v,out}_proj``, ``linear1``,
    ``linear2``, ``norm1``, ``norm2``; ``forward(x, src_mask=None)`` returns ``x`` only."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int) -> None:
        super().__init__()
        self.layer = transformer.EncoderLayer(d_model, num_heads, d_ff)
        self.self_attn = self.layer.self_attn
        self.linear1, self.linear2 = self.layer.ffn.linear1, self.layer.ffn.linear2
        self.norm1, self.norm2 = self.layer.add_norm1.norm, self.layer.add_norm2.norm

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.layer(x, src_mask)[0]


def pe_cases() -> list[Case]:
    return [
        Case(args=(6, 4), label="6 positions, d_model 4"),
        Case(args=(50, 16), label="50 positions, d_model 16"),
        Case(args=(1, 8), label="a single position"),
        Case(args=(30, 128), label="30 positions, d_model 128"),
    ]


def decoder_mask_cases() -> list[Case]:
    return [
        Case(args=(torch.tensor([[1, 5, 6, 2]]), 0), label="one sentence, no padding"),
        Case(args=(torch.tensor([[1, 7, 2, 0, 0], [1, 4, 5, 6, 2]]), 0),
             label="B=2, the first padded with two pad_id=0"),
        Case(args=(torch.tensor([[3, 9, 9], [3, 9, 1]]), 1), label="pad_id = 1"),
    ]


def _layer_params(d_model: int, d_ff: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    params = {}
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        weight = torch.randn(d_model, d_model, generator=g) / d_model**0.5
        params[f"self_attn.{name}.weight"] = weight
        params[f"self_attn.{name}.bias"] = torch.randn(d_model, generator=g) * 0.1
    params["linear1.weight"] = torch.randn(d_ff, d_model, generator=g) / d_model**0.5
    params["linear1.bias"] = torch.randn(d_ff, generator=g) * 0.1
    params["linear2.weight"] = torch.randn(d_model, d_ff, generator=g) / d_ff**0.5
    params["linear2.bias"] = torch.randn(d_model, generator=g) * 0.1
    for norm in ("norm1", "norm2"):  # not the identity, so that swapped norms are caught
        params[f"{norm}.weight"] = 1 + 0.3 * torch.randn(d_model, generator=g)
        params[f"{norm}.bias"] = 0.3 * torch.randn(d_model, generator=g)
    return params


def encoder_layer_cases() -> list[Case]:
    g = torch.Generator().manual_seed(601)
    real = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]
    return [
        Case(init_args=(8, 2, 16), params=_layer_params(8, 16, g),
             args=(torch.randn(2, 5, 8, generator=g),), label="d_model 8, 2 heads, d_ff 16"),
        Case(init_args=(12, 3, 24), params=_layer_params(12, 24, g),
             args=(torch.randn(2, 6, 12, generator=g),), kwargs={"src_mask": real},
             label="padding mask (B, 1, 1, S): sequence 1 has 4 real tokens"),
        Case(init_args=(4, 1, 8), params=_layer_params(4, 8, g),
             args=(torch.randn(1, 3, 4, generator=g) * 3,), label="one head, d_model 4"),
    ]


EXERCISE = Exercise(
    id="06_transformer",
    title="The Transformer",
    forbidden_imports=("attention_course.transformer",),
    questions=(
        Question(
            id="q1_positional_encoding",
            symbol="positional_encoding",
            title="The sinusoidal positional encoding",
            points=2,
            reference=transformer.sinusoidal_positional_encoding,
            cases=pe_cases,
            rtol=1e-4, atol=1e-5,
            hint=(
                "PE[p, 2i] = sin(p / 10000 ** (2i / d_model)) and PE[p, 2i + 1] = cos(the same "
                "angle): the base is 10000 (not 1000), and 2i is the even column index, so "
                "columns 2i and 2i + 1 share one frequency. Positions run down the rows."
            ),
        ),
        Question(
            id="q2_decoder_mask",
            symbol="decoder_self_attention_mask",
            title="The decoder's self-attention mask",
            points=2,
            reference=decoder_self_attention_mask,
            cases=decoder_mask_cases,
            hint=(
                "Bool (B, 1, T, T), True = allowed: AND the causal mask (key s <= query t, "
                "torch.ones(T, T, dtype=torch.bool).tril()) with the real-token mask of the "
                "keys, (tgt_ids != pad_id)[:, None, None, :]."
            ),
        ),
        Question(
            id="q3_encoder_layer",
            symbol="EncoderLayer",
            call="module",
            title="One post-norm encoder layer",
            points=4,
            reference=EncoderLayerReference,
            cases=encoder_layer_cases,
            hint=(
                "Post-norm as in the paper: x = norm1(x + self_attn(x, x, x, src_mask)), then "
                "x = norm2(x + linear2(relu(linear1(x)))). Use the course's "
                "MultiHeadAttention (it returns (output, weights): keep the output)."
            ),
        ),
    ),
)
