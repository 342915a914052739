"""Chapter 7: attention over channels and over positions of an image
(SE-Net, CBAM).

Every block takes a feature map ``x`` of shape ``(B, C, H, W)`` and returns one
of the same shape: ``x`` times attention weights in ``(0, 1)``. The weights
broadcast against ``x``:

* :class:`SqueezeExcitation` (Hu et al., 2018) and CBAM's
  :class:`ChannelAttention` give one weight per channel, ``(B, C, 1, 1)``;
* :class:`SpatialAttention` gives one weight per position, ``(B, 1, H, W)``;
* :class:`CBAM` (Woo et al., 2018) applies channel then spatial attention; its
  weights are their product, ``(B, C, H, W)``.

Call a block with ``return_weights=True`` to get ``(output, weights)``; every
block also keeps the weights of its latest call, detached, in ``last_weights``
for plotting. The channel MLPs have no biases, as in the papers' formulas; the
spatial convolution has one (the CBAM authors' code follows it with batch
normalisation, whose shift does that job).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _check_feature_map(
    x: torch.Tensor, channels: int | None, block: str
) -> None:
    """Raise a ``ValueError`` unless ``x`` is ``(B, C, H, W)`` with
    ``C == channels``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"{block} expects a torch.Tensor, got {type(x).__name__}"
        )
    if x.dim() != 4:
        raise ValueError(
            f"{block} expects x of shape (B, C, H, W), "
            f"got shape {tuple(x.shape)}"
        )
    if channels is not None and x.shape[1] != channels:
        raise ValueError(
            f"{block} was built for C={channels} channels, "
            f"got x of shape {tuple(x.shape)} with C={x.shape[1]}"
        )


