"""Chapter 8's experiment: how far each position scheme reaches beyond the
training length.

:func:`length_extrapolation` trains a small decoder-only model
(:class:`CausalTransformer`) with each scheme on short sequences of a task where
the nearest match wins (:func:`latest_value_task`), and tests it on longer
ones. The schemes are those of :mod:`attention_course.positions` (imported
here, which registers them) and chapter 6's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

import attention_course.positions  # noqa: F401  (registers the schemes)
from attention_course.training import to_device, train
from attention_course.transformer import position_scheme
from attention_course.transformer_layers import Encoder

IGNORE = -100  # a target that the loss and the accuracy skip
TEST_SEED = 2**31 - 1  # the test sequences: the same for every run


def latest_value_task(batch_size: int, length: int, num_registers: int = 4,
                      num_values: int = 8,
                      generator: torch.Generator | None = None
                      ) -> tuple[Tensor, Tensor]:
    """Random writes to a few registers, each labelled with what its register
    held before it.

    Token ``r * num_values + v`` writes the value ``v`` into register ``r``;
    every sequence starts with a ``<bos>`` token, id
    ``num_registers * num_values``. The target of a write is the value the
    register held just before: the value of the latest earlier write to the
    same register, or ``num_values`` ("empty") if there was none. To
    answer, a model must find the earlier writes to the register, and among
    them the *latest*: positions matter, and the nearest match is the right
    one.

    Returns ``ids`` and ``targets``, long ``(batch_size, length + 1)``; the
    target of ``<bos>`` is ``IGNORE``.
    """
    if min(batch_size, length, num_registers, num_values) < 1:
        raise ValueError(f"batch_size, length, num_registers and num_values "
                         f"must be positive; got {batch_size}, {length}, "
                         f"{num_registers}, {num_values}")
    register = torch.randint(num_registers, (batch_size, length),
                             generator=generator)
    value = torch.randint(num_values, (batch_size, length),
                          generator=generator)
    held = torch.full((batch_size, num_registers), num_values)
    targets = torch.empty_like(value)
    for t in range(length):
        r = register[:, t: t + 1]
        targets[:, t] = held.gather(1, r)[:, 0]
        held.scatter_(1, r, value[:, t: t + 1])
    bos = torch.full((batch_size, 1), num_registers * num_values)
    ignore = torch.full((batch_size, 1), IGNORE)
    return (torch.cat([bos, register * num_values + value], 1),
            torch.cat([ignore, targets], 1))


class CausalTransformer(nn.Module):
    """A decoder-only Transformer that labels every position of a sequence.

    Token embeddings (scaled by ``sqrt(d_model)``), then position information
    as ``positional`` says (``"sinusoidal"``, ``"learned"``, ``"rope"``,
    ``"alibi"`` or ``"none"``, as in
    :class:`~attention_course.transformer.Transformer`), then
    ``num_layers`` pre-norm layers of causal self-attention and feed-forward
    network (the encoder stack of chapter 6 with a look-ahead mask), then a
    linear layer to ``num_classes`` scores per position. Position ``t`` sees
    positions ``0..t`` only, so its output does not depend on the sequence's
    length. A table (sinusoidal or learned) has ``max_len`` rows.

    Every scheme builds the same layers with the same random numbers, and the
    learned table comes last: at a given seed, models of different schemes
    start from the same weights, apart from the table.
    """

    def __init__(self, vocab_size: int, num_classes: int, d_model: int,
                 num_heads: int, num_layers: int, d_ff: int, max_len: int,
                 positional: str = "sinusoidal") -> None:
        super().__init__()
        scheme = position_scheme(positional)
        self.d_model, self.max_len = d_model, max_len
        self.positional = positional
        self.embedding = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)
        self.layers = Encoder(
            num_layers, d_model, num_heads, d_ff, norm_first=True,
            positions=None if scheme.in_attention is None
            else scheme.in_attention())
        self.output = nn.Linear(d_model, num_classes)
        self.table = (None if scheme.table is None
                      else scheme.table(max_len, d_model))

    def forward(self, ids: Tensor, need_weights: bool = False
                ) -> tuple[Tensor, list[Tensor | None]]:
        """``ids (B, N)`` -> scores ``(B, N, num_classes)`` and the attention
        weights of every layer (``(B, heads, N, N)`` each, or ``None``)."""
        if ids.dim() != 2:
            raise ValueError(f"ids must be (B, N) token ids; got shape "
                             f"{tuple(ids.shape)}")
        x = self.embedding(ids) * math.sqrt(self.d_model)
        if self.table is not None:
            x = self.table(x)
        causal = torch.ones(ids.size(1), ids.size(1), dtype=torch.bool,
                            device=ids.device).tril()
        x, weights = self.layers(x, causal, need_weights)
        return self.output(x), weights


@dataclass
class ExtrapolationSetup:
    """Everything that stays the same across schemes and seeds: the task, the
    model's size and the training."""

    train_length: int = 16
    test_length: int = 64
    num_registers: int = 4
    num_values: int = 8
    d_model: int = 32
    num_heads: int = 4
    num_layers: int = 2
    d_ff: int = 64
    steps: int = 250
    batch_size: int = 64
    lr: float = 1e-2
    eval_every: int = 50
    eval_sequences: int = 512

    def model(self, positional: str, seed: int) -> CausalTransformer:
        """A fresh model; its tables reach ``test_length`` (and
        ``<bos>``)."""
        torch.manual_seed(seed)
        return CausalTransformer(
            self.num_registers * self.num_values + 1, self.num_values + 1,
            self.d_model, self.num_heads, self.num_layers, self.d_ff,
            self.test_length + 1, positional,
        )

    def batches(self, seed: int, count: int, batch_size: int,
                length: int) -> list[tuple[Tensor, Tensor]]:
        """``count`` batches of the task, the same for every scheme at a
        seed."""
        g = torch.Generator().manual_seed(seed)
        ids, targets = latest_value_task(count * batch_size, length,
                                         self.num_registers, self.num_values,
                                         g)
        return list(zip(ids.split(batch_size), targets.split(batch_size),
                        strict=True))


