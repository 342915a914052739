"""Chapter 7's experiment: a small CNN trained with each attention block of
:mod:`attention_course.channel_spatial` (SE-Net, Hu et al. 2018; CBAM, Woo et
al. 2018) over several seeds.

:func:`train_variants` trains a :class:`~attention_course.channel_spatial.
SmallCNN` per block and seed and returns the :class:`Run` of each: its losses
and its test accuracy after every epoch (:func:`accuracy`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from attention_course.channel_spatial import SmallCNN
from attention_course.device import get_device
from attention_course.training import train


@dataclass
class Run:
    """One trained :class:`SmallCNN`: its attention block, seed, the loss of
    every step and the test accuracy after every epoch."""

    attention: str
    seed: int
    model: SmallCNN
    losses: list[float]
    test_accuracy: list[float]


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Share of ``x (N, C, H, W)`` classified as ``y (N,)``, in eval mode.

    Leaves the weights of ``x`` in the attention blocks' ``last_weights``.
    """
    model.eval()
    device = next(model.parameters()).device
    predicted = model(x.to(device)).argmax(dim=1).cpu()
    return (predicted == y.cpu()).float().mean().item()


def _cross_entropy(
    model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


def _seed_all(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators with ``seed`` as it is
    (unlike :func:`~attention_course.device.seed_everything`, which adds the
    seed base: a seed handed to a function is already shifted)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train_variants(
    attentions: Sequence[str],
    seeds: Sequence[int],
    train_data: tuple[torch.Tensor, torch.Tensor],
    test_data: tuple[torch.Tensor, torch.Tensor],
    *,
    epochs: int,
    lr: float,
    batch_size: int = 64,
    device: torch.device | str | None = None,
    progress: bool = True,
    desc: str = "training",
    **cnn: Any,
) -> list[Run]:
    """Train a :class:`SmallCNN` per attention block and seed; return the
    runs.

    ``train_data`` and ``test_data`` are ``(images (N, C, H, W), labels
    (N,))``. A seed fixes the initial weights and the order of the batches;
    the data stay the same. The seeds are used as given: pass an
    experiment's seed list (:func:`~attention_course.claims.course_seeds`),
    already shifted by ``ATTENTION_COURSE_SEED_BASE``; they are not shifted
    again here. Adam at learning rate ``lr``, cross-entropy, the
    course's :func:`~attention_course.training.train` loop; the test accuracy
    is measured after every epoch (no model selection: each run keeps its
    last weights). ``cnn`` goes to :class:`SmallCNN` (``attend``, ``width``,
    ...). One progress bar for all runs.
    """
    x, y = train_data
    if x.dim() != 4 or y.shape != (x.shape[0],):
        raise ValueError(
            f"train_data must be images (N, C, H, W) and labels (N,), "
            f"got {tuple(x.shape)} and {tuple(y.shape)}"
        )
    device = torch.device(device) if device is not None else get_device()
    num_classes = int(torch.cat([y, test_data[1]]).max()) + 1
    bar = tqdm(
        total=len(attentions) * len(seeds) * epochs,
        desc=desc,
        disable=not progress,
    )
    runs = []
    try:
        for attention in attentions:
            for seed in seeds:
                _seed_all(seed)
                model = SmallCNN(x.shape[1], num_classes, attention, **cnn)
                model.to(device)
                optimizer = torch.optim.Adam(model.parameters(), lr=lr)
                batches = DataLoader(
                    TensorDataset(x, y),
                    batch_size=batch_size,
                    shuffle=True,
                    generator=torch.Generator().manual_seed(seed),
                )
                run = Run(attention, seed, model, [], [])
                for _ in range(epochs):
                    run.losses += train(
                        model, _cross_entropy, batches, optimizer=optimizer,
                        device=device, progress=False,
                    )
                    run.test_accuracy.append(accuracy(model, *test_data))
                    bar.update(1)
                    bar.set_postfix_str(
                        f"{attention}, seed {seed}: "
                        f"test accuracy {run.test_accuracy[-1]:.3f}"
                    )
                runs.append(run)
    finally:
        bar.close()
    return runs
