"""A small English -> Chinese parallel corpus, generated from a grammar
(chapters 4-6): its splits, vocabularies and batches.

Nothing is downloaded: the grammar of :mod:`attention_course.data.grammar`
writes English sentences and their Chinese translations, word by word
(``Tom chased Jerry in the kitchen yesterday -> 汤姆 昨天 在 厨房 追 了 杰瑞``).
Tokens are words (no punctuation); English is lower case except names.
Sentences have 3 to at most ``max_len`` (default 20) words on both sides.

Public API
----------
``make_translation_corpus(n_train=6000, n_val=500, n_test=1000, seed=0,
max_len=20)``
    -> :class:`TranslationCorpus` with

    * ``.train``, ``.val``, ``.test``: lists of ``(src_tokens, tgt_tokens)``
      pairs (lists of strings); no English sentence occurs in two splits;
      deterministic from ``seed``.
    * ``.src_vocab``, ``.tgt_vocab``: :class:`Vocab` objects built from the
      training split, with ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2,
      ``<unk>`` = 3 (``pad_id``, ``bos_id``, ``eos_id``, ``unk_id``),
      ``encode(tokens) -> list[int]``, ``decode(ids) -> list[str]`` (stops at
      ``<eos>``, drops ``<pad>``/``<bos>``) and ``len(vocab)``.
    * ``.collate(pairs)`` -> :class:`TranslationBatch` and
      ``.loader(split, batch_size=64, shuffle=True, seed=0)`` ->
      :class:`TranslationLoader`.

:class:`TranslationBatch` is a named tuple of tensors (batch first):

    * ``src (B, S)``: source ids followed by ``<eos>``, right-padded with
      ``<pad>``;
    * ``src_valid_lens (B,)``: number of real source tokens, ``<eos>`` included;
    * ``tgt_in (B, T)``: the decoder's input, ``<bos>`` followed by the target
      ids;
    * ``tgt_out (B, T)``: the decoder's target, the target ids followed by
      ``<eos>`` (``tgt_in`` shifted left by one);
    * ``tgt_valid_lens (B,)``: number of real positions in
      ``tgt_in``/``tgt_out``.

:class:`TranslationLoader` (``make_loader(pairs, src_vocab, tgt_vocab,
batch_size=64, shuffle=True, seed=0)``) yields such batches and reshuffles at
every pass, deterministically from its seed; it has a ``len()``, so it can be
handed to :func:`attention_course.training.train` as ``data``.

The sentences come from the grammar of :mod:`attention_course.data.grammar`
(its lexicon, :class:`~attention_course.data.grammar.NounPhrase`,
:class:`~attention_course.data.grammar.Clause`).
"""


from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import NamedTuple

import torch

from attention_course.data.grammar import sample_clause

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS: tuple[str, ...] = (PAD, BOS, EOS, UNK)

Pair = tuple[list[str], list[str]]

# ------------------------------------------------------------------------------
# Vocabulary
# ------------------------------------------------------------------------------


class Vocab:
    """Token <-> id mapping with ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2,
    ``<unk>`` = 3.

    The other tokens follow in sorted order, so ids do not depend on the order
    the sentences came in. Unknown tokens encode to ``unk_id``.
    """

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, tokens: Iterable[str]) -> None:
        words = sorted(set(tokens) - set(SPECIALS))
        self.itos: list[str] = [*SPECIALS, *words]
        self.stoi: dict[str, int] = {
            token: i for i, token in enumerate(self.itos)
        }

    @classmethod
    def from_sentences(cls, sentences: Iterable[Sequence[str]]) -> Vocab:
        return cls(token for sentence in sentences for token in sentence)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: object) -> bool:
        return token in self.stoi

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Ids of ``tokens`` (no ``<bos>``/``<eos>`` added)."""
        return [self.stoi.get(token, self.unk_id) for token in tokens]

    def decode(self, ids: Iterable[int] | torch.Tensor) -> list[str]:
        """Tokens of ``ids``, stopping at the first ``<eos>`` and dropping
        ``<pad>``/``<bos>``."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        tokens = []
        for i in ids:
            if i == self.eos_id:
                break
            if i in (self.pad_id, self.bos_id):
                continue
            if not 0 <= i < len(self.itos):
                raise ValueError(
                    f"id {i} is outside the vocabulary of size {len(self.itos)}"
                )
            tokens.append(self.itos[i])
        return tokens

    def __repr__(self) -> str:
        return f"Vocab(size={len(self)})"