def label_loss(model: CausalTransformer,
               batch: tuple[Tensor, Tensor]) -> Tensor:
    """Cross-entropy of the labels of every position, ``IGNORE`` skipped."""
    ids, targets = batch
    scores, _ = model(ids)
    return F.cross_entropy(scores.flatten(0, 1), targets.flatten(),
                           ignore_index=IGNORE)


@torch.no_grad()
def accuracy_by_position(model: CausalTransformer, ids: Tensor,
                         targets: Tensor) -> Tensor:
    """Float ``(N,)``: the share of right labels at each position, over the
    batch (``NaN`` where every target is ``IGNORE``)."""
    model.eval()
    right = (model(ids)[0].argmax(-1) == targets).float()
    counted = (targets != IGNORE).float()
    return (right * counted).sum(0) / counted.sum(0)


@dataclass
class Run:
    """One trained model: its scheme and seed, the loss of every step, and
    the accuracy at every position of the test sequences after every
    ``eval_every`` steps (``accuracy[k, t]``: after ``steps[k]`` steps, at
    write ``t + 1``)."""

    positional: str
    seed: int
    model: CausalTransformer
    losses: list[float]
    steps: list[int]
    accuracy: Tensor


def train_scheme(setup: ExtrapolationSetup, positional: str, seed: int,
                 device: torch.device | str | None = None) -> Run:
    """Train one model on ``setup.train_length`` writes; test it on
    ``setup.test_length`` writes as it trains.

    Adam with a one-cycle learning rate (warm-up over the first 10% of the
    steps). Like every ``OneCycleLR`` with its default ``cycle_momentum``, the
    schedule also moves Adam's beta1 against the learning rate, from 0.95
    down to 0.85 at the peak and back, overriding Adam's own 0.9. The training
    batches depend on the seed only, and the test sequences on nothing: every
    scheme sees the same data.
    """
    model = setup.model(positional, seed)
    batches = setup.batches(seed, setup.steps, setup.batch_size,
                            setup.train_length)
    (test,) = setup.batches(TEST_SEED, 1, setup.eval_sequences,
                            setup.test_length)
    optimizer = torch.optim.Adam(model.parameters(), lr=setup.lr,
                                 foreach=True)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=setup.lr, total_steps=setup.steps, pct_start=0.1,
        cycle_momentum=True)  # the default, spelled out: beta1 cycles too
    losses, steps, accuracy = [], [], []
    for start in range(0, setup.steps, setup.eval_every):
        losses += train(model, label_loss,
                        batches[start: start + setup.eval_every],
                        optimizer=optimizer, scheduler=scheduler,
                        device=device, progress=False)
        steps.append(len(losses))
        ids, targets = to_device(test, next(model.parameters()).device)
        accuracy.append(accuracy_by_position(model, ids, targets)[1:].cpu())
    return Run(positional, seed, model, losses, steps, torch.stack(accuracy))


def length_extrapolation(setup: ExtrapolationSetup, schemes: Sequence[str],
                         seeds: Sequence[int],
                         device: torch.device | str | None = None
                         ) -> dict[str, list[Run]]:
    """Train every scheme with every seed (:func:`train_scheme`), with one
    progress bar; ``{scheme: [run per seed]}``."""
    runs: dict[str, list[Run]] = {scheme: [] for scheme in schemes}
    with tqdm(total=len(schemes) * len(seeds), desc="models") as bar:
        for scheme in schemes:
            for seed in seeds:
                bar.set_postfix(scheme=scheme, seed=seed)
                run = train_scheme(setup, scheme, seed, device)
                runs[scheme].append(run)
                bar.update(1)
    return runs
