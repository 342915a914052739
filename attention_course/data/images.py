"""Chapter 7's images: synthetic ones whose ground truth is known, and
the 8x8 digits.

:func:`make_object_images` hides an *object*, a bright 5x5 square, at a random
position among scattered bright pixels (the *distractors*). Only some channels
are *informative*: the object is drawn in one of them, and which one (its
colour) is the label. The other channels carry no signal: distractor pixels and
a *decoy* square anywhere but on the object. So we know which channels a channel
attention should keep and where a spatial attention should look.

:func:`load_digits_images` wraps scikit-learn's bundled digits (no download).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

OBJECT_SIZE = 5


@dataclass(frozen=True)
class ObjectImages:
    """A batch of synthetic images with their ground truth.

    ``images (N, C, H, W)``; ``labels (N,)``, the index into ``informative`` of
    the object's channel; ``boxes (N, 4)``, the object's
    ``(top, left, bottom, right)`` (bottom and right exclusive);
    ``informative``, the channels that carry the signal.
    """

    images: torch.Tensor
    labels: torch.Tensor
    boxes: torch.Tensor
    informative: tuple[int, ...]


def _corner(
    size: int, avoid: tuple[int, int] | None, gen: torch.Generator
) -> tuple[int, int]:
    """Top-left corner of a square that keeps a one-pixel gap from the one at
    ``avoid``."""
    while True:
        top, left = torch.randint(
            0, size - OBJECT_SIZE + 1, (2,), generator=gen
        ).tolist()
        if (
            avoid is None
            or max(abs(top - avoid[0]), abs(left - avoid[1])) > OBJECT_SIZE
        ):
            return top, left


def make_object_images(
    n: int,
    *,
    channels: int = 6,
    informative: tuple[int, ...] = (0, 2, 4),
    size: int = 24,
    clutter: float = 0.2,
    noise: float = 0.2,
    seed: int = 0,
) -> ObjectImages:
    """Draw ``n`` images of ``channels x size x size`` (see the module
    docstring).

    The object, a 5x5 square of brightness 1, lies at a random position in one
    of the ``informative`` channels (the label says which). Every channel is
    sprinkled with distractor pixels of brightness 1, each channel of each image
    with its own density drawn from ``[0, clutter)``, so counting bright pixels
    per channel does not give the label away. Every other channel also holds a
    decoy square that does not touch the object. All pixels get Gaussian noise
    of standard deviation ``noise``. Deterministic for a given ``seed``.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if size < 3 * OBJECT_SIZE:
        raise ValueError(f"size must be at least {3 * OBJECT_SIZE}, got {size}")
    if not 0 <= clutter <= 1 or noise < 0:
        raise ValueError(
            f"need 0 <= clutter <= 1 and noise >= 0, got {clutter} and {noise}"
        )
    informative = tuple(sorted(set(informative)))
    if len(informative) < 2 or any(not 0 <= c < channels for c in informative):
        raise ValueError(
            f"informative must name at least two channels in [0, {channels}), "
            f"got {informative}"
        )
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, len(informative), (n,), generator=gen)
    density = clutter * torch.rand(n, channels, 1, 1, generator=gen)
    images = (
        torch.rand(n, channels, size, size, generator=gen) < density
    ).float()
    boxes = torch.zeros(n, 4, dtype=torch.long)
    for i in range(n):
        top, left = _corner(size, None, gen)
        boxes[i] = torch.tensor(
            [top, left, top + OBJECT_SIZE, left + OBJECT_SIZE]
        )
        images[i, informative[labels[i]],
               top : top + OBJECT_SIZE, left : left + OBJECT_SIZE] = 1
        for c in set(range(channels)) - set(informative):
            row, col = _corner(size, (top, left), gen)
            images[i, c, row : row + OBJECT_SIZE, col : col + OBJECT_SIZE] = 1
    images += noise * torch.randn(images.shape, generator=gen)
    return ObjectImages(images, labels, boxes, informative)


def load_digits_images(
    test_fraction: float = 0.25, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """scikit-learn's 1,797 handwritten digits as ``(N, 1, 8, 8)`` images in
    ``[0, 1]``.

    Returns ``(x_train, y_train, x_test, y_test)``, split at random (seeded)
    with ``test_fraction`` of the images held out. Ships with scikit-learn: no
    download.
    """
    from sklearn.datasets import load_digits

    if not 0 < test_fraction < 1:
        raise ValueError(
            f"test_fraction must lie in (0, 1), got {test_fraction}"
        )
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32)[:, None] / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(
        len(y), generator=torch.Generator().manual_seed(seed)
    )
    n_test = round(test_fraction * len(y))
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]
