"""Section 5.4's experiment: a task on which heads specialise.

:func:`lookup_batch` makes a task whose answer at every position needs two
kinds of context (the previous token, and the token of the same colour),
:class:`LookupModel` solves it with one multi-head layer
(:class:`~attention_course.multihead.MultiHeadAttention`), and
:func:`head_diversity` and :func:`head_roles` measure how far the trained heads
differ and what each one looks at.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from attention_course.device import get_device
from attention_course.multihead import MultiHeadAttention
from attention_course.training import to_device, train

IGNORE = -100  # the target of a position that has no previous token


class LookupBatch(NamedTuple):
    """A batch of the previous-and-partner task; every field is ``(B, N)``.

    ``colours`` and ``values`` are the input tokens. The targets:
    ``previous``, the value of token ``i - 1`` (``IGNORE`` at ``i = 0``), and
    ``partner_value``, the value of ``partner``, the position of the other
    token with the same colour.
    """

    colours: Tensor
    values: Tensor
    previous: Tensor
    partner: Tensor
    partner_value: Tensor


def lookup_batch(batch_size: int, length: int = 12, num_values: int = 8,
                 generator: torch.Generator | None = None) -> LookupBatch:
    """``batch_size`` random sequences of ``length`` tokens, each a colour
    and a value; every one of the ``length // 2`` colours appears twice."""
    if batch_size < 1 or length < 2 or length % 2 or num_values < 2:
        raise ValueError(f"need batch_size >= 1, an even length >= 2 and "
                         f"num_values >= 2; got batch_size={batch_size}, "
                         f"length={length}, num_values={num_values}")
    order = torch.rand(batch_size, length, generator=generator).argsort(-1)
    colours = order % (length // 2)                     # each colour twice
    values = torch.randint(num_values, (batch_size, length),
                           generator=generator)
    same = colours[:, :, None] == colours[:, None, :]   # (B, N, N)
    same &= ~torch.eye(length, dtype=torch.bool)        # not itself
    partner = same.int().argmax(-1)                     # (B, N)
    previous = values.roll(1, dims=1)
    previous[:, 0] = IGNORE                             # no token before 0
    return LookupBatch(colours, values, previous, partner,
                       values.gather(1, partner))


class LookupModel(nn.Module):
    """Embeddings, one multi-head self-attention layer, a linear read-out.

    Token ``i`` enters as the sum of its colour's and its value's embedding
    and a learned vector for position ``i`` (without it, attention could not
    find "the previous token"). The read-out sees only the attention output,
    so everything it predicts has come through the heads.
    """

    def __init__(self, num_heads: int, embed_dim: int = 32, length: int = 12,
                 num_values: int = 8) -> None:
        super().__init__()
        self.length, self.num_values = length, num_values
        self.colour_embedding = nn.Embedding(length // 2, embed_dim)
        self.value_embedding = nn.Embedding(num_values, embed_dim)
        self.position = nn.Parameter(torch.randn(length, embed_dim))
        self.attention = MultiHeadAttention(embed_dim, num_heads)
        self.readout = nn.Linear(embed_dim, 2 * num_values)

    def forward(self, colours: Tensor, values: Tensor,
                need_weights: bool = False
                ) -> tuple[Tensor, Tensor, Tensor | None]:
        """``colours``, ``values (B, N)`` -> logits for the previous token's
        value and for the partner's, each ``(B, N, num_values)``, and the
        weights ``(B, num_heads, N, N)`` when ``need_weights``."""
        if colours.shape != values.shape or colours.shape[-1] != self.length:
            raise ValueError(f"colours and values must both be (B, "
                             f"{self.length}); got {tuple(colours.shape)} "
                             f"and {tuple(values.shape)}")
        x = (self.colour_embedding(colours) + self.value_embedding(values)
             + self.position)
        mixed, weights = self.attention(x, x, x, need_weights=need_weights)
        previous, partner = self.readout(mixed).chunk(2, dim=-1)
        return previous, partner, weights


def lookup_loss(model: LookupModel, batch: LookupBatch) -> Tensor:
    """Cross-entropy of both predictions, summed (position 0's previous
    token is ignored)."""
    previous, partner, _ = model(batch.colours, batch.values)
    return (F.cross_entropy(previous.flatten(0, 1), batch.previous.flatten(),
                            ignore_index=IGNORE)
            + F.cross_entropy(partner.flatten(0, 1),
                              batch.partner_value.flatten()))


@torch.no_grad()
def lookup_accuracy(model: LookupModel, batch: LookupBatch) -> Tensor:
    """``(2,)``: the share of right answers for the previous token's value
    and for the partner's value."""
    previous, partner, _ = model(batch.colours, batch.values)
    has_previous = batch.previous != IGNORE
    right = previous.argmax(-1) == batch.previous
    return torch.stack([
        right[has_previous].float().mean(),
        (partner.argmax(-1) == batch.partner_value).float().mean(),
    ]).cpu()


def head_diversity(weights: Tensor) -> Tensor:
    """How different the heads' maps are: a number in ``[0, 1]``.

    ``weights (B, h, Nq, Nk)`` with ``h >= 2``. For every pair of different
    heads and every query, the total variation distance between their rows,
    ``0.5 * sum_j |w_a[j] - w_b[j]|`` (0 for the same row, 1 for rows that
    put their weight on different keys), averaged over pairs, queries and
    the batch.
    """
    if weights.dim() != 4 or weights.size(1) < 2:
        raise ValueError(f"weights must be (B, h, Nq, Nk) with h >= 2 "
                         f"heads; got shape {tuple(weights.shape)}")
    heads = weights.size(1)
    rows = weights[:, :, None] - weights[:, None]       # (B, h, h, Nq, Nk)
    distance = 0.5 * rows.abs().sum(-1).mean((0, 3))    # (h, h)
    pairs = ~torch.eye(heads, dtype=torch.bool, device=weights.device)
    return distance[pairs].mean()


def head_roles(weights: Tensor, partner: Tensor) -> Tensor:
    """``(h, 2)``: each head's mean weight on the previous token (queries 1
    to N - 1) and on the partner (every query).

    ``weights (B, h, N, N)`` from a :class:`LookupModel`, ``partner (B, N)``
    from its :class:`LookupBatch`.
    """
    if weights.dim() != 4 or partner.shape != (weights.size(0),
                                               weights.size(2)):
        raise ValueError(f"weights must be (B, h, N, N) and partner (B, N); "
                         f"got {tuple(weights.shape)} and "
                         f"{tuple(partner.shape)}")
    batch, heads, n, _ = weights.shape
    query = torch.arange(1, n, device=weights.device)
    on_previous = weights[:, :, query, query - 1].mean((0, 2))
    index = partner[:, None, :, None].expand(batch, heads, n, 1)
    on_partner = weights.gather(-1, index.to(weights.device)).mean((0, 2, 3))
    return torch.stack([on_previous, on_partner], dim=-1)


class LookupRun(NamedTuple):
    """One training run: the model before and after, the loss of every
    step, and the validation accuracy ``(len(steps), 2)`` (previous,
    partner) measured at ``steps``."""

    num_heads: int
    seed: int
    untrained: LookupModel
    trained: LookupModel
    losses: list[float]
    steps: list[int]
    accuracy: Tensor


def lookup_batches(batch_size: int, generator: torch.Generator,
                   **task: int) -> Iterator[LookupBatch]:
    """Fresh batches of :func:`lookup_batch`, without end."""
    while True:
        yield lookup_batch(batch_size, generator=generator, **task)


def train_lookup(num_heads: int, seed: int, validation: LookupBatch, *,
                 steps: int = 250, eval_every: int = 25,
                 batch_size: int = 64, lr: float = 3e-3,
                 embed_dim: int = 32, num_values: int = 8,
                 device: torch.device | str | None = None,
                 on_step: Callable[[int], None] | None = None) -> LookupRun:
    """Train a :class:`LookupModel` with ``num_heads`` heads from ``seed``
    (which fixes its initial weights and its training batches) with Adam,
    measuring accuracy on ``validation`` every ``eval_every`` steps.

    ``on_step(n)`` is called after each block of ``n`` steps (a progress
    bar's ``update``).
    """
    if steps < 1 or eval_every < 1:
        raise ValueError(f"steps and eval_every must be positive; got "
                         f"steps={steps}, eval_every={eval_every}")
    if int(validation.values.max()) >= num_values:
        raise ValueError(f"validation holds values up to "
                         f"{int(validation.values.max())}, more than "
                         f"num_values={num_values} allows")
    device = torch.device(device) if device is not None else get_device()
    length = validation.colours.size(1)
    torch.manual_seed(seed)
    model = LookupModel(num_heads, embed_dim, length, num_values).to(device)
    untrained = copy.deepcopy(model).eval()
    validation = to_device(validation, device)
    data = lookup_batches(batch_size, torch.Generator().manual_seed(seed),
                          length=length, num_values=num_values)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses: list[float] = []
    measured_at, accuracy = [0], [lookup_accuracy(model, validation)]
    while len(losses) < steps:
        block = min(eval_every, steps - len(losses))
        losses += train(model, lookup_loss, data, max_steps=block,
                        optimizer=optimizer, device=device, progress=False)
        measured_at.append(len(losses))
        accuracy.append(lookup_accuracy(model, validation))
        if on_step is not None:
            on_step(block)
    return LookupRun(num_heads, seed, untrained, model, losses, measured_at,
                     torch.stack(accuracy))


def head_count_experiment(head_counts: Sequence[int], seeds: Sequence[int],
                          validation: LookupBatch, *, steps: int = 250,
                          num_threads: int | None = 1, progress: bool = True,
                          **options: Any) -> list[LookupRun]:
    """:func:`train_lookup` for every head count and seed, under one progress
    bar; ``options`` go to :func:`train_lookup`.

    On a CPU the runs use ``num_threads`` threads (``None``: leave torch's
    setting), restored afterwards. The default is one: the matrices are so
    small that further threads only wait for each other, which on a busy
    machine made training many times slower.
    """
    runs = []
    total = len(head_counts) * len(seeds) * steps
    threads = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    try:
        with tqdm(total=total, desc="training", disable=not progress) as bar:
            for num_heads in head_counts:
                for seed in seeds:
                    bar.set_postfix(heads=num_heads, seed=seed)
                    runs.append(train_lookup(
                        num_heads, seed, validation, steps=steps,
                        on_step=bar.update, **options,
                    ))
    finally:
        torch.set_num_threads(threads)
    return runs
