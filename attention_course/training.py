"""One small training loop, shared by every chapter that trains something."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

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


def _forever(data: Iterable[Batch] | Callable[[], Iterable[Batch]]
             ) -> Iterator[Batch]:
    """The batches of ``data`` (or of ``data()``, called anew for every
    pass), pass after pass, without end."""
    while True:
        empty = True
        for batch in data() if callable(data) else data:
            empty = False
            yield batch
        if empty:
            raise ValueError("data yielded no batch")


def _running_mean(values: list[float], window: int = 20) -> float:
    tail = values[-window:]
    return sum(tail) / len(tail) if tail else math.nan


class Curves(NamedTuple):
    """What :func:`train_with_validation` records: the training loss of every
    step, and each validation metric at the steps in ``steps``."""

    train: list[float]
    steps: list[int]
    val: dict[str, list[float]]


@torch.no_grad()
def evaluate_loss(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, Batch], torch.Tensor],
    batches: Iterable[Batch],
) -> float:
    """Mean of ``loss_fn`` over ``batches``, in eval mode and without
    gradients (one batch holding the whole set gives its exact loss)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    losses = [loss_fn(model, to_device(b, device)).item() for b in batches]
    model.train(was_training)
    if not losses:
        raise ValueError("evaluate_loss needs at least one batch, got none")
    return sum(losses) / len(losses)


def train_with_validation(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, Batch], torch.Tensor],
    data: Iterable[Batch] | Callable[[], Iterable[Batch]],
    evaluate: Callable[[nn.Module], Mapping[str, float]],
    *,
    max_steps: int,
    eval_every: int,
    optimizer: torch.optim.Optimizer | None = None,
    lr: float = 1e-3,
    grad_clip: float | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    device: torch.device | str | None = None,
    progress: bool = True,
    desc: str = "training",
) -> Curves:
    """:func:`train` for ``max_steps`` steps (passing over ``data`` as often as
    needed), with ``evaluate(model)`` (a dict of named metrics, for example
    validation losses) computed before the first step and after every
    ``eval_every`` steps, in evaluation mode and without gradients. The model
    is left in evaluation mode.

    The progress bar shows the running training loss and the latest metrics.
    """
    if max_steps < 1 or eval_every < 1:
        raise ValueError(
            f"max_steps and eval_every must be at least 1, got {max_steps} "
            f"and {eval_every}"
        )
    device = torch.device(device) if device is not None else get_device()
    model.to(device)
    if optimizer is None:
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    stream = _forever(data)

    def measure() -> dict[str, float]:
        model.eval()
        with torch.no_grad():
            return {k: float(v) for k, v in evaluate(model).items()}

    curves = Curves([], [0], {k: [v] for k, v in measure().items()})
    with tqdm(total=max_steps, desc=desc, disable=not progress) as bar:
        while len(curves.train) < max_steps:
            chunk = min(eval_every, max_steps - len(curves.train))
            curves.train.extend(train(
                model, loss_fn, stream, max_steps=chunk, optimizer=optimizer,
                grad_clip=grad_clip, scheduler=scheduler, device=device,
                progress=False,
            ))
            curves.steps.append(len(curves.train))
            metrics = measure()
            for name, value in metrics.items():
                curves.val[name].append(value)
            bar.update(chunk)
            bar.set_postfix(loss=f"{_running_mean(curves.train):.4f}",
                            **{k: f"{v:.4f}" for k, v in metrics.items()})
    return curves


def time_train_step(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, Batch], torch.Tensor],
    batch: Batch,
    *,
    repeats: int = 3,
    warmup: int = 1,
) -> float:
    """Median wall-clock seconds of one training step (forward, backward and
    an Adam update) of ``model`` on ``batch``, after ``warmup`` untimed steps.

    The model's weights change (it takes real steps): time a copy if you want
    to keep them. On a GPU the clock waits for the device to finish.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(
            f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}"
        )
    device = next(model.parameters()).device
    batch = to_device(batch, device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    model.train()
    times = []
    for i in range(warmup + repeats):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model, batch).backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    model.eval()
    return statistics.median(times)
