"""Run-time choices: the device, the seeds and the number of threads.

- Device: CUDA, then Apple's MPS, then the CPU. Set ``ATTENTION_COURSE_DEVICE``
  (for example ``cpu`` or ``cuda:1``) to override.
- Seeds: ``ATTENTION_COURSE_SEED_BASE`` (default 0) shifts every seed the
  chapters use (:func:`seed_everything`, and the experiments' seed lists from
  :func:`attention_course.claims.course_seeds`), to check that what a chapter
  says does not depend on the seeds it was written with.
- Threads: ``ATTENTION_COURSE_THREADS`` overrides the number of torch threads
  a chapter asks for with :func:`set_threads`.
"""

from __future__ import annotations

import os

import torch

ENV_VAR = "ATTENTION_COURSE_DEVICE"
SEED_BASE_ENV = "ATTENTION_COURSE_SEED_BASE"
THREADS_ENV = "ATTENTION_COURSE_THREADS"


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


def _int_from_env(name: str, default: int, minimum: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {text!r}"
                         ) from None
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def seed_base() -> int:
    """``ATTENTION_COURSE_SEED_BASE``, the shift of every seed (default 0)."""
    return _int_from_env(SEED_BASE_ENV, 0, 0)


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python's, NumPy's and torch's generators with ``seed`` shifted by
    ``ATTENTION_COURSE_SEED_BASE``; return a torch CPU generator seeded the
    same way."""
    import random

    import numpy as np

    seed = seed + seed_base()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def set_threads(count: int | None = None) -> int:
    """Use ``count`` torch threads (``None``: leave torch's choice), unless
    ``ATTENTION_COURSE_THREADS`` says otherwise; returns the number in use."""
    wanted = _int_from_env(THREADS_ENV, count or 0, 1) or None
    if wanted is not None and wanted != torch.get_num_threads():
        torch.set_num_threads(wanted)
    return torch.get_num_threads()


def thread_count() -> int:
    """The number of threads torch uses for its operations."""
    return torch.get_num_threads()
