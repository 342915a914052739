"""Chapter 2's experiment: the scoring functions trained on one retrieval task.

``make_matching_task`` builds the task (find the key that a query is a rotated
copy of), ``train_matching`` trains one score of
:mod:`attention_course.scoring` on it and records validation curves, and
``compare_on_matching`` does that for several scores and seeds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from attention_course.training import train


def random_rotation(
    dim: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """A random orthogonal ``(dim, dim)`` matrix (``M M^T = I``)."""
    if dim < 1:
        raise ValueError(f"dim must be at least 1, got {dim}")
    gaussian = torch.randn(dim, dim, generator=generator)
    q, r = torch.linalg.qr(gaussian)
    # Fix the signs so that the rotation is uniformly distributed.
    return q * torch.sign(torch.diagonal(r))


def make_matching_task(
    num_episodes: int,
    num_keys: int,
    transform: torch.Tensor,
    noise: float = 0.3,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Episodes of a retrieval task: which key is the query a copy of?

    Each episode has ``num_keys`` keys ``k_j ~ N(0, I)`` of size ``dk`` and
    one query ``q = transform @ k_t + noise * N(0, I)`` of size ``dq``, where
    the target ``t`` is drawn uniformly. ``transform`` is ``(dq, dk)``.
    Returns ``q (E, 1, dq)``, ``k (E, num_keys, dk)`` and ``target (E,)``.
    """
    if transform.dim() != 2:
        raise ValueError(
            "transform must be a (dq, dk) matrix; got "
            f"{tuple(transform.shape)}"
        )
    if num_episodes < 1 or num_keys < 1:
        raise ValueError(
            f"num_episodes and num_keys must be at least 1; got "
            f"{num_episodes} and {num_keys}"
        )
    dq, dk = transform.shape
    keys = torch.randn(num_episodes, num_keys, dk, generator=generator)
    target = torch.randint(0, num_keys, (num_episodes,), generator=generator)
    chosen = keys[torch.arange(num_episodes), target]  # (E, dk)
    query = chosen @ transform.T
    query = query + noise * torch.randn(
        num_episodes, dq, generator=generator
    )
    return query[:, None], keys, target


Score = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class MatchingRun:
    """What :func:`train_matching` records: validation accuracy and loss at
    each evaluated ``step`` (1-D tensors of equal length), the trained
    ``score`` and the task's ``transform``."""

    step: torch.Tensor
    accuracy: torch.Tensor
    loss: torch.Tensor
    score: Score
    transform: torch.Tensor


def matching_loss(
    score: Score, q: torch.Tensor, k: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:
    """Cross-entropy of ``softmax(score(q, k))`` against the target key:
    the attention weight on the right key should be 1. ``q (E, 1, dq)``,
    ``k (E, Nk, dk)``, ``target (E,)`` -> a scalar."""
    return F.cross_entropy(score(q, k)[:, 0], target)


def train_matching(
    score: Score,
    transform: torch.Tensor,
    *,
    steps: int = 600,
    eval_every: int = 25,
    batch_size: int = 128,
    lr: float = 1e-2,
    num_keys: int = 8,
    noise: float = 0.3,
    num_val: int = 2000,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> MatchingRun:
    """Train ``score`` on :func:`make_matching_task` episodes with Adam and
    the loss of :func:`matching_loss`, fresh episodes at every step.

    Every ``eval_every`` steps (and before the first) it measures, on
    ``num_val`` validation episodes, the accuracy (the largest weight on the
    target key) and the loss. A score without parameters (a plain function)
    is only evaluated. The curves have ``steps // eval_every + 1`` entries.
    ``generator`` draws the episodes
    (validation first). Runs on one CPU thread: for models this small more
    threads only add overhead.
    """
    if steps < 1 or eval_every < 1 or steps % eval_every:
        raise ValueError(
            "steps and eval_every must be positive, with eval_every "
            f"dividing steps; got steps={steps}, eval_every={eval_every}"
        )
    g = generator if generator is not None else torch.Generator()
    val = make_matching_task(num_val, num_keys, transform, noise, g)
    val = tuple(t.to(device) for t in val)
    params = []
    if isinstance(score, nn.Module):
        params = list(score.to(device).parameters())
    optimizer = torch.optim.Adam(params, lr=lr) if params else None

    def batches() -> Iterator[tuple[torch.Tensor, ...]]:
        while True:
            yield make_matching_task(
                batch_size, num_keys, transform, noise, g
            )

    curve: dict[str, list[float]] = {"step": [], "accuracy": [], "loss": []}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for step in range(0, steps + 1, eval_every):
            if step > 0 and optimizer is not None:
                train(
                    score,
                    lambda s, b: matching_loss(s, *b),
                    batches,
                    max_steps=eval_every,
                    optimizer=optimizer,
                    device=device,
                    progress=False,
                )
            with torch.no_grad():
                scores = score(val[0], val[1])[:, 0]
                curve["step"].append(step)
                curve["accuracy"].append(
                    (scores.argmax(-1) == val[2]).float().mean().item()
                )
                curve["loss"].append(F.cross_entropy(scores, val[2]).item())
    finally:
        torch.set_num_threads(threads)
    return MatchingRun(
        *(
            torch.tensor(curve[name])
            for name in ("step", "accuracy", "loss")
        ),
        score=score,
        transform=transform,
    )


def compare_on_matching(
    makers: dict[str, Callable[[], Score]],
    seeds: list[int],
    dim: int = 8,
    **kwargs: object,
) -> dict[str, list[MatchingRun]]:
    """Train every score of ``makers`` (name -> a function that builds a
    fresh one) on the matching task with each seed; a progress bar counts
    the runs.

    Seed ``s`` fixes the rotation (:func:`random_rotation` of size ``dim``),
    the data and the score's initial parameters, so every score of one seed
    meets the same task. ``kwargs`` go to :func:`train_matching`. Returns
    ``{name: [run of seed 0, run of seed 1, ...]}``.
    """
    runs: dict[str, list[MatchingRun]] = {name: [] for name in makers}
    with tqdm(total=len(makers) * len(seeds), desc="runs") as bar:
        for seed in seeds:
            g = torch.Generator().manual_seed(seed)
            transform = random_rotation(dim, g)
            # Initial parameters from a seed drawn here: seeding torch
            # with ``seed`` itself would repeat the rotation's numbers.
            init_seed = int(torch.randint(2**31, (1,), generator=g))
            state = g.get_state()
            for name, make in makers.items():
                torch.manual_seed(init_seed)
                data = torch.Generator()
                data.set_state(state)  # the same episodes for every score
                runs[name].append(
                    train_matching(
                        make(), transform, generator=data, **kwargs
                    )
                )
                bar.update(1)
    return runs
