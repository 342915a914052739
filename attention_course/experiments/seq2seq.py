"""Chapter 4's experiments with the encoder-decoder models of
:mod:`attention_course.seq2seq` (Bahdanau et al. 2015; Luong et al. 2015):
training them, translating with them and reading their alignments.

- Training is teacher forced: :func:`seq2seq_loss` feeds the true previous
  word and averages the cross-entropy over the real target words
  (:func:`sequence_loss`); it is the ``loss_fn`` of
  :func:`attention_course.training.train`.
- :func:`greedy_decode` feeds the model's own predictions back and returns the
  attention weights of every step; :func:`translate` translates one sentence,
  :func:`translate_pairs` and :func:`translate_pairs_with_weights` a test set
  in batches.
- :func:`alignment_lexicon` and :func:`peak_offsets` ask where the attention
  rows of the content words peak: on the source word they translate or
  beside it.

Shapes are batch first: ``src (B, S)`` with ``src_valid_lens (B,)``,
``tgt_in (B, T)``, logits ``(B, T, V)``, attention weights ``(B, T, S)``.
The translations are scored with :mod:`attention_course.metrics`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F

from attention_course.data import grammar
from attention_course.data.translation import (
    TranslationBatch,
    Vocab,
    collate,
    encode_source,
)
from attention_course.seq2seq import Seq2Seq


def sequence_loss(
    logits: torch.Tensor, tgt_out: torch.Tensor, tgt_valid_lens: torch.Tensor
) -> torch.Tensor:
    """Cross-entropy averaged over the real target positions (padding does not
    count).

    ``logits (B, T, V)``, ``tgt_out (B, T)``, ``tgt_valid_lens (B,)`` -> a
    scalar.
    """
    if (
        logits.shape[:2] != tgt_out.shape
        or tgt_valid_lens.shape != tgt_out.shape[:1]
    ):
        raise ValueError(
            f"need logits (B, T, V), tgt_out (B, T) and tgt_valid_lens (B,); "
            f"got {tuple(logits.shape)}, {tuple(tgt_out.shape)} and "
            f"{tuple(tgt_valid_lens.shape)}"
        )
    per_token = F.cross_entropy(logits.transpose(1, 2), tgt_out,
                                reduction="none")  # (B, T)
    real = (
        torch.arange(tgt_out.shape[1], device=tgt_out.device)
        < tgt_valid_lens[:, None]
    )
    return (per_token * real).sum() / real.sum()


def seq2seq_loss(model: Seq2Seq, batch: TranslationBatch) -> torch.Tensor:
    """Teacher-forced loss of one batch; the ``loss_fn`` for
    :func:`training.train`."""
    logits, _ = model(batch.src, batch.src_valid_lens, batch.tgt_in)
    return sequence_loss(logits, batch.tgt_out, batch.tgt_valid_lens)


class Decoded(NamedTuple):
    """Greedy output: ``ids (B, T)`` (after ``<bos>``; rows may run past
    ``<eos>``) and the attention weights ``(B, T, S)`` of each step (``None``
    for the fixed-context model)."""

    ids: torch.Tensor
    weights: torch.Tensor | None


@torch.no_grad()
def greedy_decode(
    model: Seq2Seq,
    src: torch.Tensor,
    src_valid_lens: torch.Tensor,
    bos_id: int,
    eos_id: int,
    max_len: int = 30,
) -> Decoded:
    """Translate a batch, feeding back the most likely word, for at most
    ``max_len`` steps.

    Stops early once every row has produced ``<eos>``.
    """
    if max_len < 1:
        raise ValueError(f"max_len must be at least 1, got {max_len}")
    was_training = model.training
    model.eval()
    state = model.start(src, src_valid_lens)
    y = torch.full(
        (src.shape[0], 1), bos_id, dtype=torch.long, device=src.device
    )
    ids, weights = [], []
    finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        logits, state, step_weights = model.decoder(y, state)
        y = logits.argmax(dim=-1)  # (B, 1)
        ids.append(y)
        if step_weights is not None:
            weights.append(step_weights)
        finished |= y.squeeze(1) == eos_id
        if finished.all():
            break
    model.train(was_training)
    return Decoded(
        torch.cat(ids, dim=1), torch.cat(weights, dim=1) if weights else None
    )


class Translation(NamedTuple):
    """One sentence's translation and its alignment
    ``weights (T_out + 1, S + 1)`` (rows: the output words and ``<eos>``;
    columns: the source words and ``<eos>``), or ``None``."""

    tokens: list[str]
    weights: torch.Tensor | None


def translate(
    model: Seq2Seq,
    src_tokens: Sequence[str],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    max_len: int = 30,
) -> Translation:
    """Greedy translation of one tokenised sentence, with its attention
    weights."""
    device = next(model.parameters()).device
    ids = torch.tensor([encode_source(src_tokens, src_vocab)], device=device)
    lens = torch.tensor([ids.shape[1]], device=device)
    decoded = greedy_decode(
        model, ids, lens, tgt_vocab.bos_id, tgt_vocab.eos_id, max_len
    )
    tokens = tgt_vocab.decode(decoded.ids[0])
    weights = None
    if decoded.weights is not None:
        weights = decoded.weights[
            0, : min(len(tokens) + 1, decoded.weights.shape[1])
        ].cpu()
    return Translation(tokens, weights)


def _decoded_batches(
    model: Seq2Seq,
    pairs: Sequence[tuple[list[str], list[str]]],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    batch_size: int,
    max_len: int,
) -> Iterator[tuple[TranslationBatch, Decoded]]:
    """Each batch of ``pairs`` (in order) and its greedy decoding."""
    device = next(model.parameters()).device
    for start in range(0, len(pairs), batch_size):
        batch = collate(pairs[start : start + batch_size], src_vocab, tgt_vocab)
        yield batch, greedy_decode(
            model,
            batch.src.to(device),
            batch.src_valid_lens.to(device),
            tgt_vocab.bos_id,
            tgt_vocab.eos_id,
            max_len,
        )


def translate_pairs(
    model: Seq2Seq,
    pairs: Sequence[tuple[list[str], list[str]]],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    batch_size: int = 256,
    max_len: int = 30,
) -> list[list[str]]:
    """Greedy translations of the sources of ``pairs``, in order, batched."""
    return [
        tgt_vocab.decode(row)
        for _batch, decoded in _decoded_batches(
            model, pairs, src_vocab, tgt_vocab, batch_size, max_len
        )
        for row in decoded.ids
    ]


def translate_pairs_with_weights(
    model: Seq2Seq,
    pairs: Sequence[tuple[list[str], list[str]]],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    batch_size: int = 256,
    max_len: int = 30,
) -> list[Translation]:
    """:func:`translate_pairs` with each sentence's attention weights, as
    :func:`translate` gives them: ``weights (T_out + 1, S + 1)`` (rows: the
    output words and ``<eos>``; columns: the sentence's own source words and
    ``<eos>``, without the padding of its batch), ``None`` for the
    fixed-context model. The tokens are those of :func:`translate_pairs`."""
    out: list[Translation] = []
    for batch, decoded in _decoded_batches(
        model, pairs, src_vocab, tgt_vocab, batch_size, max_len
    ):
        weights = None if decoded.weights is None else decoded.weights.cpu()
        for i, row in enumerate(decoded.ids):
            tokens = tgt_vocab.decode(row)
            w = None
            if weights is not None:
                n_src = int(batch.src_valid_lens[i])
                w = weights[i, : min(len(tokens) + 1, weights.shape[1]), :n_src]
            out.append(Translation(tokens, w))
    return out


def alignment_lexicon() -> dict[str, frozenset[str]]:
    """The Chinese words of the corpus's grammar that translate one English
    word each (names, nouns, adjectives, verbs, one-word places and times),
    with the English forms they translate (``追``: chase, chases, chased).
    Words with no English counterpart of their own (了, 在, 会, ...) and those
    of two-word phrases (上 周, *last week*) are left out."""
    lexicon: dict[str, set[str]] = {}

    def add(chinese: str, *english: str) -> None:
        lexicon.setdefault(chinese, set()).update(english)

    for table in (grammar.NAMES, grammar.NOUNS, grammar.ADJECTIVES):
        for english, chinese in table.items():
            add(chinese, english)
    for base, (present, past, chinese) in grammar.VERBS.items():
        add(chinese, base, present, past)
    for words, chinese in grammar.PLACES.items():
        if len(words) == 1:
            add(chinese, *words)
    for times in grammar.TIMES.values():
        for words, chinese in times.items():
            if len(words) == 1 and len(chinese) == 1:
                add(chinese[0], *words)
    return {chinese: frozenset(english) for chinese, english in lexicon.items()}


def peak_offsets(
    translation: Translation,
    src_tokens: Sequence[str],
    lexicon: dict[str, frozenset[str]],
) -> list[tuple[str, int, int]]:
    """Where the attention rows of a translation's content words peak.

    For each output word of ``lexicon`` that occurs once in the translation
    and whose English counterpart occurs once in ``src_tokens``:
    ``(word, position of the counterpart, offset)``, the offset being how
    many source positions after the counterpart the row's largest weight
    lies (0: on the word it translates, 1: one word late, -1: one early).
    """
    if translation.weights is None:
        raise ValueError("the translation has no attention weights (a "
                         "fixed-context model)")
    tokens = translation.tokens
    found = []
    for t, word in enumerate(tokens):
        if word not in lexicon or tokens.count(word) != 1:
            continue
        where = [j for j, e in enumerate(src_tokens) if e in lexicon[word]]
        if len(where) != 1 or t >= translation.weights.shape[0]:
            continue
        peak = int(translation.weights[t].argmax())
        found.append((word, where[0], peak - where[0]))
    return found
