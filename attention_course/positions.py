"""Chapter 8: where am I? Position information, and how far it reaches.

Attention alone does not see order: permute the keys and values together
and every query's output stays the same. A model learns where tokens are in
one of two ways.

* **Absolute** positions are added to the token embeddings: the sinusoidal
  table of Vaswani et al. 2017
  (:func:`attention_course.transformer.sinusoidal_positional_encoding`) or a
  learned table (:class:`LearnedPositionalEmbedding`, Gehring et al. 2017;
  BERT, GPT-2), which has no row for a position beyond ``max_len``.
* **Relative** positions enter attention itself. Rotary embeddings
  (RoPE, Su et al. 2021, :func:`rotary_embedding`) rotate queries and keys so
  that a score ``q . k`` depends on the offset ``p - s`` between their
  positions only. ALiBi (Press et al. 2022, :func:`alibi_bias`) adds
  ``-m_h (i - j)`` to the scores: a linear penalty on distance with one slope
  ``m_h`` per head, and no parameters at all. T5 (Raffel et al. 2020,
  :class:`RelativePositionBias`) learns such a bias instead, one number per
  head and bucket of distances.

:class:`attention_course.multihead.MultiHeadAttention` takes
``positional="rope"`` or ``"alibi"``, and
:class:`attention_course.transformer.Transformer` takes
``positional="sinusoidal" | "learned" | "rope" | "alibi" | "none"``.
Shapes are batch-first; a float bias is added to the scores, ``-inf`` removes
a position.

The experiment of the chapter (:func:`length_extrapolation`) trains a small
decoder-only model (:class:`CausalTransformer`) with each scheme on short
sequences of a task where the nearest match wins
(:func:`latest_value_task`), and tests it on longer ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from attention_course.masking import query_start
from attention_course.training import to_device, train


def rotary_embedding(x: Tensor, positions: Tensor | None = None,
                     base: float = 10000.0) -> Tensor:
    """Rotate ``x (..., N, d)`` pair by pair by angles that grow with the
    position (RoPE).

    Features are paired as **adjacent pairs** ``(x[2i], x[2i+1])``,
    ``i = 0 .. d/2 - 1``, as in the derivation of Su et al., where pair
    ``i`` is the complex number ``x[2i] + 1j * x[2i+1]``; the pair at
    position ``p`` is turned by the angle ``p * theta_i`` with
    ``theta_i = base^(-2i/d)``::

        out[2i]     = x[2i] cos(p theta_i) - x[2i+1] sin(p theta_i)
        out[2i + 1] = x[2i] sin(p theta_i) + x[2i+1] cos(p theta_i)

    (Many code bases pair ``x[i]`` with ``x[i + d/2]`` instead, "rotate
    half": the same rotations of permuted features, so weights do not carry
    over between the two.)

    ``positions`` defaults to ``0 .. N-1``; otherwise a tensor (integer or
    float) broadcastable to ``x.shape[:-1]``, e.g. ``(N,)`` or
    ``(B, 1, N)`` for per-sequence positions. Position 0 is the identity,
    norms are kept, and since rotations compose,
    ``<R_p q, R_s k> = <q, R_(s-p) k>`` depends only on ``p - s``.
    Computed in float32 (or float64 for float64 input) and returned in
    ``x``'s dtype and shape.
    """
    if x.dim() < 2 or x.size(-1) % 2:
        raise ValueError(f"x must be (..., N, d) with an even d; got shape "
                         f"{tuple(x.shape)}")
    length, dim = x.shape[-2], x.shape[-1]
    work = torch.promote_types(x.dtype, torch.float32)
    if positions is None:
        positions = torch.arange(length, device=x.device)
    else:
        try:
            fits = (torch.broadcast_shapes(positions.shape, x.shape[:-1])
                    == x.shape[:-1])
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(f"positions of shape "
                             f"{tuple(positions.shape)} do not broadcast to "
                             f"x.shape[:-1] = {tuple(x.shape[:-1])}")
    # (d/2,)
    theta = base ** (
        -torch.arange(0, dim, 2, device=x.device, dtype=work) / dim
    )
    # (..., N, d/2)
    angle = positions.to(device=x.device, dtype=work)[..., None] * theta
    cos, sin = angle.cos(), angle.sin()
    # x[..., 0::2], x[..., 1::2]
    even, odd = x.to(work).unflatten(-1, (dim // 2, 2)).unbind(-1)
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos],
                          dim=-1)
    return rotated.flatten(-2).to(x.dtype)


def relative_distances(n: int, num_keys: int | None = None,
                       align: str = "top_left", device=None) -> Tensor:
    """Long ``(n, num_keys)``: query position minus key position, ``i - j``
    for keys behind.

    ``num_keys`` defaults to ``n``; ``align`` places the queries among the
    keys as :func:`attention_course.masking.causal_mask` does
    (``"bottom_right"``: the queries are the last ``n`` positions, so query
    ``i`` is at ``i + num_keys - n``).
    """
    start = query_start(n, num_keys, align)
    num_keys = n if num_keys is None else num_keys
    return (torch.arange(n, device=device)[:, None] + start
            - torch.arange(num_keys, device=device))


def alibi_slopes(num_heads: int) -> Tensor:
    """ALiBi's slopes ``m_h = 2^(-8h / num_heads)``, ``h = 1..num_heads``:
    float32 ``(num_heads,)``.

    For 8 heads: ``1/2, 1/4, ..., 1/256``, a geometric sequence from
    ``2^(-8/H)`` to ``2^(-8)``. (Press et al. use this formula for powers of
    two and, for other head counts, interleave two such sequences; the course
    uses the formula for every count.)
    """
    if (isinstance(num_heads, bool) or not isinstance(num_heads, int)
            or num_heads <= 0):
        raise ValueError(f"num_heads must be a positive int, "
                         f"got {num_heads!r}")
    h = torch.arange(1, num_heads + 1, dtype=torch.float64)
    return (2.0 ** (-8.0 * h / num_heads)).float()


def alibi_bias(num_heads: int, n: int, num_keys: int | None = None,
               causal: bool = True, align: str = "top_left",
               device=None) -> Tensor:
    """The ALiBi bias added to the scores: float
    ``(num_heads, n, num_keys)``.

    ``bias[h, i, j] = -m_h * (i - j)`` for keys at or before the query
    (``j <= i``), with the slopes ``m_h`` of :func:`alibi_slopes`: the
    further back a key, the lower its score, in every head at its own rate.
    For keys *after* the query (``j > i``): ``causal=True`` gives ``-inf``,
    the look-ahead mask of a decoder (as ALiBi was introduced, for language
    models); ``causal=False`` gives ``-m_h * (j - i)``, the symmetric bias
    ``-m_h |i - j|`` of a bidirectional encoder.

    ``num_keys`` defaults to ``n``. With a different number of keys,
    ``align`` places the queries as
    :func:`attention_course.masking.causal_mask` does: ``"top_left"`` (query
    ``i`` at position ``i``) or ``"bottom_right"`` (the queries are the last
    ``n`` of ``num_keys`` positions, as new tokens attending to a KV cache).
    """
    distance = relative_distances(n, num_keys, align, device)
    slopes = alibi_slopes(num_heads).to(device)
    bias = -slopes[:, None, None] * distance.abs()
    if causal:
        bias = bias.masked_fill(distance < 0, float("-inf"))
    return bias


class LearnedPositionalEmbedding(nn.Module):
    """Add a trainable table ``(max_len, d_model)``, a vector per position,
    to ``(B, N, d_model)``.

    Unlike the sinusoidal table, a learned one has nothing to say about
    positions it never saw: position ``max_len`` and beyond have no row, and
    asking for them is an error; rows below ``max_len`` that no training
    sequence reached keep their random start. Rows start as
    ``N(0, 0.02^2)`` (as in BERT and GPT-2).
    """

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.table = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """``x (B, N, d_model)`` at positions ``offset .. offset + N - 1`` ->
        same shape."""
        d_model = self.table.embedding_dim
        if x.dim() != 3 or x.size(-1) != d_model:
            raise ValueError(f"x must be (B, N, d_model={d_model}); got "
                             f"shape {tuple(x.shape)}")
        last = offset + x.size(1) - 1
        if offset < 0 or last >= self.max_len:
            raise ValueError(f"a learned table has rows for positions "
                             f"0..{self.max_len - 1} only "
                             f"(max_len={self.max_len}); got positions "
                             f"{offset}..{last} (x of shape "
                             f"{tuple(x.shape)}, offset={offset})")
        positions = torch.arange(offset, offset + x.size(1), device=x.device)
        return x + self.table(positions).to(x.dtype)


def relative_position_bucket(distance: Tensor, num_buckets: int = 32,
                             max_distance: int = 128,
                             bidirectional: bool = True) -> Tensor:
    """T5's buckets for ``distance`` = query position - key position
    (Raffel et al. 2020).

    Near distances get a bucket each; from ``num_buckets // 2`` (half of the
    buckets for one direction) on, buckets widen logarithmically up to
    ``max_distance``, and all further distances share the last bucket.
    ``bidirectional=True`` splits the buckets between keys behind the query
    (``distance >= 0``) and keys ahead of it; ``bidirectional=False`` (a
    decoder) puts every key ahead in bucket 0. Same shape, long.
    """
    buckets = torch.zeros_like(distance)
    if bidirectional:
        num_buckets //= 2
        buckets = (distance < 0).long() * num_buckets
        distance = distance.abs()
    else:
        distance = distance.clamp(min=0)
    exact = num_buckets // 2
    far = exact + (torch.log(distance.float().clamp(min=1) / exact)
                   / math.log(max_distance / exact)
                   * (num_buckets - exact)).long()
    far = far.clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < exact, distance, far)


class RelativePositionBias(nn.Module):
    """T5's learned relative position bias: one number per head and
    distance bucket.

    Called as ``bias(n, num_keys=None, align="top_left")`` it returns the
    float ``(num_heads, n, num_keys)`` to add to the scores (pass it as a
    float ``attn_mask``): ``table[bucket(i - j), h]`` with the buckets of
    :func:`relative_position_bucket`. Like ALiBi it depends on distances
    only, but it learns how much each distance matters; the table starts at
    zero (no preference).
    """

    def __init__(self, num_heads: int, num_buckets: int = 32,
                 max_distance: int = 128,
                 bidirectional: bool = True) -> None:
        super().__init__()
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.bidirectional = bidirectional
        self.table = nn.Embedding(num_buckets, num_heads)
        nn.init.zeros_(self.table.weight)

    def forward(self, n: int, num_keys: int | None = None,
                align: str = "top_left") -> Tensor:
        distance = relative_distances(n, num_keys, align,
                                      self.table.weight.device)
        buckets = relative_position_bucket(distance, self.num_buckets,
                                           self.max_distance,
                                           self.bidirectional)
        # (n, num_keys, heads) -> (heads, n, keys)
        return self.table(buckets).permute(2, 0, 1)


# ---------------------------------------------------------- the experiment
# Chapter 8 asks what each scheme does on sequences longer than any seen in
# training. The task, the model and the measurement live here so that the
# chapter shows them and the tests check them.

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
        # imported here: the transformer module imports this one
        from attention_course.transformer import (
            POSITIONAL,
            Encoder,
            PositionalEncoding,
        )

        super().__init__()
        if positional not in POSITIONAL:
            raise ValueError(f"positional must be one of {POSITIONAL}, "
                             f"got {positional!r}")
        self.d_model, self.max_len = d_model, max_len
        self.positional = positional
        self.embedding = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)
        in_attention = (positional if positional in ("rope", "alibi")
                        else None)
        self.layers = Encoder(num_layers, d_model, num_heads, d_ff,
                              norm_first=True, positional=in_attention)
        self.output = nn.Linear(d_model, num_classes)
        self.table: nn.Module | None = None
        if positional == "sinusoidal":
            self.table = PositionalEncoding(d_model, max_len)
        elif positional == "learned":
            self.table = LearnedPositionalEmbedding(max_len, d_model)

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
