"""Exercise 7: channel and spatial attention (chapter 7).

The references are the package's own chapter-7 code (``attention_course.channel_spatial``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attention_course import channel_spatial
from attention_course.grading.spec import Case, Exercise, Question


class SqueezeExcitationReference(channel_spatial.SqueezeExcitation):
    """The course's block, called as the exercise asks: ``x`` -> ``(output, weights)``."""

    def forward(self, x):  # type: ignore[override]
        return super().forward(x, return_weights=True)


def channel_attention_weights(x: torch.Tensor, w0: torch.Tensor, w1: torch.Tensor) -> torch.Tensor:
    """CBAM's channel weights ``(B, C, 1, 1)`` with the shared MLP's weights ``w0``, ``w1``."""
    module = channel_spatial.ChannelAttention(w0.shape[1], w0.shape[1] // w0.shape[0])
    with torch.no_grad():
        module.mlp[0].weight.copy_(w0)
        module.mlp[2].weight.copy_(w1)
        return module.attention_weights(x)


def spatial_attention_map(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """CBAM's spatial map ``(B, 1, H, W)``: convolution ``weight (1, 2, k, k)``, ``bias (1,)``."""
    module = channel_spatial.SpatialAttention(weight.shape[-1])
    with torch.no_grad():
        module.conv.weight.copy_(weight)
        module.conv.bias.copy_(bias)
        return module.attention_weights(x)


def squeeze_cases() -> list[Case]:
    g = torch.Generator().manual_seed(701)
    return [
        Case(args=(torch.randn(2, 3, 4, 5, generator=g),), label="B=2, C=3, 4x5"),
        Case(args=(torch.randn(1, 6, 1, 1, generator=g),), label="1x1 maps"),
        Case(args=(torch.randn(3, 2, 7, 3, generator=g) + 1,), label="B=3, C=2, 7x3"),
    ]


def se_cases() -> list[Case]:
    g = torch.Generator().manual_seed(702)

    def case(channels: int, reduction: int | None, shape: tuple[int, ...], label: str) -> Case:
        hidden = max(1, channels // (reduction or 16))
        return Case(
            init_args=(channels,) if reduction is None else (channels, reduction),
            params={"fc1.weight": torch.randn(hidden, channels, generator=g),
                    "fc2.weight": torch.randn(channels, hidden, generator=g)},
            args=(torch.randn(*shape, generator=g),),
            label=label,
        )

    return [
        case(8, 4, (2, 8, 5, 5), "C=8, reduction 4 (hidden 2), B=2, 5x5"),
        case(32, None, (1, 32, 3, 4), "C=32, default reduction 16 (hidden 2)"),
        case(3, 16, (3, 3, 6, 2), "C=3, reduction 16: C // r = 0, so 1 hidden unit"),
    ]


def channel_cases() -> list[Case]:
    g = torch.Generator().manual_seed(703)
    cases = []
    for channels, hidden, shape, label in [
        (6, 2, (2, 6, 4, 4), "C=6, hidden 2, B=2, 4x4"),
        (4, 1, (1, 4, 3, 5), "C=4, hidden 1"),
    ]:
        cases.append(Case(
            args=(torch.randn(*shape, generator=g), torch.randn(hidden, channels, generator=g),
                  torch.randn(channels, hidden, generator=g)),
            label=label,
        ))
    return cases


def spatial_cases() -> list[Case]:
    g = torch.Generator().manual_seed(704)
    return [
        Case(args=(torch.randn(2, 4, 9, 8, generator=g), torch.randn(1, 2, 7, 7, generator=g) / 5,
                   torch.tensor([0.3])),
             label="7x7 kernel, B=2, C=4, 9x8"),
        Case(args=(torch.randn(1, 3, 5, 5, generator=g), torch.randn(1, 2, 3, 3, generator=g),
                   torch.tensor([-0.5])),
             label="3x3 kernel, C=3, 5x5"),
        Case(args=(torch.randn(2, 1, 6, 4, generator=g), torch.randn(1, 2, 5, 5, generator=g) / 3,
                   torch.tensor([0.0])),
             label="5x5 kernel, a single channel, bias 0"),
    ]


def _weights_in_unit_interval(case: Case, expected, got) -> str | None:
    weights = got[1] if isinstance(got, (tuple, list)) and len(got) == 2 else None
    if isinstance(weights, torch.Tensor) and bool(((weights <= 0) | (weights >= 1)).any()):
        return "some weights lie outside (0, 1): the excitation ends with a sigmoid"
    return None


def _stack_order(case: Case, expected, got) -> str | None:
    x, weight, bias = case.args
    swapped = torch.cat([x.amax(dim=1, keepdim=True), x.mean(dim=1, keepdim=True)], dim=1)
    wrong = torch.sigmoid(F.conv2d(swapped, weight, bias, padding=weight.shape[-1] // 2))
    if isinstance(got, torch.Tensor) and got.shape == wrong.shape and torch.allclose(
        got.double(), wrong.double(), atol=1e-5
    ):
        return "your map uses [max; mean]; stack the average map first: [mean; max]"
    return None


EXERCISE = Exercise(
    id="07_channel_spatial_attention",
    title="Channel and spatial attention",
    forbidden_imports=("attention_course.channel_spatial",),
    questions=(
        Question(
            id="q1_squeeze",
            symbol="squeeze",
            title="The squeeze step",
            points=1,
            reference=channel_spatial.squeeze,
            cases=squeeze_cases,
            hint="Global average pooling: the mean of each channel over its H x W positions, "
                 "x.mean(dim=(2, 3)), shape (B, C).",
        ),
        Question(
            id="q2_se_block",
            symbol="SqueezeExcitation",
            call="module",
            title="A squeeze-and-excitation block",
            points=3,
            reference=SqueezeExcitationReference,
            cases=se_cases,
            diagnose=_weights_in_unit_interval,
            hint=(
                "fc1 = nn.Linear(C, max(1, C // reduction), bias=False), fc2 back to C, no "
                "bias. weights = sigmoid(fc2(relu(fc1(squeeze(x))))) reshaped to (B, C, 1, 1); "
                "return (x * weights, weights)."
            ),
        ),
        Question(
            id="q3_channel_attention",
            symbol="channel_attention_weights",
            title="CBAM's channel attention weights",
            points=2,
            reference=channel_attention_weights,
            cases=channel_cases,
            hint=(
                "mlp(v) = relu(v @ w0.T) @ w1.T, shared by both descriptors; "
                "sigmoid(mlp(average over H, W) + mlp(maximum over H, W)), then "
                "[:, :, None, None]. Add before the sigmoid, not after."
            ),
        ),
        Question(
            id="q4_spatial_map",
            symbol="spatial_attention_map",
            title="CBAM's spatial attention map",
            points=2,
            reference=spatial_attention_map,
            cases=spatial_cases,
            diagnose=_stack_order,
            hint=(
                "Stack the channel-wise average and maximum, [mean; max], into (B, 2, H, W); "
                "F.conv2d(stacked, weight, bias, padding=k // 2) keeps H x W; then a sigmoid."
            ),
        ),
    ),
)