# ------------------------------------------------------------------------------
# Batching
# ------------------------------------------------------------------------------


class TranslationBatch(NamedTuple):
    """A padded batch; see the module docstring for what each tensor holds."""

    src: torch.Tensor
    src_valid_lens: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    tgt_valid_lens: torch.Tensor


def _pad(rows: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    width = max(len(row) for row in rows)
    out = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def encode_source(tokens: Sequence[str], src_vocab: Vocab) -> list[int]:
    """Source ids as the models see them: the words' ids followed by
    ``<eos>``."""
    return [*src_vocab.encode(tokens), src_vocab.eos_id]


def collate(
    pairs: Sequence[Pair], src_vocab: Vocab, tgt_vocab: Vocab
) -> TranslationBatch:
    """Encode and right-pad a list of ``(src_tokens, tgt_tokens)`` pairs
    into a batch."""
    if len(pairs) == 0:
        raise ValueError("collate needs at least one pair, got an empty list")
    src = [encode_source(s, src_vocab) for s, _ in pairs]
    tgt = [tgt_vocab.encode(t) for _, t in pairs]
    tgt_in = [[tgt_vocab.bos_id, *t] for t in tgt]
    tgt_out = [[*t, tgt_vocab.eos_id] for t in tgt]
    return TranslationBatch(
        src=_pad(src, src_vocab.pad_id),
        src_valid_lens=torch.tensor([len(s) for s in src]),
        tgt_in=_pad(tgt_in, tgt_vocab.pad_id),
        tgt_out=_pad(tgt_out, tgt_vocab.pad_id),
        tgt_valid_lens=torch.tensor([len(t) for t in tgt_in]),
    )


def random_batch(
    batch_size: int,
    src_len: int,
    tgt_len: int,
    src_vocab_size: int,
    tgt_vocab_size: int,
    seed: int = 0,
) -> TranslationBatch:
    """A batch of random word ids with no padding, for timing models on
    sequences of any length.

    ``src (B, src_len)`` ends with ``<eos>``; ``tgt_in`` and ``tgt_out`` are
    ``(B, tgt_len)``, ``<bos>`` + words and words + ``<eos>``; word ids are
    drawn uniformly from the non-special ids.
    """
    if min(batch_size, src_len, tgt_len) < 1:
        raise ValueError(
            f"batch_size, src_len and tgt_len must be at least 1, got "
            f"{batch_size}, {src_len} and {tgt_len}"
        )
    if min(src_vocab_size, tgt_vocab_size) <= len(SPECIALS):
        raise ValueError(
            f"vocabularies need more than the {len(SPECIALS)} special tokens, "
            f"got sizes {src_vocab_size} and {tgt_vocab_size}"
        )
    gen = torch.Generator().manual_seed(seed)
    first = len(SPECIALS)
    src = torch.randint(first, src_vocab_size, (batch_size, src_len),
                        generator=gen)
    src[:, -1] = Vocab.eos_id
    words = torch.randint(first, tgt_vocab_size, (batch_size, tgt_len - 1),
                          generator=gen)
    bos = torch.full((batch_size, 1), Vocab.bos_id)
    eos = torch.full((batch_size, 1), Vocab.eos_id)
    return TranslationBatch(
        src=src,
        src_valid_lens=torch.full((batch_size,), src_len),
        tgt_in=torch.cat([bos, words], dim=1),
        tgt_out=torch.cat([words, eos], dim=1),
        tgt_valid_lens=torch.full((batch_size,), tgt_len),
    )


class TranslationLoader:
    """Batches of a list of pairs, reshuffled at every pass
    (deterministic from ``seed``)."""

    def __init__(
        self,
        pairs: Sequence[Pair],
        src_vocab: Vocab,
        tgt_vocab: Vocab,
        batch_size: int = 64,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if len(pairs) == 0:
            raise ValueError(
                "TranslationLoader needs at least one pair, got an empty list"
            )
        self.pairs = list(pairs)
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab
        self.batch_size, self.shuffle = batch_size, shuffle
        self._generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return -(-len(self.pairs) // self.batch_size)

    def __iter__(self) -> Iterator[TranslationBatch]:
        n = len(self.pairs)
        order = (torch.randperm(n, generator=self._generator)
                 if self.shuffle else torch.arange(n))
        for start in range(0, n, self.batch_size):
            chunk = order[start : start + self.batch_size].tolist()
            yield collate(
                [self.pairs[i] for i in chunk], self.src_vocab, self.tgt_vocab
            )


#: A :class:`TranslationLoader` over ``pairs``: the loader's own constructor,
#: under the name the chapters call it by.
make_loader = TranslationLoader


# ------------------------------------------------------------------------------
# The corpus
# ------------------------------------------------------------------------------


@dataclass
class TranslationCorpus:
    """Train / validation / test pairs and the two vocabularies (built from
    ``train``)."""

    train: list[Pair]
    val: list[Pair]
    test: list[Pair]
    src_vocab: Vocab
    tgt_vocab: Vocab

    def split(self, name: str) -> list[Pair]:
        if name not in ("train", "val", "test"):
            raise ValueError(
                f"split must be 'train', 'val' or 'test', got {name!r}"
            )
        return getattr(self, name)

    def collate(self, pairs: Sequence[Pair]) -> TranslationBatch:
        return collate(pairs, self.src_vocab, self.tgt_vocab)

    def loader(
        self,
        split: str = "train",
        batch_size: int = 64,
        shuffle: bool = True,
        seed: int = 0,
    ) -> TranslationLoader:
        return TranslationLoader(
            self.split(split), self.src_vocab, self.tgt_vocab,
            batch_size, shuffle, seed,
        )


def _distinct_pairs(
    rng: random.Random, max_len: int, max_attempts: int
) -> Iterator[Pair]:
    """Sentence pairs from the grammar, each English sentence once, both sides
    at most ``max_len`` words; a ``ValueError`` after ``max_attempts`` draws."""
    seen: set[tuple[str, ...]] = set()
    for _ in range(max_attempts):
        clause = sample_clause(rng)
        src, tgt = clause.english(), clause.chinese()
        if len(src) > max_len or len(tgt) > max_len or tuple(src) in seen:
            continue
        seen.add(tuple(src))
        yield src, tgt
    raise ValueError(
        f"could not draw enough distinct sentences of <= {max_len} words "
        f"in {max_attempts} attempts"
    )


def make_translation_corpus(
    n_train: int = 6000,
    n_val: int = 500,
    n_test: int = 1000,
    seed: int = 0,
    max_len: int = 20,
    train_max_len: int | None = None,
) -> TranslationCorpus:
    """Generate distinct sentence pairs from the grammar and split them
    three ways.

    Deterministic for a given ``seed``. No English sentence appears twice (so
    the splits share none); both sides of every pair have at most ``max_len``
    words. By default the three splits are drawn alike. With
    ``train_max_len``, a *length split*: the training sentences have at most
    ``train_max_len`` English words, while validation and test hold sentences
    of every length up to ``max_len`` as the grammar makes them, so that they
    measure translation of longer sentences than any seen in training as well
    as of unseen sentences of familiar lengths.
    """
    if n_train < 1 or n_val < 0 or n_test < 0:
        raise ValueError(
            f"need n_train >= 1 and n_val, n_test >= 0, "
            f"got {n_train}, {n_val}, {n_test}"
        )
    if max_len < 3:
        raise ValueError(f"max_len must be at least 3, got {max_len}")
    if train_max_len is not None and not 3 <= train_max_len < max_len:
        raise ValueError(
            f"train_max_len must lie in [3, max_len={max_len}), "
            f"got {train_max_len}"
        )
    total = n_train + n_val + n_test
    pairs = _distinct_pairs(random.Random(seed), max_len, 50 * total + 1000)
    if train_max_len is None:  # train, val, test in the order drawn
        train = [next(pairs) for _ in range(n_train)]
        held_out = [next(pairs) for _ in range(n_val + n_test)]
    else:  # held-out sentences of every length first, then short ones
        held_out = [next(pairs) for _ in range(n_val + n_test)]
        short = (pair for pair in pairs if len(pair[0]) <= train_max_len)
        train = list(islice(short, n_train))
    val, test = held_out[:n_val], held_out[n_val:]
    return TranslationCorpus(
        train=train,
        val=val,
        test=test,
        src_vocab=Vocab.from_sentences(s for s, _ in train),
        tgt_vocab=Vocab.from_sentences(t for _, t in train),
    )
