"""Exercise 4: attention in encoder-decoder models (chapter 4).

The references are the package's own code: chapter 4's ``seq2seq`` (BLEU), built on
chapter 2's additive score and chapter 3's masked softmax, exactly as
``seq2seq.AttentionDecoder.attend`` uses them.
"""

from __future__ import annotations

from typing import Any

import torch

from attention_course import seq2seq
from attention_course.grading.compare import rows_sum_to_one
from attention_course.grading.spec import Case, Exercise, Question
from attention_course.masking import masked_softmax
from attention_course.scoring import AdditiveScore


def _context_vectors(weights: torch.Tensor, enc_outputs: torch.Tensor) -> torch.Tensor:
    return weights @ enc_outputs


def _source_padding_weights(scores: torch.Tensor, src: torch.Tensor, pad_id: int) -> torch.Tensor:
    return masked_softmax(scores, (src != pad_id).sum(dim=1))


class _BahdanauAttention(AdditiveScore):
    """Reference for question 3: the additive score, a masked softmax, a weighted sum."""

    def forward(  # type: ignore[override]
        self, query: torch.Tensor, enc_outputs: torch.Tensor, src_valid_lens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        weights = masked_softmax(super().forward(query.unsqueeze(1), enc_outputs), src_valid_lens)
        return (weights @ enc_outputs).squeeze(1), weights.squeeze(1)


def _padded_source_gets_no_weight(case: Case, expected: Any, got: Any) -> str | None:
    """A ``diagnose`` hook: name the first padded source position that got weight."""
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return None
    src, pad_id = case.args[1], case.args[2]
    padded = (src == pad_id)[:, None, :].expand_as(got)
    leak = padded & (got.detach().double().abs() > 1e-6)
    if bool(leak.any()):
        b, t, s = (int(i) for i in leak.nonzero()[0])
        return (
            f"sentence {b}, output step {t} gives weight {got[b, t, s].item():.3g} to source "
            f"position {s}, which is <pad>: padded positions must get exactly 0"
        )
    return rows_sum_to_one()(case, expected, got)


def context_cases() -> list[Case]:
    g = torch.Generator().manual_seed(401)
    cases = []
    for b, t, s, h in [(2, 3, 4, 5), (1, 1, 6, 3), (3, 2, 5, 8)]:
        weights = torch.softmax(torch.randn(b, t, s, generator=g) * 2, dim=-1)
        weights[0, :, -1] = 0.0  # a padded position in the first sentence
        weights = weights / weights.sum(-1, keepdim=True)
        cases.append(
            Case(
                args=(weights, torch.randn(b, s, h, generator=g)),
                label=f"B={b}, T={t}, S={s}, H={h}",
            )
        )
    return cases


def padding_cases() -> list[Case]:
    g = torch.Generator().manual_seed(402)
    return [
        Case(
            args=(
                torch.randn(2, 3, 5, generator=g),
                torch.tensor([[7, 4, 9, 2, 0], [5, 2, 0, 0, 0]]),
                0,
            ),
            label="pad_id 0, valid lengths 4 and 2",
        ),
        Case(
            args=(
                torch.randn(3, 1, 4, generator=g) * 4,
                torch.tensor([[3, 3, 3, 3], [8, 1, 1, 1], [6, 9, 1, 1]]),
                1,
            ),
            label="pad_id 1, one unpadded sentence, one of length 1",
        ),
        Case(
            args=(torch.randn(1, 4, 3, generator=g), torch.tensor([[4, 5, 2]]), 0),
            label="no padding at all",
        ),
    ]


def attention_cases() -> list[Case]:
    g = torch.Generator().manual_seed(403)
    cases = []
    for b, s, q_dim, k_dim, hidden, lens in [
        (2, 5, 4, 6, 7, [5, 3]),
        (3, 4, 5, 5, 3, [1, 4, 2]),
        (1, 6, 3, 2, 4, [6]),
    ]:
        cases.append(
            Case(
                init_args=(q_dim, k_dim, hidden),
                params={
                    "W_q.weight": torch.randn(hidden, q_dim, generator=g) * 0.7,
                    "W_k.weight": torch.randn(hidden, k_dim, generator=g) * 0.7,
                    "w_v.weight": torch.randn(1, hidden, generator=g),
                },
                args=(
                    torch.randn(b, q_dim, generator=g),
                    torch.randn(b, s, k_dim, generator=g),
                    torch.tensor(lens),
                ),
                label=f"B={b}, S={s}, query_dim {q_dim}, key_dim {k_dim}, hidden {hidden}, "
                f"valid lengths {lens}",
            )
        )
    return cases


def bleu_cases() -> list[Case]:
    ref = "汤姆 昨天 在 厨房 追 了 杰瑞".split()
    return [
        Case(args=([ref], [ref], 4), label="a perfect translation"),
        Case(args=([ref[:5]], [ref], 4), label="a correct but short translation (brevity penalty)"),
        Case(
            args=([["汤姆", "昨天", "在", "花园", "追", "了", "杰瑞"]], [ref], 2),
            label="one wrong word, max_n = 2",
        ),
        Case(
            args=([["the"] * 7], [["the", "cat", "is", "on", "the", "mat"]], 1), label="'the' x 7"
        ),
        Case(
            args=(
                [["a", "b", "c"], ["d", "e"], ["a", "a", "b", "c"]],
                [["a", "b", "c"], ["d", "f"], ["a", "b", "c"]],
                2,
            ),
            label="three sentences: counts are pooled over the corpus",
        ),
        Case(
            args=([["a", "b", "x", "d", "e"]], [["a", "b", "c", "d", "e"]], 4),
            label="no 3-gram in common",
        ),
    ]


EXERCISE = Exercise(
    id="04_seq2seq_attention",
    title="Attention in encoder-decoder models",
    forbidden_imports=(
        "attention_course.seq2seq",
        "attention_course.masking",
        "attention_course.scoring",
    ),
    questions=(
        Question(
            id="q1_context",
            symbol="context_vectors",
            title="Context vectors from attention weights",
            points=2,
            reference=_context_vectors,
            cases=context_cases,
            hint=(
                "c[b, t] = sum_j weights[b, t, j] * enc_outputs[b, j]: a batched matrix "
                "product of (B, T, S) and (B, S, H), giving (B, T, H)."
            ),
        ),
        Question(
            id="q2_padding",
            symbol="source_padding_weights",
            title="Masking the padded source positions",
            points=2,
            reference=_source_padding_weights,
            cases=padding_cases,
            diagnose=_padded_source_gets_no_weight,
            hint=(
                "Build the bool mask src != pad_id, shape (B, S), insert the output-step axis "
                "(mask[:, None, :]), put -inf in the scores where it is False, then softmax over "
                "the last axis."
            ),
        ),
        Question(
            id="q3_attention",
            symbol="BahdanauAttention",
            call="module",
            title="One attention step of the decoder",
            points=3,
            reference=_BahdanauAttention,
            cases=attention_cases,
            diagnose=rows_sum_to_one(pick=lambda out: out[1]),
            hint=(
                "scores[b, j] = w_v(tanh(W_q(query[b]) + W_k(enc_outputs[b, j]))); positions "
                "j >= src_valid_lens[b] get -inf before the softmax over j; the context is "
                "sum_j weights[b, j] * enc_outputs[b, j]. Return (context (B, key_dim), "
                "weights (B, S))."
            ),
        ),
        Question(
            id="q4_bleu",
            symbol="corpus_bleu",
            title="Corpus BLEU",
            points=3,
            reference=seq2seq.corpus_bleu,
            cases=bleu_cases,
            hint=(
                "For each n, add up the clipped matches min(count in candidate, count in "
                "reference) and the candidate n-grams over ALL sentences, then p_n = matches / "
                "total; BLEU = exp(min(0, 1 - r / c)) * exp(mean of log p_n), and 0 when some "
                "p_n is 0. r and c are the total reference and candidate lengths."
            ),
        ),
    ),
)
