"""Chapter 4: attention in encoder-decoder models (Bahdanau et al. 2015;
Luong et al. 2015).

A GRU encoder (Cho et al. 2014) reads the source sentence into states
``h_1 .. h_S``. Three decoders write the translation one word at a time:

- :class:`FixedContextDecoder`, the "distracted" model of Cho et al. 2014: the
  whole sentence is squeezed into one context vector ``c = h_S``, which starts
  the decoder and which it reads again at every step. (Sutskever et al. 2014
  used ``c`` only as the decoder's first state.)
- :class:`AttentionDecoder` (Bahdanau et al. 2015): at step ``t`` the previous
  decoder state ``s_{t-1}`` is the query, the encoder states are the keys and
  the values, and the context ``c_t = sum_j a_tj h_j`` is new for every output
  word. The scores come from :class:`attention_course.scoring.AdditiveScore`;
  padded source positions are masked by
  :func:`attention_course.masking.masked_softmax`, so they get weight exactly 0.
  The word is predicted from ``[s_t; c_t]``.
- :class:`LuongDecoder` (Luong et al. 2015, global attention): the GRU steps
  first, and the *current* state ``s_t`` is the query, scored by a dot product,
  a bilinear ("general") or an additive ("concat") score; the attentional state
  ``h~_t = tanh(W_c [c_t; s_t])`` predicts the word and, with input feeding,
  enters the next step.

Shapes are batch first: ``src (B, S)`` with ``src_valid_lens (B,)``,
``tgt_in (B, T)``, logits ``(B, T, V)``, attention weights ``(B, T, S)``.
Training is teacher forced (:func:`seq2seq_loss` feeds the true previous word);
:func:`greedy_decode` feeds the model's own predictions and returns the
attention weights of every step. :func:`corpus_bleu` (Papineni et al. 2002) and
:func:`exact_match` score translations, :func:`scores_by_length` by source
length, and :func:`format_over_seeds` sums up several runs.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attention_course.data.translation import (
    TranslationBatch,
    Vocab,
    collate,
    encode_source,
)
from attention_course.masking import masked_softmax
from attention_course.scoring import (
    AdditiveScore,
    BilinearScore,
    dot_score,
)

DecoderState = tuple[torch.Tensor, ...]


def _check_source(src: torch.Tensor, src_valid_lens: torch.Tensor) -> None:
    if src.dim() != 2:
        raise ValueError(f"src must have shape (B, S), got {tuple(src.shape)}")
    if src_valid_lens.shape != (src.shape[0],):
        raise ValueError(
            f"src_valid_lens must have shape (B,) = ({src.shape[0]},) for src "
            f"{tuple(src.shape)}, got {tuple(src_valid_lens.shape)}"
        )
    if src_valid_lens.numel() and (
        src_valid_lens.min() < 1 or src_valid_lens.max() > src.shape[1]
    ):
        raise ValueError(
            f"src_valid_lens must lie in [1, S={src.shape[1]}], "
            f"got {src_valid_lens.tolist()}"
        )


class Seq2SeqEncoder(nn.Module):
    """Embedding + GRU over the source; padding is skipped (packed sequences).

    ``forward(src (B, S), src_valid_lens (B,))`` ->
    ``(outputs (B, S, H), state (L, B, H))``: ``outputs[:, j]`` is ``h_j`` (zero
    at padded positions) and ``state`` holds each layer's state after the last
    *real* token.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        hidden_dim: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.rnn = nn.GRU(
            embed_dim, hidden_dim, num_layers, batch_first=True, dropout=dropout
        )

    def forward(
        self, src: torch.Tensor, src_valid_lens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        _check_source(src, src_valid_lens)
        packed = pack_padded_sequence(
            self.embedding(src), src_valid_lens.cpu(),
            batch_first=True, enforce_sorted=False,
        )
        outputs, state = self.rnn(packed)
        outputs, _ = pad_packed_sequence(
            outputs, batch_first=True, total_length=src.shape[1]
        )
        return outputs, state


class FixedContextDecoder(nn.Module):
    """The "distracted" decoder: one context ``c = h_S`` for every output word.

    As in Cho et al. (2014), ``c`` (the encoder's top-layer final state) is
    concatenated to the embedding of every input word and to the state that
    predicts each word, and the decoder's GRU starts from the encoder's final
    state. ``forward(tgt_in (B, T), state)`` ->
    ``(logits (B, T, V), state, None)``: there are no attention weights.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        hidden_dim: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.rnn = nn.GRU(
            embed_dim + hidden_dim, hidden_dim, num_layers,
            batch_first=True, dropout=dropout,
        )
        self.output = nn.Linear(2 * hidden_dim, vocab_size)

    def init_state(
        self,
        enc_outputs: torch.Tensor,
        enc_state: torch.Tensor,
        src_valid_lens: torch.Tensor,
    ) -> DecoderState:
        """``(hidden (L, B, H), context (B, H))``: the context is the final
        encoder state."""
        return enc_state, enc_state[-1]

    def forward(
        self, tgt_in: torch.Tensor, state: DecoderState
    ) -> tuple[torch.Tensor, DecoderState, None]:
        hidden, context = state
        # the same c at every step
        c = context.unsqueeze(1).expand(-1, tgt_in.shape[1], -1)
        outputs, hidden = self.rnn(
            torch.cat([self.embedding(tgt_in), c], dim=-1), hidden
        )
        logits = self.output(torch.cat([outputs, c], dim=-1))
        return logits, (hidden, context), None


class AttentionDecoder(nn.Module):
    """Bahdanau's decoder: a new context ``c_t = sum_j a_tj h_j`` for every
    output word.

    At step ``t`` the query is ``s_{t-1}`` (the top layer's previous state), the
    keys and values are the encoder outputs ``h_j``;
    ``a_t = masked_softmax(AdditiveScore(s_{t-1}, h))`` over the real source
    positions. ``[embedding(y_{t-1}); c_t]`` enters the GRU, and the word is
    predicted from ``[s_t; c_t]``. ``forward(tgt_in (B, T), state)`` ->
    ``(logits (B, T, V), state, weights (B, T, S))``.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        hidden_dim: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        self.attention_score = AdditiveScore(hidden_dim, hidden_dim, hidden_dim)
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.rnn = nn.GRU(
            embed_dim + hidden_dim, hidden_dim, num_layers,
            batch_first=True, dropout=dropout,
        )
        self.output = nn.Linear(2 * hidden_dim, vocab_size)

    def init_state(
        self,
        enc_outputs: torch.Tensor,
        enc_state: torch.Tensor,
        src_valid_lens: torch.Tensor,
    ) -> DecoderState:
        """``(hidden (L, B, H), enc_outputs (B, S, H), src_valid_lens (B,))``.
        """
        return enc_state, enc_outputs, src_valid_lens

    def attend(
        self,
        query: torch.Tensor,
        enc_outputs: torch.Tensor,
        src_valid_lens: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``query (B, 1, H)`` -> ``(context (B, 1, H), weights (B, 1, S))``."""
        scores = self.attention_score(query, enc_outputs)  # (B, 1, S)
        weights = masked_softmax(scores, src_valid_lens)
        return weights @ enc_outputs, weights

    def forward(
        self, tgt_in: torch.Tensor, state: DecoderState
    ) -> tuple[torch.Tensor, DecoderState, torch.Tensor]:
        hidden, enc_outputs, src_valid_lens = state
        embedded = self.embedding(tgt_in)  # (B, T, E)
        outputs, all_weights = [], []
        for t in range(tgt_in.shape[1]):
            query = hidden[-1].unsqueeze(1)  # s_{t-1}: (B, 1, H)
            context, weights = self.attend(query, enc_outputs, src_valid_lens)
            step_input = torch.cat([embedded[:, t : t + 1], context], dim=-1)
            out, hidden = self.rnn(step_input, hidden)  # out is s_t: (B, 1, H)
            outputs.append(torch.cat([out, context], dim=-1))
            all_weights.append(weights)
        logits = self.output(torch.cat(outputs, dim=1))
        return (logits, (hidden, enc_outputs, src_valid_lens),
                torch.cat(all_weights, dim=1))


LUONG_SCORES = ("dot", "general", "concat")


class LuongDecoder(nn.Module):
    """Luong's decoder (global attention): the *current* state ``s_t`` asks.

    At step ``t`` the GRU first takes its step, ``s_t = GRU([e(y_{t-1});
    h~_{t-1}], s_{t-1})`` (with input feeding; without it, ``e(y_{t-1})``
    alone), then ``s_t`` is the query: ``a_t = masked_softmax(score(s_t, h))``,
    ``c_t = sum_j a_tj h_j``, and the attentional state
    ``h~_t = tanh(W_c [c_t; s_t])`` predicts the word (``softmax(W_s h~_t)``)
    and, with input feeding, enters the next step. ``score`` is ``"dot"``
    (``s^T h``), ``"general"`` (``s^T W h``, a
    :class:`~attention_course.scoring.BilinearScore`) or ``"concat"``
    (``v^T tanh(W [s; h])``, an
    :class:`~attention_course.scoring.AdditiveScore`).
    ``forward(tgt_in (B, T), state)`` ->
    ``(logits (B, T, V), state, weights (B, T, S))``.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        hidden_dim: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        pad_id: int = 0,
        score: str = "general",
        input_feeding: bool = True,
    ) -> None:
        super().__init__()
        if score not in LUONG_SCORES:
            raise ValueError(
                f"score must be one of {LUONG_SCORES}, got {score!r}"
            )
        self.score, self.input_feeding = score, input_feeding
        self.attention_score: nn.Module | None = None
        if score == "general":
            self.attention_score = BilinearScore(hidden_dim, hidden_dim)
        elif score == "concat":
            self.attention_score = AdditiveScore(
                hidden_dim, hidden_dim, hidden_dim
            )
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        fed = hidden_dim if input_feeding else 0
        self.rnn = nn.GRU(
            embed_dim + fed, hidden_dim, num_layers,
            batch_first=True, dropout=dropout,
        )
        self.combine = nn.Linear(2 * hidden_dim, hidden_dim, bias=False)  # W_c
        self.output = nn.Linear(hidden_dim, vocab_size)  # W_s

    def init_state(
        self,
        enc_outputs: torch.Tensor,
        enc_state: torch.Tensor,
        src_valid_lens: torch.Tensor,
    ) -> DecoderState:
        """``(hidden (L, B, H), enc_outputs (B, S, H), src_valid_lens (B,),
        h~_0 (B, H))``, with ``h~_0 = 0``."""
        return (enc_state, enc_outputs, src_valid_lens,
                enc_outputs.new_zeros(enc_outputs.shape[0],
                                      enc_outputs.shape[2]))

    def attend(
        self,
        query: torch.Tensor,
        enc_outputs: torch.Tensor,
        src_valid_lens: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``query (B, T, H)`` -> ``(attentional h~ (B, T, H),
        weights (B, T, S))``."""
        if self.attention_score is None:
            scores = dot_score(query, enc_outputs)
        else:
            scores = self.attention_score(query, enc_outputs)
        weights = masked_softmax(scores, src_valid_lens)  # (B, T, S)
        context = weights @ enc_outputs  # c_t: (B, T, H)
        attentional = torch.tanh(
            self.combine(torch.cat([context, query], dim=-1))
        )
        return attentional, weights

    def forward(
        self, tgt_in: torch.Tensor, state: DecoderState
    ) -> tuple[torch.Tensor, DecoderState, torch.Tensor]:
        hidden, enc_outputs, src_valid_lens, fed = state
        embedded = self.embedding(tgt_in)  # (B, T, E)
        if not self.input_feeding:  # every s_t at once, then every query
            states, hidden = self.rnn(embedded, hidden)
            attentional, weights = self.attend(
                states, enc_outputs, src_valid_lens
            )
            fed = attentional[:, -1]
        else:  # h~_{t-1} is part of step t's input: one step at a time
            steps, all_weights = [], []
            for t in range(tgt_in.shape[1]):
                step_input = torch.cat(
                    [embedded[:, t : t + 1], fed.unsqueeze(1)], dim=-1
                )
                out, hidden = self.rnn(step_input, hidden)  # s_t: (B, 1, H)
                step, step_weights = self.attend(
                    out, enc_outputs, src_valid_lens
                )
                fed = step.squeeze(1)
                steps.append(step)
                all_weights.append(step_weights)
            attentional = torch.cat(steps, dim=1)
            weights = torch.cat(all_weights, dim=1)
        logits = self.output(attentional)
        return (logits, (hidden, enc_outputs, src_valid_lens, fed), weights)


class Seq2Seq(nn.Module):
    """An encoder and a decoder.

    ``forward(src (B, S), src_valid_lens (B,), tgt_in (B, T))`` ->
    ``(logits (B, T, V), weights (B, T, S) or None)``, teacher forced: the
    decoder reads the true previous words ``tgt_in``.
    """

    def __init__(self, encoder: Seq2SeqEncoder, decoder: nn.Module) -> None:
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def start(
        self, src: torch.Tensor, src_valid_lens: torch.Tensor
    ) -> DecoderState:
        """Encode the source and return the decoder's first state."""
        enc_outputs, enc_state = self.encoder(src, src_valid_lens)
        return self.decoder.init_state(enc_outputs, enc_state, src_valid_lens)

    def forward(
        self,
        src: torch.Tensor,
        src_valid_lens: torch.Tensor,
        tgt_in: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if tgt_in.dim() != 2 or tgt_in.shape[0] != src.shape[0]:
            raise ValueError(
                f"tgt_in must have shape (B, T) with B = {src.shape[0]} as in "
                f"src {tuple(src.shape)}, got {tuple(tgt_in.shape)}"
            )
        logits, _, weights = self.decoder(
            tgt_in, self.start(src, src_valid_lens)
        )
        return logits, weights


ATTENTION_KINDS = ("none", "bahdanau", "luong")


def make_seq2seq(
    src_vocab_size: int,
    tgt_vocab_size: int,
    attention: bool | str = True,
    embed_dim: int = 32,
    hidden_dim: int = 64,
    num_layers: int = 1,
    dropout: float = 0.0,
    pad_id: int = 0,
    score: str = "general",
    input_feeding: bool = True,
) -> Seq2Seq:
    """A GRU encoder with one of the three decoders.

    ``attention`` is ``"bahdanau"`` (or ``True``: an
    :class:`AttentionDecoder`), ``"luong"`` (a :class:`LuongDecoder` with
    ``score`` and ``input_feeding``) or ``"none"`` (or ``False``: a
    :class:`FixedContextDecoder`).
    """
    kind = {True: "bahdanau", False: "none"}.get(attention, attention)
    if kind not in ATTENTION_KINDS:
        raise ValueError(
            f"attention must be True, False or one of {ATTENTION_KINDS}, "
            f"got {attention!r}"
        )
    encoder = Seq2SeqEncoder(
        src_vocab_size, embed_dim, hidden_dim, num_layers, dropout, pad_id
    )
    sizes = (tgt_vocab_size, embed_dim, hidden_dim, num_layers, dropout, pad_id)
    decoder: nn.Module
    if kind == "luong":
        decoder = LuongDecoder(*sizes, score=score,
                               input_feeding=input_feeding)
    elif kind == "bahdanau":
        decoder = AttentionDecoder(*sizes)
    else:
        decoder = FixedContextDecoder(*sizes)
    return Seq2Seq(encoder, decoder)


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


def translate_pairs(
    model: Seq2Seq,
    pairs: Sequence[tuple[list[str], list[str]]],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    batch_size: int = 256,
    max_len: int = 30,
) -> list[list[str]]:
    """Greedy translations of the sources of ``pairs``, in order, batched."""
    device = next(model.parameters()).device
    out: list[list[str]] = []
    for start in range(0, len(pairs), batch_size):
        batch = collate(pairs[start : start + batch_size], src_vocab, tgt_vocab)
        decoded = greedy_decode(
            model,
            batch.src.to(device),
            batch.src_valid_lens.to(device),
            tgt_vocab.bos_id,
            tgt_vocab.eos_id,
            max_len,
        )
        out += [tgt_vocab.decode(row) for row in decoded.ids]
    return out


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
    device = next(model.parameters()).device
    out: list[Translation] = []
    for start in range(0, len(pairs), batch_size):
        batch = collate(pairs[start : start + batch_size], src_vocab, tgt_vocab)
        decoded = greedy_decode(
            model,
            batch.src.to(device),
            batch.src_valid_lens.to(device),
            tgt_vocab.bos_id,
            tgt_vocab.eos_id,
            max_len,
        )
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
    from attention_course.data import translation as tr

    lexicon: dict[str, set[str]] = {}

    def add(chinese: str, *english: str) -> None:
        lexicon.setdefault(chinese, set()).update(english)

    for table in (tr.NAMES, tr.NOUNS, tr.ADJECTIVES):
        for english, chinese in table.items():
            add(chinese, english)
    for base, (present, past, chinese) in tr.VERBS.items():
        add(chinese, base, present, past)
    for words, chinese in tr.PLACES.items():
        if len(words) == 1:
            add(chinese, *words)
    for times in tr.TIMES.values():
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


# ------------------------------------------------------------------------------
# Scores
# ------------------------------------------------------------------------------


def ngram_counts(tokens: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    """How often each ``n``-gram occurs in ``tokens``."""
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def modified_precision(
    candidate: Sequence[str], reference: Sequence[str], n: int
) -> tuple[int, int]:
    """``(clipped matches, candidate n-grams)``: each candidate ``n``-gram
    counts at most as often as it occurs in the reference
    (Papineni et al. 2002)."""
    cand, ref = ngram_counts(candidate, n), ngram_counts(reference, n)
    clipped = sum(min(count, ref[gram]) for gram, count in cand.items())
    return clipped, sum(cand.values())


def corpus_bleu(
    candidates: Sequence[Sequence[str]],
    references: Sequence[Sequence[str]],
    max_n: int = 4,
) -> float:
    """Corpus BLEU with one reference per sentence, in ``[0, 1]``.

    ``BP * exp(mean_n log p_n)`` for ``n = 1..max_n``, where ``p_n`` sums
    clipped ``n``-gram matches and candidate ``n``-grams over the whole corpus,
    and the brevity penalty is ``BP = exp(min(0, 1 - r / c))`` for total
    reference length ``r`` and total candidate length ``c``. Without smoothing:
    if some ``p_n`` is 0 the score is 0.
    """
    if len(candidates) != len(references):
        raise ValueError(
            f"need as many candidates as references, got {len(candidates)} "
            f"and {len(references)}"
        )
    if max_n < 1:
        raise ValueError(f"max_n must be at least 1, got {max_n}")
    log_precision = 0.0
    for n in range(1, max_n + 1):
        matches = total = 0
        for cand, ref in zip(candidates, references, strict=True):
            m, t = modified_precision(cand, ref, n)
            matches, total = matches + m, total + t
        if matches == 0:
            return 0.0
        log_precision += math.log(matches / total) / max_n
    c = sum(len(cand) for cand in candidates)
    r = sum(len(ref) for ref in references)
    return math.exp(min(0.0, 1 - r / c) + log_precision)


def sentence_bleu(
    candidate: Sequence[str], reference: Sequence[str], max_n: int = 4
) -> float:
    """BLEU of one sentence: :func:`corpus_bleu` of a one-sentence corpus."""
    return corpus_bleu([candidate], [reference], max_n)


def exact_match(
    candidates: Sequence[Sequence[str]], references: Sequence[Sequence[str]]
) -> float:
    """Fraction of candidates equal to their reference, word for word."""
    if len(candidates) != len(references) or not candidates:
        raise ValueError(
            f"need as many candidates as references (at least one), "
            f"got {len(candidates)} and {len(references)}"
        )
    return sum(
        list(c) == list(r) for c, r in zip(candidates, references, strict=True)
    ) / len(candidates)


def edit_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """The number of words to insert, delete or replace to turn ``a`` into
    ``b`` (Levenshtein distance over words)."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i]
        for j, y in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1,
                               previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def scores_by_length(
    pairs: Sequence[tuple[list[str], list[str]]],
    predictions: Sequence[Sequence[str]],
    buckets: Sequence[tuple[int, int]] = ((3, 6), (7, 10), (11, 14), (15, 20)),
) -> list[dict[str, float | int | str]]:
    """Exact match and BLEU for source-length buckets ``(lo, hi)`` (inclusive),
    then all.

    Returns one dict per row: ``{"length", "n", "exact_match", "bleu"}``.
    """
    if len(pairs) != len(predictions):
        raise ValueError(
            f"got {len(pairs)} pairs but {len(predictions)} predictions"
        )
    rows = []
    named = [(f"{lo}-{hi}", lo, hi) for lo, hi in buckets] + [
        ("all", 0, math.inf)
    ]
    for name, lo, hi in named:
        chosen = [i for i, (src, _) in enumerate(pairs) if lo <= len(src) <= hi]
        if not chosen:
            continue
        refs = [pairs[i][1] for i in chosen]
        preds = [predictions[i] for i in chosen]
        rows.append(
            {
                "length": name,
                "n": len(chosen),
                "exact_match": exact_match(preds, refs),
                "bleu": corpus_bleu(preds, refs),
            }
        )
    return rows


def format_table(
    rows: Sequence[dict[str, float | int | str]], title: str = ""
) -> str:
    """The rows of :func:`scores_by_length` as a small text table."""
    lines = [title] if title else []
    lines.append(
        f"{'source length':>13} {'n':>5} {'exact match':>12} {'BLEU':>6}"
    )
    for row in rows:
        lines.append(
            f"{row['length']:>13} {row['n']:>5} "
            f"{row['exact_match']:>12.1%} {row['bleu']:>6.3f}"
        )
    return "\n".join(lines)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and (population) standard deviation of a few runs' results."""
    if not values:
        raise ValueError("mean_std needs at least one value, got none")
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def format_over_seeds(
    tables: dict[str, Sequence[Sequence[dict[str, float | int | str]]]],
    metric: str = "exact_match",
) -> str:
    """Several runs' :func:`scores_by_length` as one text table: a row per
    model, a column per length bucket, each cell ``mean ± std`` of ``metric``
    over the model's runs (exact match in percent, BLEU as a fraction)."""
    first = next(iter(tables.values()))[0]
    buckets = [str(row["length"]) for row in first]
    width = max(len(name) for name in tables)
    lines = [f"{'':<{width}}" + "".join(f"{b:>13}" for b in buckets)]
    for name, runs in tables.items():
        cells = []
        for k, bucket in enumerate(buckets):
            if any(str(run[k]["length"]) != bucket for run in runs):
                raise ValueError(
                    f"the runs of {name!r} have different length buckets"
                )
            mean, std = mean_std([float(run[k][metric]) for run in runs])
            cells.append(f"{100 * mean:.1f} ± {100 * std:.1f}"
                         if metric == "exact_match"
                         else f"{mean:.2f} ± {std:.2f}")
        lines.append(f"{name:<{width}}" + "".join(f"{c:>13}" for c in cells))
    return "\n".join(lines)
