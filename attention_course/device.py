"""Run-time device choice: CUDA, then Apple's MPS, then the CPU.

Set ``ATTENTION_COURSE_DEVICE`` (for example ``cpu`` or ``cuda:1``) to override.
"""

from __future__ import annotations

import os

import torch

ENV_VAR = "ATTENTION_COURSE_DEVICE"


def get_device(prefer: str | None = None) -> torch.device:
    """Return the device the course should run on.

    ``prefer`` (or the ``ATTENTION_COURSE_DEVICE`` environment variable) wins
    when given; otherwise the first available of ``cuda``, ``mps`` and ``cpu``.
    """
    choice = prefer or os.environ.get(ENV_VAR, "").strip()
    if choice:
        device = torch.device(choice)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(
                f"{ENV_VAR}={choice!r} asks for CUDA, but CUDA is not available"
            )
        if device.type == "mps" and not _mps_available():
            raise ValueError(
                f"{ENV_VAR}={choice!r} asks for MPS, but MPS is not available"
            )
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python's, NumPy's and torch's generators; return a torch
    CPU generator."""
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)
