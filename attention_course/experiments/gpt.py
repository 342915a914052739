"""Chapter 11's experiment: a small GPT trained on Python's standard library.

:func:`load_corpus` reads the source files of the standard library of the
Python that runs it (found through :mod:`sysconfig`), in a fixed order, and
splits them into training and validation text by file; :class:`TokenData`
holds them as token ids. :func:`train_gpt` trains a
:class:`~attention_course.gpt.GPT`; :func:`ngram_perplexities` gives the
unigram and bigram baselines; :func:`previous_token_scores`,
:func:`bracket_scores` and :func:`prefix_matching_scores` score every head;
:func:`width_sweep` trains models of several widths.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import math
import sys
import sysconfig
import time
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from attention_course.gpt import (
    GPT,
    BPETokenizer,
    GPTConfig,
    lm_loss,
    make_optimizer,
    perplexity,
    warmup_cosine,
)
from attention_course.training import train_with_validation

# folders of tests, data tables and generated code: not the prose of code
SKIP = ("test", "tests", "idle_test", "site-packages", "__pycache__",
        "pydoc_data", "encodings", "lib2to3", "turtledemo")


class Corpus(NamedTuple):
    """Training and validation text, the files each came from, and the
    Python version whose standard library they are."""

    train: str
    val: str
    train_files: list[str]
    val_files: list[str]
    python: str


def stdlib_files(root: str | Path | None = None) -> list[Path]:
    """The ``.py`` files of the standard library at ``root`` (default: this
    Python's), relative to it, ordered by a hash of their path: an order
    that looks random, the same on every machine, and that keeps a file's
    place when other files come or go between Python versions."""
    root = Path(sysconfig.get_paths()["stdlib"] if root is None else root)
    files = [p.relative_to(root) for p in root.rglob("*.py")]
    files = [f for f in files
             if not any(part in SKIP or part.startswith("config-")
                        for part in f.parts[:-1])
             and not f.name.startswith("_sysconfigdata")]
    return sorted(files, key=lambda f: hashlib.sha1(
        f.as_posix().encode()).hexdigest())


def load_corpus(train_bytes: int = 1_500_000, val_bytes: int = 300_000,
                file_bytes: int = 32_000,
                root: str | Path | None = None) -> Corpus:
    """Files in :func:`stdlib_files`'s order, each cut to its first lines
    within ``file_bytes`` (so that no long module dominates): every tenth
    file goes to validation, the others to training, each side until it
    holds about its number of bytes."""
    root = Path(sysconfig.get_paths()["stdlib"] if root is None else root)
    sides: dict[str, list[str]] = {"train": [], "val": []}
    names: dict[str, list[str]] = {"train": [], "val": []}
    budget = {"train": train_bytes, "val": val_bytes}
    for i, path in enumerate(stdlib_files(root)):
        side = "val" if i % 10 == 9 else "train"
        if budget[side] <= 0:
            if budget["train"] <= 0 and budget["val"] <= 0:
                break
            continue
        text = (root / path).read_text(encoding="utf-8", errors="replace")
        kept, size = [], 0
        for line in text.splitlines(keepends=True):
            size += len(line.encode("utf-8"))
            if size > file_bytes:
                break
            kept.append(line)
        sides[side].append("".join(kept))
        names[side].append(path.as_posix())
        budget[side] -= min(size, file_bytes)
    version = ".".join(map(str, sys.version_info[:3]))
    return Corpus("\n".join(sides["train"]), "\n".join(sides["val"]),
                  names["train"], names["val"], version)


@dataclass
class TokenData:
    """The corpus as token ids (long tensors), with its tokenizer."""

    tokenizer: BPETokenizer
    train: Tensor
    val: Tensor

    @classmethod
    def build(cls, corpus: Corpus, vocab_size: int) -> TokenData:
        tokenizer = BPETokenizer.train(corpus.train, vocab_size)
        return cls(tokenizer,
                   torch.tensor(tokenizer.encode(corpus.train)),
                   torch.tensor(tokenizer.encode(corpus.val)))

    def windows(self, split: str, length: int, count: int | None = None
                ) -> Tensor:
        """Consecutive non-overlapping windows ``(count, length + 1)`` from
        the start of a split (all that fit when ``count`` is None)."""
        ids = getattr(self, split)
        fit = (len(ids) - 1) // length
        count = fit if count is None else min(count, fit)
        starts = torch.arange(count) * length
        return ids[starts[:, None] + torch.arange(length + 1)]


def random_batches(ids: Tensor, batch_size: int, length: int,
                   generator: torch.Generator):
    """Endless batches ``(batch_size, length + 1)`` of windows cut at
    random places of ``ids``."""
    while True:
        starts = torch.randint(0, len(ids) - length - 1, (batch_size,),
                               generator=generator)
        yield ids[starts[:, None] + torch.arange(length + 1)]


@dataclass(frozen=True)
class TrainSetup:
    """How :func:`train_gpt` trains."""

    steps: int = 300
    batch_size: int = 16
    length: int = 128
    lr: float = 3e-3
    warmup: int = 30
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 50
    eval_windows: int = 32


class Run(NamedTuple):
    """One trained model, its validation curve and training time."""

    model: GPT
    steps: list[int]
    train_loss: list[float]
    val_loss: list[float]
    seconds: float


def train_gpt(data: TokenData, config: GPTConfig, setup: TrainSetup,
              seed: int, train_ids: Tensor | None = None, device=None,
              progress: bool = False) -> Run:
    """Train a :class:`GPT` of ``config`` on random windows of the training
    ids (or ``train_ids``), validating on the first ``eval_windows`` windows
    of the validation split."""
    torch.manual_seed(seed)
    model = GPT(config)
    device = torch.device("cpu") if device is None else torch.device(device)
    model.to(device)
    val = data.windows("val", setup.length, setup.eval_windows).to(device)
    optimizer = make_optimizer(model, setup.lr, setup.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: warmup_cosine(s, setup.warmup, setup.steps))
    generator = torch.Generator().manual_seed(seed)
    ids = data.train if train_ids is None else train_ids
    batches = random_batches(ids, setup.batch_size, setup.length, generator)
    start = time.perf_counter()
    curves = train_with_validation(
        model, lm_loss, batches,
        lambda m: {"val_loss": math.log(perplexity(m, [val]))},
        max_steps=setup.steps, eval_every=setup.eval_every,
        optimizer=optimizer, grad_clip=setup.grad_clip, scheduler=scheduler,
        device=device, progress=progress, desc=f"GPT, seed {seed}")
    seconds = time.perf_counter() - start
    return Run(model.eval(), curves.steps, curves.train,
               curves.val["val_loss"], seconds)


# ---------------------------------------------------------------- baselines


def ngram_perplexities(data: TokenData, windows: Tensor,
                       mix: Sequence[float] = (0.5, 0.7, 0.8, 0.9, 0.95)
                       ) -> dict[str, float]:
    """Perplexities on the predictions of ``windows (n, T + 1)`` (each token
    after the first of a window, as a model reading the window predicts
    them) of a unigram model (add-one counts of the training tokens) and of
    a bigram model mixed with it, ``lam p(b | a) + (1 - lam) p(b)``, with
    the best ``lam`` of ``mix`` (chosen on these very predictions, which
    flatters the bigram)."""
    vocab = data.tokenizer.vocab_size
    train = data.train
    unigram = (torch.bincount(train, minlength=vocab).double() + 1)
    unigram /= unigram.sum()
    pairs = torch.zeros(vocab, vocab, dtype=torch.float64)
    pairs.index_put_((train[:-1], train[1:]),
                     torch.ones(len(train) - 1, dtype=torch.float64),
                     accumulate=True)
    rows = pairs.sum(1, keepdim=True)
    bigram = torch.where(rows > 0, pairs / rows.clamp(min=1), unigram)
    before, after = windows[:, :-1].flatten(), windows[:, 1:].flatten()
    p_uni = unigram[after]
    p_bi = bigram[before, after]
    best = min(-(lam * p_bi + (1 - lam) * p_uni).log().mean().item()
               for lam in mix)
    return {"unigram": math.exp(-p_uni.log().mean().item()),
            "bigram": math.exp(best)}


# ---------------------------------------------------------------- heads


def previous_token_scores(weights: list[Tensor]) -> Tensor:
    """``(layers, heads)``: the mean weight a query puts on the token just
    before it, over every query but the first."""
    return torch.stack([w.diagonal(offset=-1, dim1=-2, dim2=-1)
                        .mean(dim=(0, -1)) for w in weights])


def token_starts(ids: Sequence[int], tokenizer: BPETokenizer) -> list[int]:
    """The byte offset at which each token of ``ids`` starts."""
    starts, offset = [], 0
    for i in ids:
        starts.append(offset)
        offset += len(tokenizer.vocab[i])
    return starts


def bracket_pairs(text: str, ids: Sequence[int], tokenizer: BPETokenizer
                  ) -> list[tuple[int, int]]:
    """``(closing, opening)`` token indices of every bracket pair of the
    Python source ``text`` (encoded as ``ids``), as Python's own tokenizer
    pairs them: brackets inside strings and comments do not count. Text
    that does not tokenize gives the pairs found before the error."""
    byte_at, total = [], 0
    for char in text:  # the byte offset of every character
        byte_at.append(total)
        total += len(char.encode("utf-8", "surrogatepass"))
    line_start = [0]
    for line in text.splitlines(keepends=True):
        line_start.append(line_start[-1] + len(line))
    starts = token_starts(ids, tokenizer)
    pairs, stack = [], []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type != tokenize.OP or tok.string not in "()[]{}":
                continue
            char = line_start[tok.start[0] - 1] + tok.start[1]
            index = bisect.bisect_right(starts, byte_at[char]) - 1
            if tok.string in "([{":
                stack.append(index)
            elif stack:
                pairs.append((index, stack.pop()))
    except (tokenize.TokenError, SyntaxError):
        pass
    return pairs


class BracketScores(NamedTuple):
    """Per head ``(layers, heads)``: the mean weight a closing bracket puts
    on its opening bracket (``match``, over ``pairs`` pairs), and, over the
    ``nested`` pairs with an inner pair of brackets between them, on the
    opening bracket (``nested_match``) and on the inner pair's opening
    bracket, already closed (``nested_inner``)."""

    match: Tensor
    nested_match: Tensor
    nested_inner: Tensor
    pairs: int
    nested: int


@torch.no_grad()
def bracket_scores(model: GPT, text: str, tokenizer: BPETokenizer,
                   length: int, windows: int, min_gap: int = 2,
                   batch_size: int = 32) -> BracketScores:
    """Score every head on the bracket pairs of the first ``windows``
    windows of ``length`` tokens of ``text``: pairs inside one window, their
    brackets at least ``min_gap`` tokens apart (so that a previous-token
    head does not score)."""
    ids = tokenizer.encode(text)
    pairs = bracket_pairs(text, ids, tokenizer)
    count = min(windows, len(ids) // length)
    ids = torch.tensor(ids[: count * length]).view(count, length)
    inside: list[tuple[int, ...]] = []   # (window, closing, opening)
    nested: list[tuple[int, ...]] = []   # (window, closing, opening, inner)
    for c, o in pairs:
        w = o // length
        if w < count and c // length == w and c - o >= min_gap:
            inside.append((w, c - w * length, o - w * length))
    for w, c, o in inside:
        inner = [o2 for w2, c2, o2 in inside if w2 == w and o < o2 and c2 < c]
        if inner:
            nested.append((w, c, o, max(inner)))
    device = next(model.parameters()).device
    layers, heads = model.config.num_layers, model.config.num_heads
    sums = torch.zeros(3, layers, heads)
    for lo in range(0, count, batch_size):
        weights = model.attention_weights(ids[lo:lo + batch_size].to(device))
        weights = torch.stack(weights).cpu()   # (layers, B, heads, T, T)
        for which, items in ((0, inside), (1, nested)):
            chosen = torch.tensor([t for t in items
                                   if lo <= t[0] < lo + batch_size],
                                  dtype=torch.long).view(-1, 3 + which)
            if not len(chosen):
                continue
            w, c, o = chosen[:, 0] - lo, chosen[:, 1], chosen[:, 2]
            sums[which] += weights[:, w, :, c, o].sum(0)  # (P, L, H)
            if which:
                sums[2] += weights[:, w, :, c, chosen[:, 3]].sum(0)
    n, m = max(len(inside), 1), max(len(nested), 1)
    return BracketScores(sums[0] / n, sums[1] / m, sums[2] / m,
                         len(inside), len(nested))


@torch.no_grad()
def repeated_random_tokens(vocab_size: int, half: int, count: int,
                           generator: torch.Generator,
                           low: int = 256) -> Tensor:
    """``(count, 2 half)``: ``half`` random tokens (ids ``low`` and up, the
    merged ones), then the same ``half`` again."""
    first = torch.randint(low, vocab_size, (count, half), generator=generator)
    return torch.cat([first, first], dim=1)


def prefix_matching_scores(weights: list[Tensor], half: int) -> Tensor:
    """``(layers, heads)``: on repeated random tokens, the mean weight a
    query of the second half puts on the token *after* the earlier
    occurrence of its own token (Olsson et al. 2022)."""
    scores = []
    for w in weights:
        t = torch.arange(half, 2 * half)
        scores.append(w[:, :, t, t - half + 1].mean(dim=(0, -1)))
    return torch.stack(scores)


def split_perplexity(model: GPT, data: TokenData, split: str, length: int,
                     batch_size: int = 64, count: int | None = None) -> float:
    """:func:`~attention_course.gpt.perplexity` over the consecutive windows
    of a split (all of them, or the first ``count``), in batches."""
    device = next(model.parameters()).device
    windows = data.windows(split, length, count).to(device)
    return perplexity(model, windows.split(batch_size))


class SweepRun(NamedTuple):
    """One run of :func:`width_sweep`: the model's width, its number of
    weights, its seed and its final validation loss (nats per token)."""

    width: int
    weights: int
    seed: int
    val_loss: float


def width_sweep(data: TokenData, base: GPTConfig, widths: Sequence[int],
                setup: TrainSetup, seeds: Sequence[int],
                device=None) -> list[SweepRun]:
    """Train ``base`` at every width of ``widths`` (``d_model``; the rest of
    the shape kept) with every seed, all for ``setup.steps`` steps on the
    same batches, and measure each on the validation split."""
    runs = []
    for width in widths:
        config = replace(base, d_model=width, d_ff=None)
        for seed in seeds:
            run = train_gpt(data, config, setup, seed, device=device)
            weights = sum(p.numel() for p in run.model.parameters())
            runs.append(SweepRun(width, weights, seed, run.val_loss[-1]))
    return runs