def _hidden_size(channels: int, reduction: int) -> int:
    """Width of the bottleneck, ``max(1, channels // reduction)``."""
    if channels < 1:
        raise ValueError(f"channels must be at least 1, got {channels}")
    if reduction < 1:
        raise ValueError(f"reduction must be at least 1, got {reduction}")
    return max(1, channels // reduction)


def center_surround_saliency(
    images: torch.Tensor, center: int = 5, surround: int = 11
) -> torch.Tensor:
    """A bottom-up saliency map in the spirit of Itti et al. (1998),
    ``(B, C, H, W) -> (B, H, W)``.

    Each channel is a feature map. Its *conspicuity* at a position is how much
    the mean over a ``center x center`` window differs from the mean over the
    ``surround x surround`` window around it (centre-surround contrast; the
    image is taken to be 0 outside). Itti's normalisation then scales each
    channel's map to ``[0, 1]`` and multiplies it by ``(1 - m)^2``, where
    ``m`` is the mean of its other local maxima: a map with one clear peak
    keeps it, a map full of similar peaks (clutter) is damped. The saliency
    map is the channels' mean. Fixed, not learned, and blind to the task: it
    marks whatever stands out.
    """
    _check_feature_map(images, None, "center_surround_saliency")
    if not 1 <= center < surround or center % 2 == 0 or surround % 2 == 0:
        raise ValueError(
            f"need odd window sizes with 1 <= center < surround, "
            f"got center={center} and surround={surround}"
        )

    def local_mean(size: int) -> torch.Tensor:
        return F.avg_pool2d(images, size, stride=1, padding=size // 2)

    contrast = (local_mean(center) - local_mean(surround)).abs()
    # A flat channel (contrast 0, up to rounding) stays 0 instead of blowing
    # its rounding errors up to 1.
    peak = contrast.amax(dim=(2, 3), keepdim=True).clamp_min(1e-6)
    maps = contrast / peak                                    # in [0, 1]
    local_max = F.max_pool2d(maps, 5, stride=1, padding=2)
    is_peak = (maps == local_max) & (maps > 0.05)
    count = is_peak.sum(dim=(2, 3), keepdim=True)
    others = (maps * is_peak).sum(dim=(2, 3), keepdim=True) - maps.amax(
        dim=(2, 3), keepdim=True
    )
    mean_other = torch.where(count > 1, others / (count - 1).clamp_min(1), 0)
    return (maps * (1 - mean_other) ** 2).mean(dim=1)


def max_pool_as_attention(
    x: torch.Tensor, kernel_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Max pooling written as hard attention over each window.

    ``x (B, C, H, W)`` is cut into non-overlapping ``k x k`` windows
    (``k = kernel_size``, dividing ``H`` and ``W``). In each window the weights
    are one-hot on the largest entry, and the output is the weighted sum of
    the window: ``F.max_pool2d(x, k)``. Returns ``(pooled, weights)``, pooled
    ``(B, C, H/k, W/k)`` and weights ``(B, C, H/k, W/k, k*k)`` (window
    entries in row-major order).
    """
    _check_feature_map(x, None, "max_pool_as_attention")
    b, c, h, w = x.shape
    if kernel_size < 1 or h % kernel_size or w % kernel_size:
        raise ValueError(
            f"kernel_size must be positive and divide H and W, got "
            f"{kernel_size} for x of shape {tuple(x.shape)}"
        )
    k = kernel_size
    windows = (
        x.reshape(b, c, h // k, k, w // k, k)
        .permute(0, 1, 2, 4, 3, 5)
        .reshape(b, c, h // k, w // k, k * k)
    )
    weights = F.one_hot(windows.argmax(dim=-1), k * k).to(x.dtype)
    return (weights * windows).sum(dim=-1), weights


def squeeze(x: torch.Tensor) -> torch.Tensor:
    """Global average pooling: one number per channel,
    ``(B, C, H, W) -> (B, C)``."""
    return x.mean(dim=(2, 3))


class _Attention(nn.Module):
    """Shared plumbing: ``forward`` = ``x * self.attention_weights(x)``,
    weights kept."""

    last_weights: torch.Tensor | None

    def __init__(self) -> None:
        super().__init__()
        self.last_weights = None

    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(
        self, x: torch.Tensor, return_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        weights = self.attention_weights(x)
        self.last_weights = weights.detach()
        output = x * weights
        return (output, weights) if return_weights else output


class SqueezeExcitation(_Attention):
    """Squeeze-and-excitation (Hu et al., 2018): re-weight the channels
    of ``x``.

    squeeze ``z = mean_{h,w} x`` ``(B, C)``; excitation
    ``s = sigmoid(W2 relu(W1 z))`` with ``W1: C -> max(1, C // reduction)`` and
    ``W2`` back to ``C``; scale ``x * s``. Weights ``(B, C, 1, 1)``.
    """

    def __init__(self, channels: int, reduction: int = 16) -> None:
        super().__init__()
        hidden = _hidden_size(channels, reduction)
        self.channels = channels
        self.fc1 = nn.Linear(channels, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, channels, bias=False)

    def excitation(self, z: torch.Tensor) -> torch.Tensor:
        """Channel descriptor ``(B, C)`` -> channel weights in ``(0, 1)``,
        ``(B, C)``."""
        return torch.sigmoid(self.fc2(torch.relu(self.fc1(z))))

    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` -> ``(B, C, 1, 1)``."""
        _check_feature_map(x, self.channels, type(self).__name__)
        return self.excitation(squeeze(x))[:, :, None, None]


class ChannelAttention(_Attention):
    """CBAM's channel attention (Woo et al., 2018).

    ``M_c = sigmoid(MLP(avgpool(x)) + MLP(maxpool(x)))``: the average- and the
    max-pooled descriptor go through one shared MLP
    ``C -> max(1, C // reduction) -> C``. Weights ``(B, C, 1, 1)``.
    """

    def __init__(self, channels: int, reduction: int = 16) -> None:
        super().__init__()
        hidden = _hidden_size(channels, reduction)
        self.channels = channels
        self.mlp = nn.Sequential(
            nn.Linear(channels, hidden, bias=False),
            nn.ReLU(),
            nn.Linear(hidden, channels, bias=False),
        )

    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` -> ``(B, C, 1, 1)``."""
        _check_feature_map(x, self.channels, type(self).__name__)
        scores = self.mlp(x.mean(dim=(2, 3))) + self.mlp(x.amax(dim=(2, 3)))
        return torch.sigmoid(scores)[:, :, None, None]


class SpatialAttention(_Attention):
    """CBAM's spatial attention (Woo et al., 2018): one weight per position.

    ``M_s = sigmoid(conv([mean_c x ; max_c x]))``: the channel-wise average and
    maximum maps, stacked as two channels, go through one
    ``kernel_size x kernel_size`` convolution with a bias (zero padding keeps
    ``H x W``). Works for any ``C``. Weights ``(B, 1, H, W)``.
    """

    def __init__(self, kernel_size: int = 7) -> None:
        super().__init__()
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(
                f"kernel_size must be a positive odd number, got {kernel_size}"
            )
        self.kernel_size = kernel_size
        self.conv = nn.Conv2d(2, 1, kernel_size, padding=kernel_size // 2)

    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` -> ``(B, 1, H, W)``."""
        _check_feature_map(x, None, type(self).__name__)
        descriptor = torch.cat(
            [x.mean(dim=1, keepdim=True), x.amax(dim=1, keepdim=True)], dim=1
        )
        return torch.sigmoid(self.conv(descriptor))


class CBAM(_Attention):
    """Convolutional block attention module (Woo et al., 2018): channel,
    then spatial.

    ``x' = x * M_c(x)``, ``output = x' * M_s(x')``, so
    ``output = x * (M_c * M_s)``; the weights returned are that product,
    ``(B, C, H, W)``. Each stage keeps its own weights too:
    ``channel_attention.last_weights`` ``(B, C, 1, 1)`` and
    ``spatial_attention.last_weights`` ``(B, 1, H, W)``.
    """

    def __init__(
        self, channels: int, reduction: int = 16, kernel_size: int = 7
    ) -> None:
        super().__init__()
        self.channel_attention = ChannelAttention(channels, reduction)
        self.spatial_attention = SpatialAttention(kernel_size)

    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` -> ``(B, C, H, W)``, the product of both
        stages' weights."""
        refined, channel_weights = self.channel_attention(
            x, return_weights=True
        )
        _, spatial_weights = self.spatial_attention(
            refined, return_weights=True
        )
        return channel_weights * spatial_weights


ATTENTION_BLOCKS = ("none", "se", "spatial", "cbam")


class SmallCNN(nn.Module):
    """A small classifier with an optional attention block, for the
    chapter's experiments.

    ``x (B, in_channels, H, W)`` -> logits ``(B, num_classes)``. Two
    ``conv_size x conv_size`` convolutions (``width`` channels, ReLU, size
    kept), global average pooling, a linear layer; with ``conv_size=1`` the
    network sees no shapes, only what each pixel holds. The attention block
    (``"none"``, ``"se"``, ``"spatial"``, CBAM's spatial stage alone, or
    ``"cbam"``) sits on the input (``attend="input"``, where we know which
    channels and positions matter) or after the first convolution
    (``attend="features"``).
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        attention: str = "none",
        *,
        attend: str = "features",
        width: int = 16,
        reduction: int = 4,
        kernel_size: int = 7,
        conv_size: int = 3,
    ) -> None:
        super().__init__()
        if attention not in ATTENTION_BLOCKS:
            raise ValueError(
                f"attention must be one of {ATTENTION_BLOCKS}, "
                f"got {attention!r}"
            )
        if attend not in ("input", "features"):
            raise ValueError(
                f"attend must be 'input' or 'features', got {attend!r}"
            )
        self.attend = attend
        channels = in_channels if attend == "input" else width
        if attention == "se":
            self.attention: nn.Module = SqueezeExcitation(channels, reduction)
        elif attention == "spatial":
            self.attention = SpatialAttention(kernel_size)
        elif attention == "cbam":
            self.attention = CBAM(channels, reduction, kernel_size)
        else:
            self.attention = nn.Identity()
        self.conv1 = nn.Conv2d(
            in_channels, width, conv_size, padding=conv_size // 2
        )
        self.conv2 = nn.Conv2d(width, width, conv_size, padding=conv_size // 2)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.attend == "input":
            x = self.attention(x)
        x = torch.relu(self.conv1(x))
        if self.attend == "features":
            x = self.attention(x)
        x = torch.relu(self.conv2(x))
        return self.head(x.mean(dim=(2, 3)))


def _box_maps(maps: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """``maps`` as ``(B, H, W)`` (a ``(B, 1, H, W)`` stack loses its axis of
    one), checked against ``boxes (B, 4)``."""
    if maps.dim() == 4 and maps.shape[1] == 1:
        maps = maps[:, 0]
    if maps.dim() != 3 or boxes.shape != (maps.shape[0], 4):
        raise ValueError(
            f"maps must be (B, H, W) or (B, 1, H, W) and boxes (B, 4); "
            f"got maps {tuple(maps.shape)} and boxes {tuple(boxes.shape)}"
        )
    return maps


def mass_in_boxes(maps: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """Share of each map's total mass that lies inside its box, ``(B,)``.

    ``maps`` is ``(B, H, W)`` or ``(B, 1, H, W)`` with non-negative entries;
    ``boxes`` is ``(B, 4)`` integer ``(top, left, bottom, right)``, bottom and
    right exclusive. A map spread evenly scores the box's share of the image
    area (chance).
    """
    maps = _box_maps(maps, boxes)
    rows = torch.arange(maps.shape[1], device=maps.device)[None, :, None]
    cols = torch.arange(maps.shape[2], device=maps.device)[None, None, :]
    top, left, bottom, right = (boxes[:, i, None, None] for i in range(4))
    inside = (rows >= top) & (rows < bottom) & (cols >= left) & (cols < right)
    return (maps * inside).sum(dim=(1, 2)) / maps.sum(dim=(1, 2))


def peak_in_boxes(maps: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """Whether each map's largest entry lies inside its box, bool ``(B,)``.

    ``maps`` ``(B, H, W)`` or ``(B, 1, H, W)``; ``boxes`` ``(B, 4)`` integer
    ``(top, left, bottom, right)``, bottom and right exclusive. A position
    drawn at random is inside with probability box area / image area.
    """
    maps = _box_maps(maps, boxes)
    peak = maps.flatten(1).argmax(dim=1)
    row, col = peak // maps.shape[2], peak % maps.shape[2]
    top, left, bottom, right = boxes.to(maps.device).unbind(dim=1)
    return (row >= top) & (row < bottom) & (col >= left) & (col < right)


def convolution_as_attention(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    sharpness: float = 10.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A ``K x K`` convolution computed as self-attention with ``K*K`` heads
    (the construction of Cordonnier et al., 2020).

    Every pixel of the zero-padded image is a key; every pixel of ``x`` a
    query. Head ``h`` owns one offset ``delta_h`` of the ``K x K`` window and
    scores keys by their position only: ``-sharpness * |(k - q) - delta_h|^2``
    for a query at ``q`` and a key at ``k``, then a softmax over the keys. Its
    value projection is the kernel's slice ``weight[:, :, delta_h]``, and the
    heads' outputs add up. As ``sharpness`` grows every head's weights tend to
    one-hot on its offset, and the output to
    ``F.conv2d(x, weight, bias, padding=K // 2)``.

    ``x (B, C, H, W)``, ``weight (C_out, C, K, K)`` with ``K`` odd, ``bias``
    ``(C_out,)`` or ``None``. Returns ``(output, weights)``: output
    ``(B, C_out, H, W)``, weights ``(K*K, H*W, (H+K-1)*(W+K-1))``, the same
    for every image (they ignore the content).
    """
    _check_feature_map(x, None, "convolution_as_attention")
    if (
        weight.dim() != 4
        or weight.shape[1] != x.shape[1]
        or weight.shape[2] != weight.shape[3]
        or weight.shape[2] % 2 == 0
    ):
        raise ValueError(
            f"weight must be (C_out, C, K, K) with C={x.shape[1]} and K odd, "
            f"got weight {tuple(weight.shape)} for x {tuple(x.shape)}"
        )
    k, pad = weight.shape[-1], weight.shape[-1] // 2
    _, _, h, w = x.shape
    keys = F.pad(x, (pad, pad, pad, pad)).flatten(2).transpose(1, 2)

    def grid(n_rows: int, n_cols: int, start: int) -> torch.Tensor:
        rows = torch.arange(n_rows, device=x.device) + start
        cols = torch.arange(n_cols, device=x.device) + start
        return torch.cartesian_prod(rows, cols).to(x.dtype)

    key_positions = grid(h + 2 * pad, w + 2 * pad, -pad)       # (Nk, 2)
    relative = key_positions[None] - grid(h, w, 0)[:, None]    # (Nq, Nk, 2)
    offsets = grid(k, k, -pad)                                 # (K*K, 2)
    distance = (relative[None] - offsets[:, None, None]).square().sum(-1)
    weights = torch.softmax(-sharpness * distance, dim=-1)     # (K*K, Nq, Nk)
    projections = weight.flatten(2).permute(2, 0, 1)           # (K*K, C_out, C)
    values = torch.einsum("bnc,hoc->bhno", keys, projections)
    output = (weights @ values).sum(dim=1).transpose(1, 2)     # (B, C_out, Nq)
    if bias is not None:
        output = output + bias[:, None]
    return output.reshape(x.shape[0], -1, h, w), weights
