"""Exercise 7: channel and spatial attention (chapter 7).

Seven questions: the squeeze, an SE block and CBAM's spatial map (implement); the
parameter counts of SE and CBAM as formulas of C, r and k (derive); a CBAM with three
bugs (debug); what rolling an image does to channel weights and to the spatial map
(predict), then measured on the chapter's synthetic images (experiment).

The references are the package's own chapter-7 code (``attention_course.channel_spatial``);
each known mistake is a small variant of it, recognised by what it outputs.
"""

from __future__ import annotations

from itertools import combinations

import torch
import torch.nn.functional as F
from torch import nn

from attention_course import channel_spatial
from attention_course.data.images import make_object_images
from attention_course.grading.exercises._offsets import fits_with_offsets
from attention_course.grading.spec import Case, Exercise, Mistake, Question
from attention_course.grading.tables import mistake_table, prediction
from attention_course.i18n import _

EXERCISE_ID = "07_channel_spatial_attention"
S72 = "7.2 Squeeze, excitation, scale"
S73 = "7.3 CBAM: channel, then spatial"
S78 = "7.8 Attention vs. convolution"
# Questions with a convolution: graded with --device cuda, cuDNN may compute it in TF32
# (10-bit mantissa; emulated, up to 0.5% off on these cases), while every known mistake
# is more than 70% off somewhere.
CONV_RTOL, CONV_ATOL = 1e-2, 1e-4


# --------------------------------------------------------------------------- Q1 squeeze
def squeeze_cases() -> list[Case]:
    g = torch.Generator().manual_seed(701)
    return [
        Case(args=(torch.randn(2, 3, 4, 5, generator=g),), label="B=2, C=3, 4x5"),
        Case(args=(torch.randn(1, 6, 1, 1, generator=g),), label="1x1 maps"),
        Case(args=(torch.randn(3, 2, 7, 3, generator=g) + 1,), hidden=True),
        Case(args=(torch.randn(2, 4, 4, 4, generator=g) - 0.5,), hidden=True),
    ]


AXES = ("batch", "channel", "height", "width")


def _mean_over(*dims: int, keepdim: bool = False):
    return lambda x: x.mean(dim=dims, keepdim=keepdim)


def _axes_mistakes() -> tuple[Mistake, ...]:
    """Every set of axes but (height, width) averaged over, each named in its message."""
    mistakes = []
    for size in (1, 2, 3, 4):
        for dims in combinations(range(4), size):
            if dims == (2, 3):
                continue
            names = [AXES[d] for d in dims]
            said = names[0] if size == 1 else ", ".join(names[:-1]) + " and " + names[-1]
            if dims == (1,):
                message = ("you averaged over the channels, which gives one number per "
                           "position (CBAM's spatial pooling); the squeeze averages each "
                           "channel over its H x W positions")
            else:
                message = (f"you averaged over the {said} "
                           f"{'axis' if size == 1 else 'axes'}: the squeeze averages over the "
                           f"height and the width only, one number per image and channel, "
                           f"(B, C)")
            mistakes.append(Mistake("mean_over_" + "_".join(names), _mean_over(*dims), message))
    return tuple(mistakes)


SQUEEZE_MISTAKES = (
    Mistake("max", lambda x: x.amax(dim=(2, 3)),
            "you took each channel's largest value: the squeeze is its average over the "
            "positions (the maximum is CBAM's second descriptor, not SE's)"),
    Mistake("sum", lambda x: x.sum(dim=(2, 3)),
            "you added the values up: divide by the number of positions, H times W"),
    Mistake("keepdim", _mean_over(2, 3, keepdim=True),
            "your descriptor keeps two axes of size 1, (B, C, 1, 1): the squeeze gives "
            "(B, C), one number per image and channel"),
    *_axes_mistakes(),
)


def _squeeze_diagnose(case: Case, expected, got) -> str | None:
    """A descriptor that is the average times a constant, or something else entirely."""
    want = expected["output"] if isinstance(expected, dict) else expected
    out = got["output"] if isinstance(got, dict) and "output" in got else got
    if not isinstance(out, torch.Tensor) or out.shape != want.shape or not out.numel():
        return None
    if torch.allclose(out.double(), want.double(), rtol=1e-4, atol=1e-6):
        return None  # the values are right: the gradient is what differs
    big = want.abs() > 1e-3
    if bool(big.any()):
        ratio = (out.double()[big] / want.double()[big])
        if float(ratio.std(unbiased=False)) < 1e-4 * float(ratio.abs().mean()):
            return _("your values are {factor} times the averages: divide the sum over a "
                     "channel's positions by their number, H times W").format(
                         factor=f"{float(ratio.mean()):.4g}")
    return _("your descriptor is not each channel's average over its H x W positions")


# --------------------------------------------------------------------------- Q2 SE block
class SqueezeExcitationReference(channel_spatial.SqueezeExcitation):
    """The course's block, called as the exercise asks: ``x`` -> ``(output, weights)``."""

    def forward(self, x):  # type: ignore[override]
        return super().forward(x, return_weights=True)


def _mean_squeeze(x):
    return x.mean(dim=(2, 3))


def _scaled(x, w):
    return x * w, w


