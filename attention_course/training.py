"""One small training loop, shared by every chapter that trains something."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from attention_course.device import get_device

Batch = Any


def to_device(batch: Batch, device: torch.device | str) -> Batch:
    """Move every tensor in a (nested) tuple, list or dict to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, Mapping):
        return {key: to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        moved = [to_device(value, device) for value in batch]
        return (type(batch)(moved) if not hasattr(batch, "_fields")
                else type(batch)(*moved))
    return batch


def train(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, Batch], torch.Tensor],
    data: Iterable[Batch] | Callable[[], Iterable[Batch]],
    *,
    epochs: int = 1,
    max_steps: int | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    lr: float = 1e-3,
    grad_clip: float | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    device: torch.device | str | None = None,
    progress: bool = True,
    desc: str = "training",
) -> list[float]:
    """Train ``model`` and return the loss of every step.

    ``loss_fn(model, batch)`` returns a scalar loss for one batch. ``data`` is
    an iterable of batches, or a function returning a fresh one each epoch (for
    example a shuffling loader). Training stops after ``epochs`` passes or
    ``max_steps`` steps, whichever comes first. The optimiser defaults to Adam
    with learning rate ``lr``; ``grad_clip`` clips the global gradient norm. A
    progress bar shows the running loss.
    """
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, got {epochs}")
    if max_steps is not None and max_steps < 1:
        raise ValueError(
            f"max_steps must be at least 1 when given, got {max_steps}"
        )
    device = torch.device(device) if device is not None else get_device()
    model.to(device)
    model.train()
    if optimizer is None:
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    history: list[float] = []
    bar = tqdm(total=max_steps, desc=desc, disable=not progress, leave=True)
    try:
        for epoch in range(epochs):
            batches = data() if callable(data) else data
            if epoch == 0 and hasattr(batches, "__len__"):
                per_run = len(batches) * epochs
                bar.total = (min(per_run, max_steps)
                             if max_steps is not None else per_run)
                bar.refresh()
            for batch in batches:
                loss = loss_fn(model, to_device(batch, device))
                if not torch.isfinite(loss):
                    raise FloatingPointError(
                        f"loss became {loss.item()} at step {len(history)}"
                    )
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if grad_clip is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                history.append(loss.item())
                bar.update(1)
                if len(history) % 10 == 1 or len(history) == bar.total:
                    bar.set_postfix(loss=f"{_running_mean(history):.4f}")
                if max_steps is not None and len(history) >= max_steps:
                    return history
    finally:
        bar.close()
        model.eval()
    return history


def train_with_validation(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, Batch], torch.Tensor],
    data: Iterable[Batch],
    validate: Callable[[nn.Module], Mapping[str, float]],
    *,
    steps: int,
    eval_every: int,
    lr: float = 1e-3,
    optimizer: torch.optim.Optimizer | None = None,
    device: torch.device | str | None = None,
    progress: bool = True,
    desc: str = "training",
) -> tuple[list[float], dict[str, list[float]]]:
    """Train like :func:`train` for ``steps`` steps, and call
    ``validate(model)`` before the first step and after every ``eval_every``
    steps (and after the last one).

    ``data`` is an iterable of batches, passed over as often as ``steps``
    needs. ``validate`` returns named numbers (losses, accuracies) computed
    without gradients, with the model in evaluation mode. Returns the loss of
    every step and the validation curves: ``{"step": [0, eval_every, ...],
    name: [value at each of those steps], ...}``.
    """
    if steps < 1 or eval_every < 1:
        raise ValueError(
            f"steps and eval_every must be at least 1, got {steps} and "
            f"{eval_every}"
        )
    device = torch.device(device) if device is not None else get_device()
    model.to(device)
    if optimizer is None:
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    batches = _forever(data)
    history: list[float] = []
    curves: dict[str, list[float]] = {"step": []}

    def record() -> None:
        model.eval()
        with torch.no_grad():
            values = validate(model)
        curves["step"].append(len(history))
        for name, value in values.items():
            curves.setdefault(name, []).append(float(value))

    record()
    with tqdm(total=steps, desc=desc, disable=not progress) as bar:
        while len(history) < steps:
            chunk = train(
                model, loss_fn, batches, optimizer=optimizer, device=device,
                max_steps=min(eval_every, steps - len(history)),
                progress=False,
            )
            history += chunk
            bar.update(len(chunk))
            bar.set_postfix(loss=f"{_running_mean(history):.4f}")
            record()
    return history, curves


def _forever(data: Iterable[Batch]) -> Iterator[Batch]:
    """The batches of ``data``, pass after pass, without end."""
    while True:
        empty = True
        for batch in data:
            empty = False
            yield batch
        if empty:
            raise ValueError("data yielded no batch")


def _running_mean(values: list[float], window: int = 20) -> float:
    tail = values[-window:]
    return sum(tail) / len(tail) if tail else math.nan
