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
:func:`make_seq2seq` builds the encoder with one of the decoders. Training
them (the teacher-forced loss) and translating with them (greedy decoding, the
alignments) are the chapter's experiments, in
:mod:`attention_course.experiments.seq2seq`; the scores of a translation
(BLEU, exact match) are in :mod:`attention_course.metrics`.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

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