def _se_variant(squeeze=_mean_squeeze, act=torch.relu, gate=torch.sigmoid, scale=_scaled):
    """An SE block with the exercise's parameter names and one step done another way."""

    class Variant(nn.Module):
        def __init__(self, channels: int, reduction: int = 16) -> None:
            super().__init__()
            hidden = max(1, channels // reduction)
            self.fc1 = nn.Linear(channels, hidden, bias=False)
            self.fc2 = nn.Linear(hidden, channels, bias=False)

        def forward(self, x):
            weights = gate(self.fc2(act(self.fc1(squeeze(x)))))
            return scale(x, weights[:, :, None, None])

    return Variant


SE_MISTAKES = mistake_table(_se_variant, [
    ("softmax", {"gate": lambda s: torch.softmax(s, dim=1)},
     "your weights sum to 1 over the channels, as a softmax makes them: SE gives each "
     "channel its own weight in (0, 1) with a sigmoid, so channels do not compete"),
    ("no_sigmoid", {"gate": lambda s: s},
     "your weights are the second layer's raw scores, some outside (0, 1): the "
     "excitation ends with a sigmoid"),
    ("no_relu", {"act": lambda h: h},
     "the two layers have nothing between them: the excitation puts a ReLU after the "
     "first layer (without it the two layers are one linear map)"),
    ("sigmoid_hidden", {"act": torch.sigmoid},
     "your hidden layer uses a sigmoid: the nonlinearity between the two layers is a "
     "ReLU; the sigmoid comes only at the end"),
    ("max_squeeze", {"squeeze": lambda x: x.amax(dim=(2, 3))},
     "your block describes each channel by its maximum: SE squeezes with the average "
     "over the positions"),
    ("sum_squeeze", {"squeeze": lambda x: x.sum(dim=(2, 3))},
     "your block describes each channel by the sum of its values: the squeeze is the "
     "average, the sum divided by H times W"),
    ("output_is_weights", {"scale": lambda x, w: (w, w)},
     "your output is the weights themselves: the block returns the input scaled by "
     "them, one weight per channel times that channel's whole map"),
    ("not_broadcast", {"scale": lambda x, w: (x * w, w[:, :, 0, 0])},
     "your output is right, but the weights come back as (B, C): give them the shape "
     "(B, C, 1, 1), ready to broadcast over the H x W positions"),
    ("residual", {"scale": lambda x, w: (x + x * w, w)},
     "your output adds the input back (a residual connection): the SE block itself "
     "returns only the input times the weights"),
    ("dimmed_twice", {"scale": lambda x, w: (x * w * w, w)},
     "your output multiplies the input by the weights twice"),
])


def _se_parts(got):
    """``(output, weights)`` of an SE answer (or of the reference's), gradients aside."""
    if isinstance(got, dict) and "output" in got:
        got = got["output"]
    if isinstance(got, (tuple, list)) and len(got) == 2:
        return got
    return None, None


def _fits_with_biases(case: Case, weights: torch.Tensor) -> bool:
    """Whether ``weights`` are SE's with some bias in each of the two layers: what layers
    left with their default biases give (the grader sets only the weights). Only judged
    where there are more images than channels can absorb (B >= 2)."""
    (x,) = case.args
    if x.shape[0] < 2:
        return False
    z = x.double().mean(dim=(2, 3))
    w1, w2 = case.params["fc1.weight"].double(), case.params["fc2.weight"].double()
    target = weights.detach().double().reshape(z.shape)
    logits = torch.log(target) - torch.log1p(-target)
    b1 = torch.zeros(w1.shape[0], dtype=torch.float64, requires_grad=True)
    b2 = torch.zeros(w2.shape[0], dtype=torch.float64, requires_grad=True)

    def residual() -> torch.Tensor:
        return torch.relu(z @ w1.T + b1) @ w2.T + b2 - logits

    return fits_with_offsets(residual, (b1, b2), float(logits.abs().max()))


def _se_diagnose(case: Case, expected, got) -> str | None:
    """Say what is wrong with an SE answer no known mistake explains."""
    out, weights = _se_parts(got)
    want_out, want_weights = _se_parts(expected)
    if not isinstance(weights, torch.Tensor) or not isinstance(out, torch.Tensor):
        return None
    if bool(((weights <= 0) | (weights >= 1)).any()):
        return _("some weights lie outside (0, 1): the excitation ends with a sigmoid")
    (x,) = case.args

    def same(a, b):
        return a.shape == b.shape and torch.allclose(a.double(), b.double(), rtol=1e-4,
                                                     atol=1e-6)

    if same(weights, want_weights):
        if same(out, want_out):
            return None  # both values right: the gradient is what differs
        return _("your weights are right but not your output: it is the input times the "
                 "weights")
    if out.shape == x.shape and weights.dim() == 4 and not torch.allclose(
        out.double(), (x * weights).double(), rtol=1e-4, atol=1e-6
    ):
        return _("your output is not the input times the weights you return")
    if weights.numel() == x.shape[0] * x.shape[1]:
        if _fits_with_biases(case, weights):
            return _("your weights are SE's formula with an offset inside each layer: do "
                     "your layers have biases? fc1 and fc2 have none here (the grader sets "
                     "only their weights, so a bias keeps its random start)")
    return _("your weights lie in (0, 1) and scale the input, but they are not SE's: check "
             "the squeeze (an average per channel) and the excitation (first layer, ReLU, "
             "second layer, sigmoid; the layers have no biases)")


def se_cases() -> list[Case]:
    g = torch.Generator().manual_seed(702)

    def case(channels: int, reduction: int | None, shape: tuple[int, ...], label: str = "",
             hidden: bool = False) -> Case:
        width = max(1, channels // (reduction or 16))
        return Case(
            init_args=(channels,) if reduction is None else (channels, reduction),
            params={"fc1.weight": torch.randn(width, channels, generator=g),
                    "fc2.weight": torch.randn(channels, width, generator=g)},
            args=(torch.randn(*shape, generator=g),),
            label=label,
            hidden=hidden,
        )

    return [
        case(8, 4, (2, 8, 5, 5), "C=8, reduction 4 (hidden 2), B=2, 5x5"),
        case(32, None, (1, 32, 3, 4), "C=32, default reduction 16 (hidden 2)"),
        case(3, 16, (3, 3, 6, 2), hidden=True),
        case(12, 3, (2, 12, 4, 7), hidden=True),
    ]


# --------------------------------------------------------------------------- Q3 derive
def parameter_counts(channels: int, reduction: int, kernel_size: int) -> dict[str, int]:
    """The number of learned parameters of the course's three blocks."""

    def count(module: nn.Module) -> int:
        return sum(p.numel() for p in module.parameters())

    return {
        "se": count(channel_spatial.SqueezeExcitation(channels, reduction)),
        "cbam_channel": count(channel_spatial.ChannelAttention(channels, reduction)),
        "cbam_spatial": count(channel_spatial.SpatialAttention(kernel_size)),
    }


def _right_se(c, r, k):
    return 2 * c * max(1, c // r)


def _right_spatial(c, r, k):
    return 2 * k * k + 1


def _counts(se=_right_se, channel=_right_se, spatial=_right_spatial):
    """Counts of ``(C, r, k)``, each block's by its own formula (the right ones by
    default: CBAM's channel MLP is SE's)."""
    return lambda c, r, k: {"se": se(c, r, k), "cbam_channel": channel(c, r, k),
                            "cbam_spatial": spatial(c, r, k)}


def _mlps(count):
    """Both channel MLPs (SE's and CBAM's) counted by ``count``, the rest right."""
    return _counts(count, count)


COUNT_MISTAKES = (
    *mistake_table(_mlps, [
        ("fraction", {"count": lambda c, r, k: 2 * c * c / r},
         "you counted C/r hidden units as a fraction: the bottleneck has a whole number of "
         "units, C/r rounded down (and at least one)"),
        ("no_minimum", {"count": lambda c, r, k: 2 * c * (c // r)},
         "with fewer channels than r, C/r rounds down to 0, but the bottleneck keeps at "
         "least one hidden unit"),
        ("rounded", {"count": lambda c, r, k: 2 * c * max(1, round(c / r))},
         "you rounded C/r to the nearest whole number: the bottleneck's width is C/r "
         "rounded down (and at least one)"),
        ("one_layer", {"count": lambda c, r, k: c * max(1, c // r)},
         "you counted one layer of the MLP: there are two, C to the bottleneck and back "
         "to C, each with C times the bottleneck's width of weights"),
        ("no_bottleneck", {"count": lambda c, r, k: 2 * c * c},
         "your MLP keeps all C channels in its hidden layer: the bottleneck has C/r units "
         "(rounded down, at least one), which is what makes it cheap"),
        ("with_biases", {"count": lambda c, r, k: _right_se(c, r, k) + max(1, c // r) + c},
         "you counted biases in the channel MLP: like the papers' formulas, its layers "
         "have none"),
    ]),
    *mistake_table(_counts, [
        ("mlp_twice", {"channel": lambda c, r, k: 2 * _right_se(c, r, k)},
         "you counted CBAM's MLP twice: the average- and the max-pooled descriptors go "
         "through one shared MLP, so the second descriptor costs no parameters"),
        ("whole_cbam", {"channel": lambda c, r, k: _right_se(c, r, k) + _right_spatial(c, r, k)},
         "your CBAM channel count includes the spatial stage: count the channel "
         "attention alone, the spatial attention has its own key"),
        ("bias_per_map", {"spatial": lambda c, r, k: 2 * k * k + 2},
         "you gave the convolution two biases: it has one output map, so one bias (the "
         "two input maps only bring weights)"),
        ("no_conv_bias", {"spatial": lambda c, r, k: 2 * k * k},
         "the spatial convolution has a bias too: one more parameter"),
        ("kernel_side_only", {"spatial": lambda c, r, k: 2 * k + 1},
         "you counted k weights for each input map; a k by k kernel has k times k "
         "weights for each of the two maps"),
        ("one_map", {"spatial": lambda c, r, k: k * k + 1},
         "the spatial convolution reads two stacked maps, the channel average and the "
         "channel maximum: its kernel has k times k weights for each of them"),
        ("per_channel", {"spatial": lambda c, r, k: 2 * c * k * k + 1},
         "your spatial count grows with C: the convolution reads the two pooled maps, "
         "never the C channels, so its size depends on k alone"),
        ("depends_on_c", {"spatial": lambda c, r, k: c * k * k + 1},
         "your spatial count has C times k times k weights: the convolution reads only the "
         "two maps pooled over the channels, whatever C is"),
    ]),
)


def count_cases() -> list[Case]:
    return [
        Case(args=(32, 16, 7), label="C=32, r=16, k=7"),
        Case(args=(64, 4, 3), label="C=64, r=4, k=3"),
        Case(args=(24, 16, 7), hidden=True),
        Case(args=(3, 16, 5), hidden=True),
        Case(args=(100, 8, 9), hidden=True),
    ]


# --------------------------------------------------------------------------- Q4 spatial map
def spatial_attention_map(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """CBAM's spatial map ``(B, 1, H, W)``: convolution ``weight (1, 2, k, k)``, ``bias (1,)``.

    The course's module, run with these tensors as its parameters (so that gradients
    reach them too).
    """
    module = channel_spatial.SpatialAttention(weight.shape[-1])
    _output, weights = torch.func.functional_call(
        module, {"conv.weight": weight, "conv.bias": bias}, (x,), {"return_weights": True})
    return weights


def _pooled(x, first="mean", second="max"):
    """Two maps pooled along the channels, stacked: ``(B, 2, H, W)``."""
    pools = {"mean": lambda t: t.mean(dim=1, keepdim=True),
             "max": lambda t: t.amax(dim=1, keepdim=True),
             "sum": lambda t: t.sum(dim=1, keepdim=True),
             "min": lambda t: t.amin(dim=1, keepdim=True)}
    return torch.cat([pools[first](x), pools[second](x)], dim=1)


def _spatial_variant(first="mean", second="max", padding=None, gate="sigmoid", use_bias=True):
    def wrong(x, weight, bias):
        pad = weight.shape[-1] // 2 if padding is None else padding(weight.shape[-1])
        scores = F.conv2d(_pooled(x, first, second), weight, bias if use_bias else None,
                          padding=pad)
        if gate == "sigmoid":
            return torch.sigmoid(scores)
        if gate == "softmax":
            return torch.softmax(scores.flatten(1), dim=1).reshape(scores.shape)
        return scores

    return wrong


SPATIAL_MISTAKES = mistake_table(_spatial_variant, [
    ("max_mean", {"first": "max", "second": "mean"},
     "your map stacks the maximum first, then the average: the kernel's first input "
     "map is the channel average, its second the channel maximum"),
    ("no_sigmoid", {"gate": "none"},
     "your map is the convolution's raw output, with values outside (0, 1): finish "
     "with a sigmoid"),
    ("softmax", {"gate": "softmax"},
     "your map sums to 1 over the positions, as a softmax makes it: CBAM gives each "
     "position its own weight in (0, 1) with a sigmoid"),
    ("no_padding", {"padding": lambda k: 0},
     "your map is smaller than the image: without padding a k x k kernel loses k - 1 "
     "rows and columns; pad by half the kernel size, rounded down, on every side"),
    ("too_much_padding", {"padding": lambda k: k - 1},
     "your map is larger than the image: pad by half the kernel size, rounded down, "
     "not by k - 1"),
    ("padding_one", {"padding": lambda k: 1},
     "your map has the right size only for a 3 x 3 kernel: the padding must grow "
     "with the kernel, half its size rounded down"),
    ("padding_three", {"padding": lambda k: 3},
     "your map has the right size only for a 7 x 7 kernel: the padding must follow "
     "the kernel, half its size rounded down"),
    ("padding_k", {"padding": lambda k: k},
     "your map is larger than the image: pad by half the kernel size, rounded down, "
     "not by the whole kernel size"),
    ("no_bias", {"use_bias": False},
     "your map ignores the convolution's bias: add it before the sigmoid"),
    ("sum", {"first": "sum"},
     "your first map is the sum over the channels: CBAM stacks the channel average"),
    ("mean_twice", {"second": "mean"},
     "both of your stacked maps are the channel average: the second one is the "
     "channel maximum"),
    ("max_twice", {"first": "max"},
     "both of your stacked maps are the channel maximum: the first one is the channel "
     "average"),
    ("min", {"second": "min"},
     "your second map is the channel minimum: CBAM stacks the channel maximum"),
])


def _spatial_diagnose(case: Case, expected, got) -> str | None:
    out = got["output"] if isinstance(got, dict) and "output" in got else got
    if not isinstance(out, torch.Tensor) or not out.is_floating_point() or out.dim() != 4:
        return None
    if bool(((out <= 0) | (out >= 1)).any()):
        return _("some weights lie outside (0, 1): the map ends with a sigmoid")
    return _("your map lies in (0, 1) but differs: check the two pooled maps (the average "
             "and the maximum over the channels, in that order), the padding and the bias")


def spatial_cases() -> list[Case]:
    g = torch.Generator().manual_seed(704)
    return [
        Case(args=(torch.randn(2, 4, 9, 8, generator=g), torch.randn(1, 2, 7, 7, generator=g) / 5,
                   torch.tensor([0.3])),
             label="7x7 kernel, B=2, C=4, 9x8"),
        Case(args=(torch.randn(1, 3, 5, 5, generator=g), torch.randn(1, 2, 3, 3, generator=g),
                   torch.tensor([-0.5])),
             label="3x3 kernel, C=3, 5x5"),
        Case(args=(torch.randn(2, 1, 6, 5, generator=g), torch.randn(1, 2, 5, 5, generator=g) / 3,
                   torch.tensor([0.0])),
             hidden=True),
        Case(args=(torch.randn(3, 5, 7, 10, generator=g), torch.randn(1, 2, 3, 3, generator=g),
                   torch.tensor([0.8])),
             hidden=True),
    ]


# --------------------------------------------------------------------------- Q5 debug
PARTS = ("channel_weights", "spatial_map", "output")
STARTER = ("batch_max", "from_input", "channel_twice")  # the bugs of the learner's starter
OTHER_PART = float("nan")  # what a mistake gives for a part it says nothing about:
#                             NaN equals no answer, and is quick to compare


def _cbam_module(x, w0, w1, weight, bias) -> channel_spatial.CBAM:
    channels, hidden = x.shape[1], w0.shape[0]
    module = channel_spatial.CBAM(channels, channels // hidden, weight.shape[-1])
    with torch.no_grad():
        module.channel_attention.mlp[0].weight.copy_(w0)
        module.channel_attention.mlp[2].weight.copy_(w1)
        module.spatial_attention.conv.weight.copy_(weight)
        module.spatial_attention.conv.bias.copy_(bias)
    return module


def cbam(x, w0, w1, weight, bias) -> dict[str, torch.Tensor]:
    """The course's CBAM with these weights: its channel weights, spatial map and output."""
    module = _cbam_module(x, w0, w1, weight, bias)
    with torch.no_grad():
        output = module(x)
    return {"channel_weights": module.channel_attention.last_weights,
            "spatial_map": module.spatial_attention.last_weights,
            "output": output}


def _channel_weights(x, w0, w1, variant: str | None):
    """CBAM's channel weights ``(B, C, 1, 1)``, or one of the ``CHANNEL_BUGS``."""
    act = (lambda h: h) if variant == "no_relu" else torch.relu

    def mlp(v):
        return act(v @ w0.T) @ w1.T

    average = mlp(x.mean(dim=(0, 2, 3) if variant == "batch_both" else (2, 3)))
    maximum = mlp(x.amax(dim=(0, 2, 3) if variant in ("batch_max", "batch_both") else (2, 3)))
    if variant == "sigmoid_each":
        weights = torch.sigmoid(average) + torch.sigmoid(maximum)
    elif variant == "average_only":
        weights = torch.sigmoid(average)
    elif variant == "max_only":
        weights = torch.sigmoid(maximum)
    elif variant == "softmax":
        weights = torch.softmax(average + maximum, dim=-1)
    else:
        weights = torch.sigmoid(average + maximum)
    return weights.expand(x.shape[0], -1)[:, :, None, None]


def _spatial_map(x, refined, weight, bias, variant: str | None):
    """CBAM's spatial map ``(B, 1, H, W)`` of the refined map, or one of the ``SPATIAL_BUGS``."""
    top = x if variant in ("from_input", "half_refined") else refined
    mean = x if variant == "from_input" else refined
    maps = [mean.mean(dim=1, keepdim=True), top.amax(dim=1, keepdim=True)]
    if variant == "max_mean":
        maps.reverse()
    scores = F.conv2d(torch.cat(maps, dim=1), weight, bias, padding=weight.shape[-1] // 2)
    return scores if variant == "no_sigmoid" else torch.sigmoid(scores)


def _cbam_variant(channel: str | None = None, spatial: str | None = None,
                  output: str | None = None, keys: tuple[str, ...] = PARTS):
    """CBAM written out, with one of the debugging question's bugs (or a typical half-fix
    or slip) per stage switched on; only ``keys`` are given, the others are ``OTHER_PART``
    (so that a mistake is matched on those keys alone)."""

    def wrong(x, w0, w1, weight, bias):
        channel_weights = _channel_weights(x, w0, w1, channel)
        refined = x * channel_weights
        spatial_map = _spatial_map(x, refined, weight, bias, spatial)
        if output == "channel_twice":
            out = refined * channel_weights * spatial_map
        elif output == "without_channel":
            out = x * spatial_map
        else:
            out = refined * spatial_map
        values = {"channel_weights": channel_weights, "spatial_map": spatial_map,
                  "output": out}
        return {key: values[key] if key in keys else OTHER_PART for key in PARTS}

    return wrong


# What can be wrong in each stage: the starter's bug first, then typical half-fixes and
# slips; each with a few words for the later parts, and the message for its own part.
CHANNEL_BUGS = {
    "batch_max": ("pooled over the batch",
                  "the max-pooled channel descriptor is pooled over the whole batch too, so "
                  "all images share the batch's maximum: pool each image on its own"),
    "batch_both": ("both descriptors pooled over the batch",
                   "both channel descriptors are pooled over the whole batch: each image "
                   "needs its own average and maximum over its positions"),
    "sigmoid_each": ("two sigmoids added",
                     "the channel weights add two sigmoids, so they can exceed 1: add the two "
                     "MLP outputs first, then take one sigmoid"),
    "average_only": ("the maximum left out",
                     "the channel weights use only the average-pooled descriptor: CBAM adds "
                     "the MLP's outputs for the average and for the maximum"),
    "max_only": ("the average left out",
                 "the channel weights use only the max-pooled descriptor: CBAM adds the "
                 "MLP's outputs for the average and for the maximum"),
    "no_relu": ("no ReLU in the MLP",
                "the shared MLP has no ReLU between its two layers"),
    "softmax": ("a softmax over the channels",
                "the channel weights come from a softmax over the channels: CBAM gives each "
                "channel its own weight in (0, 1) with a sigmoid"),
}
SPATIAL_BUGS = {
    "from_input": ("read from the input",
                   "the spatial map reads the input, not the channel-refined map: CBAM "
                   "applies its channel weights first"),
    "half_refined": ("its maximum map read from the input",
                     "only the average map reads the refined input: the maximum map must "
                     "read it too"),
    "max_mean": ("the maximum stacked first",
                 "the pooled maps are stacked maximum first: the kernel expects the channel "
                 "average first, then the channel maximum"),
    "no_sigmoid": ("no sigmoid",
                   "the spatial map is the convolution's raw output: it ends with a sigmoid"),
}
OUTPUT_BUGS = {
    "channel_twice": "the output carries the channel weights twice: the refined map already "
                     "holds them",
    "without_channel": "the output scales the input by the spatial map alone: it needs the "
                       "channel weights once, and the spatial map once",
}


def _upstream(channel: str | None, spatial: str | None) -> str:
    """Which earlier parts an answer's part is computed from, and how they are wrong."""
    wrong = []
    if channel:
        wrong.append(f"the channel weights ({CHANNEL_BUGS[channel][0]})")
    if spatial:
        wrong.append(f"the spatial map ({SPATIAL_BUGS[spatial][0]})")
    return " and ".join(wrong)


def _broken_stages() -> list[tuple[str | None, str | None]]:
    """The (channel, spatial) states a learner passes through: one stage wrong, or the
    starter's channel bug together with any spatial one."""
    pairs = [(c, None) for c in CHANNEL_BUGS] + [(None, s) for s in SPATIAL_BUGS]
    return pairs + [(STARTER[0], s) for s in SPATIAL_BUGS]


def _debug_mistakes() -> tuple[Mistake, ...]:
    """Each part's mistakes, matched on that part alone: its own bug, or the earlier parts
    it is computed from (the simplest explanation first)."""
    mistakes = [Mistake(f"channel_{c}", _cbam_variant(channel=c, keys=("channel_weights",)),
                        f"still a bug here: {text}")
                for c, (_short, text) in CHANNEL_BUGS.items()]
    for c, s in _broken_stages():
        if c is not None and s == "from_input":
            continue  # a map read from the input does not see the channel weights
        if s is None:
            message = (f"the spatial map is computed from the channel weights, which are "
                       f"still wrong ({CHANNEL_BUGS[c][0]}): fix them first")
        else:
            message = f"still a bug here: {SPATIAL_BUGS[s][1]}"
            if c is not None:
                message += (f"; and the channel weights it reads are still wrong "
                            f"({CHANNEL_BUGS[c][0]})")
        mistakes.append(Mistake(f"spatial_{c}_{s}",
                                _cbam_variant(c, s, keys=("spatial_map",)), message))
    for o in [None, *OUTPUT_BUGS]:
        for c, s in [(None, None), *_broken_stages()]:
            if (c is s is o is None) or (c is not None and s == "from_input"
                                         and o == "without_channel"):
                continue  # right, or the same output as without the channel bug
            said = []
            if c or s:
                said.append(f"the output is computed from {_upstream(c, s)}, still wrong "
                            f"above: fix {'them' if c and s else 'that'} first")
            if o:
                said.append(OUTPUT_BUGS[o])
            message = "; and ".join(said)
            if (c, s, o) == STARTER:
                message = f"none of the three bugs is fixed yet: {message}"
            elif not (c or s):
                message = f"still a bug here: {message}"
            mistakes.append(Mistake(f"output_{c}_{s}_{o}",
                                    _cbam_variant(c, s, o, keys=("output",)), message))
    return tuple(mistakes)


def debug_cases() -> list[Case]:
    g = torch.Generator().manual_seed(705)

    def case(b, c, h, w, hidden, k, label="", held=False):
        w0 = torch.randn(hidden, c, generator=g)
        w0[0] = w0[0].abs()  # a unit the ReLU keeps on every image (features are positive)
        if hidden > 1:
            w0[1] = w0[1].abs() - 0.8  # and one it keeps on some images only
        brightness = 0.5 + 2 * torch.rand(b, 1, 1, 1, generator=g)  # images differ
        return Case(args=(torch.randn(b, c, h, w, generator=g).abs() * brightness, w0,
                          torch.randn(c, hidden, generator=g),
                          torch.randn(1, 2, k, k, generator=g) / k,
                          torch.randn(1, generator=g)),
                    label=label, hidden=held)

    return [
        case(2, 6, 8, 8, 2, 7, "B=2, C=6, 8x8, k=7"),
        case(3, 4, 5, 6, 1, 3, "B=3, C=4, 5x6, k=3"),
        case(4, 8, 6, 5, 4, 5, held=True),
        case(2, 5, 7, 7, 2, 3, held=True),
    ]


# --------------------------------------------------------------------------- Q6 predict
CHOICES = ("unchanged", "shifted", "different")
PREDICTION = {"se_weights": "unchanged", "cbam_channel_weights": "unchanged",
              "cbam_spatial_map": "shifted"}
PREDICT_WRONG = [
    ("se_weights_shifted", "se_weights", "shifted",
     "SE's weights have no positions that could move: one number per channel, from the "
     "channel's average over all positions"),
    ("se_weights_different", "se_weights", "different",
     "the average over all positions adds up the same values, only in another order: "
     "rolling the image cannot change it"),
    ("cbam_channel_weights_shifted", "cbam_channel_weights", "shifted",
     "CBAM's channel weights, like SE's, are one number per channel, with no positions to "
     "move"),
    ("cbam_channel_weights_different", "cbam_channel_weights", "different",
     "the maximum over all positions does not care where the largest value sits, any more "
     "than the average does"),
    ("cbam_spatial_map_unchanged", "cbam_spatial_map", "unchanged",
     "the spatial map has one weight per position: when the object moves, its bright spot "
     "must move somewhere"),
    ("cbam_spatial_map_different", "cbam_spatial_map", "different",
     "a convolution applies the same kernel at every position, so moving its input moves "
     "its output by the same amount (away from the edges), and the pooled maps move with "
     "the image"),
]


# --------------------------------------------------------------------------- Q7 experiment
def shift_weights(channels: int = 6, informative=(0, 2, 4), kernel_size: int = 7):
    """Hand-set CBAM weights: keep the informative channels, look for a bright square.

    ``w0`` is the identity, ``w1`` gives the informative channels +4 and the others -4, so
    the channel weights are near 1 and near 0; the spatial kernel averages the channel
    maximum over its window (the channel average gets weight 0), with a negative bias.
    """
    w0 = torch.eye(channels)
    w1 = torch.diag(torch.tensor([4.0 if c in informative else -4.0 for c in range(channels)]))
    kernel = torch.zeros(1, 2, kernel_size, kernel_size)
    kernel[0, 1] = 6.0 / kernel_size**2
    return w0, w1, kernel, torch.tensor([-2.5])


def shift_image(seed: int, channels: int = 6, informative=(0, 2, 4)) -> torch.Tensor:
    """One ``(1, C, 24, 24)`` image of chapter 7's synthetic data set."""
    return make_object_images(1, channels=channels, informative=informative, clutter=0.15,
                              noise=0.1, seed=seed).images


def _peak(spatial_map: torch.Tensor) -> tuple[int, int]:
    row, col = divmod(int(spatial_map.flatten().argmax()), spatial_map.shape[-1])
    return row, col


def shift_experiment(x, dy, dx, w0, w1, weight, bias) -> dict:
    """Roll ``x`` by ``(dy, dx)``; measure what CBAM's channel weights and spatial map do."""
    before = cbam(x, w0, w1, weight, bias)
    after = cbam(torch.roll(x, shifts=(dy, dx), dims=(2, 3)), w0, w1, weight, bias)
    change = (after["channel_weights"] - before["channel_weights"]).abs().max()
    return {"channel_change": float(change),
            "peak_before": _peak(before["spatial_map"]),
            "peak_after": _peak(after["spatial_map"])}


def _experiment_variant(roll=lambda x, dy, dx: torch.roll(x, (dy, dx), dims=(2, 3)),
                        peak=_peak, change=None):
    def wrong(x, dy, dx, w0, w1, weight, bias):
        before = cbam(x, w0, w1, weight, bias)
        after = cbam(roll(x, dy, dx), w0, w1, weight, bias)
        if change is None:
            moved = float((after["channel_weights"] - before["channel_weights"]).abs().max())
        else:
            moved = change(before, after)
        return {"channel_change": moved, "peak_before": peak(before["spatial_map"]),
                "peak_after": peak(after["spatial_map"])}

    return wrong


def _peak_flat(spatial_map):
    return int(spatial_map.flatten().argmax())


def _peak_tensor(spatial_map):
    return torch.tensor(_peak(spatial_map))


def _peak_col_row(spatial_map):
    row, col = _peak(spatial_map)
    return col, row


def _map_change(before, after):
    return float((after["spatial_map"] - before["spatial_map"]).abs().max())


def _output_change(before, after):
    return float((after["output"] - before["output"]).abs().max())


EXPERIMENT_MISTAKES = mistake_table(_experiment_variant, [
    ("col_row", {"peak": _peak_col_row},
     "your peaks are (column, row): give them as (row, column), the row counted down "
     "from the top"),
    ("flat_index", {"peak": _peak_flat},
     "your peaks are positions in the flattened map: give each as a pair (row, "
     "column), the row counted down from the top"),
    ("tensor_peak", {"peak": _peak_tensor},
     "your peaks are right, but as tensors: give each as a pair of Python integers, "
     "(row, column)"),
    ("swapped_shift", {"roll": lambda x, dy, dx: torch.roll(x, (dx, dy), dims=(2, 3))},
     "your image moved by dx rows and dy columns: dy moves the rows (the height axis), "
     "dx the columns"),
    ("rows_only", {"roll": lambda x, dy, dx: torch.roll(x, dy, dims=2)},
     "your image moved along the rows only: roll it by dy along the height and by dx "
     "along the width"),
    ("columns_only", {"roll": lambda x, dy, dx: torch.roll(x, dx, dims=3)},
     "your image moved along the columns only: roll it by dy along the height and by "
     "dx along the width"),
    ("against", {"roll": lambda x, dy, dx: torch.roll(x, (-dy, -dx), dims=(2, 3))},
     "your image moved the other way: a positive dy moves the content down (to larger "
     "row numbers), a positive dx to the right"),
    ("channels_rolled", {"roll": lambda x, dy, dx: torch.roll(x, (dy, dx), dims=(1, 2))},
     "you rolled the channels and the rows: roll the two spatial axes, height and "
     "width, and leave the channels alone"),
    ("map_change", {"change": _map_change},
     "your channel change is the change of the spatial map: measure the channel "
     "weights"),
    ("output_change", {"change": _output_change},
     "your channel change is the change of CBAM's output: measure the channel weights"),
])


def experiment_cases() -> list[Case]:
    def case(seed, dy, dx, channels=6, informative=(0, 2, 4), kernel_size=7, label="",
             hidden=False):
        return Case(args=(shift_image(seed, channels, informative), dy, dx,
                          *shift_weights(channels, informative, kernel_size)),
                    label=label, hidden=hidden)

    return [
        case(1, -7, 4, label="image of seed 1, rolled 7 rows up and 4 columns right"),
        case(3, 4, -10, hidden=True),
        case(8, -6, 5, channels=4, informative=(1, 2), kernel_size=5, hidden=True),
    ]


# --------------------------------------------------------------------------- the exercise
EXERCISE = Exercise(
    id=EXERCISE_ID,
    title="Channel and spatial attention",
    forbidden_imports=("attention_course.channel_spatial",),
    questions=(
        Question(
            id="q1_squeeze",
            symbol="squeeze",
            title="The squeeze step",
            kind="implement",
            points=1,
            reference=channel_spatial.squeeze,
            cases=squeeze_cases,
            grad=True,
            mistakes=SQUEEZE_MISTAKES,
            diagnose=_squeeze_diagnose,
            hint="The squeeze summarises each channel of each image by one number that does "
                 "not depend on where a feature sits.",
            section=S72,
        ),
        Question(
            id="q2_se_block",
            symbol="SqueezeExcitation",
            call="module",
            title="A squeeze-and-excitation block",
            kind="implement",
            points=2,
            reference=SqueezeExcitationReference,
            cases=se_cases,
            grad=True,
            mistakes=SE_MISTAKES,
            diagnose=_se_diagnose,
            builds_on=("q1_squeeze",),
            hint="Squeeze, excitation, scale: one descriptor per channel, a bottleneck with a "
                 "ReLU and a sigmoid that gives each channel a weight in (0, 1), then each "
                 "channel's map times its weight.",
            section=S72,
        ),
        Question(
            id="q3_parameter_counts",
            symbol="parameter_counts",
            title="How many parameters do SE and CBAM add?",
            kind="derive",
            points=3,
            reference=parameter_counts,
            cases=count_cases,
            parts={"se": 1, "cbam_channel": 1, "cbam_spatial": 1},
            mistakes=COUNT_MISTAKES,
            hint="Count the weights of each layer: a linear layer from m to n units without "
                 "a bias has m times n; a convolution has one weight per input map and kernel "
                 "position, plus its bias. Mind the rounding of C/r.",
            section=S73,
        ),
        Question(
            id="q4_spatial_map",
            symbol="spatial_attention_map",
            title="CBAM's spatial attention map",
            kind="implement",
            points=2,
            reference=spatial_attention_map,
            cases=spatial_cases,
            grad=True,
            rtol=CONV_RTOL,
            atol=CONV_ATOL,
            mistakes=SPATIAL_MISTAKES,
            diagnose=_spatial_diagnose,
            hint="Pool along the channels (average, then maximum), stack the two maps, one "
                 "convolution that keeps the height and width, one sigmoid.",
            section=S73,
        ),
        Question(
            id="q5_debug_cbam",
            symbol="cbam",
            title="Debug a CBAM",
            kind="debug",
            points=3,
            reference=cbam,
            cases=debug_cases,
            parts={"channel_weights": 1, "spatial_map": 1, "output": 1},
            part_tolerance={"spatial_map": (CONV_RTOL, CONV_ATOL),
                            "output": (CONV_RTOL, CONV_ATOL)},
            mistakes=_debug_mistakes(),
            hint="Follow the shapes and the order of the two stages: which axes does each "
                 "pooling reduce, which tensor does the spatial stage read, and how often "
                 "does each weight scale the output?",
            section=S73,
        ),
        prediction(
            id="q6_predict_shift",
            symbol="predict_shift",
            title="Predict: the object moves",
            points=3,
            answer=PREDICTION,
            choices=CHOICES,
            wrong=PREDICT_WRONG,
            hint="Ask of each block what it pools over and whether a position survives the "
                 "pooling; and what a convolution does to a shifted input.",
            section=S78,
        ),
        Question(
            id="q7_shift_experiment",
            symbol="shift_experiment",
            title="Experiment: roll the image",
            kind="experiment",
            points=3,
            reference=shift_experiment,
            cases=experiment_cases,
            parts={"channel_change": 1, "peak_before": 1, "peak_after": 1},
            part_tolerance={"channel_change": (1e-4, 1e-5)},
            mistakes=EXPERIMENT_MISTAKES,
            builds_on=("q5_debug_cbam",),
            time_limit=20.0,
            hint="Run your CBAM on the image and on the rolled image; compare the channel "
                 "weights entry by entry, and find where each spatial map is largest.",
            section="7.6 Where? A network that cannot see shapes, and CBAM's spatial map",
        ),
    ),
)
