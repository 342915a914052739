"""Chapter 1's regression data: ``y = 2 sin(x) + x^0.8 + noise`` on
``[0, 5)``."""

from __future__ import annotations

from dataclasses import dataclass

import torch


def true_function(x: torch.Tensor) -> torch.Tensor:
    """The noiseless curve ``2 sin(x) + x^0.8``."""
    return 2 * torch.sin(x) + x.clamp_min(0) ** 0.8


@dataclass(frozen=True)
class RegressionData:
    """Training pairs (the keys and values) and held-out test pairs
    (queries and targets).

    ``x_train`` and ``x_test`` are sorted ``(n,)`` tensors; ``y_*`` hold the
    noisy targets and ``truth_test`` the noiseless curve at ``x_test``.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    truth_test: torch.Tensor


def make_regression_data(
    n_train: int = 50, n_test: int = 50, noise: float = 0.5, seed: int = 0
) -> RegressionData:
    """Draw training inputs uniformly from ``[0, 5)`` and evenly spaced
    test inputs.

    Deterministic for a given ``seed``.
    """
    if n_train < 2 or n_test < 1:
        raise ValueError(
            f"need n_train >= 2 and n_test >= 1, got {n_train} and {n_test}"
        )
    if noise < 0:
        raise ValueError(f"noise must be non-negative, got {noise}")
    g = torch.Generator().manual_seed(seed)
    x_train, _ = torch.sort(torch.rand(n_train, generator=g) * 5)
    noise_train = noise * torch.randn(n_train, generator=g)
    y_train = true_function(x_train) + noise_train
    x_test = torch.linspace(0, 5, n_test + 1)[:-1] + 2.5 / n_test
    truth = true_function(x_test)
    y_test = truth + noise * torch.randn(n_test, generator=g)
    return RegressionData(x_train, y_train, x_test, y_test, truth)
