"""Exercise 2: attention scoring functions (chapter 2).

The references are the package's own chapter-2 code (``attention_course.scoring``).
"""

from __future__ import annotations

import torch

from attention_course import scoring
from attention_course.grading.compare import rows_sum_to_one
from attention_course.grading.spec import Case, Exercise, Question


def _qk(g: torch.Generator, b: int, nq: int, nk: int, dq: int, dk: int, scale: float = 1.0):
    return torch.randn(b, nq, dq, generator=g) * scale, torch.randn(b, nk, dk, generator=g) * scale


def scaled_dot_cases() -> list[Case]:
    g = torch.Generator().manual_seed(201)
    cases = []
    for b, nq, nk, d in [(2, 3, 5, 4), (1, 1, 6, 16), (3, 4, 4, 9)]:
        q, k = _qk(g, b, nq, nk, d, d)
        cases.append(Case(args=(q, k), label=f"B={b}, Nq={nq}, Nk={nk}, d={d}"))
    return cases


def cosine_cases() -> list[Case]:
    g = torch.Generator().manual_seed(202)
    cases = []
    for b, nq, nk, d, scale in [(2, 3, 5, 4, 1.0), (1, 2, 7, 8, 10.0)]:
        q, k = _qk(g, b, nq, nk, d, d, scale)
        cases.append(Case(args=(q, k), label=f"B={b}, Nq={nq}, Nk={nk}, d={d}"))
    q, k = _qk(g, 1, 3, 4, 5, 5)
    q[0, 1] = 0.0
    cases.append(Case(args=(q, k), label="query 1 is the zero vector"))
    return cases


def additive_cases() -> list[Case]:
    g = torch.Generator().manual_seed(203)
    cases = []
    for dq, dk, h, b, nq, nk in [(4, 6, 8, 2, 3, 5), (5, 5, 3, 1, 1, 7), (2, 9, 6, 3, 4, 2)]:
        q, k = _qk(g, b, nq, nk, dq, dk)
        params = {
            "W_q.weight": torch.randn(h, dq, generator=g) * 0.5,
            "W_k.weight": torch.randn(h, dk, generator=g) * 0.5,
            "w_v.weight": torch.randn(1, h, generator=g),
        }
        label = f"query_dim {dq}, key_dim {dk}, hidden {h}; B={b}, Nq={nq}, Nk={nk}"
        cases.append(Case(init_args=(dq, dk, h), params=params, args=(q, k), label=label))
    return cases


def bilinear_cases() -> list[Case]:
    g = torch.Generator().manual_seed(204)
    cases = []
    for dq, dk, b, nq, nk in [(4, 6, 2, 3, 5), (3, 3, 1, 4, 4), (7, 2, 2, 1, 6)]:
        q, k = _qk(g, b, nq, nk, dq, dk)
        params = {"W": torch.randn(dq, dk, generator=g)}
        label = f"query_dim {dq}, key_dim {dk}; B={b}, Nq={nq}, Nk={nk}"
        cases.append(Case(init_args=(dq, dk), params=params, args=(q, k), label=label))
    return cases


def attention_cases() -> list[Case]:
    g = torch.Generator().manual_seed(205)
    cases = []
    for b, nq, nk, d, dv in [(2, 3, 5, 4, 6), (1, 4, 4, 16, 2), (3, 1, 7, 8, 8)]:
        q, k = _qk(g, b, nq, nk, d, d, 2.0)
        v = torch.randn(b, nk, dv, generator=g)
        cases.append(Case(args=(q, k, v), label=f"B={b}, Nq={nq}, Nk={nk}, d={d}, dv={dv}"))
    return cases


def _second(out):
    """The weights of an ``(output, weights)`` pair, if that is what came back."""
    return out[1] if isinstance(out, (tuple, list)) and len(out) == 2 else None


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    weights = torch.softmax(scoring.scaled_dot_score(q, k), dim=-1)
    return weights @ v, weights


EXERCISE = Exercise(
    id="02_scoring",
    title="Attention scoring functions",
    forbidden_imports=("attention_course.scoring", "attention_course.masking"),
    questions=(
        Question(
            id="q1_scaled_dot",
            symbol="scaled_dot_score",
            title="Scaled dot-product scores",
            points=2,
            reference=scoring.scaled_dot_score,
            cases=scaled_dot_cases,
            hint=(
                "scores[b, i, j] = q[b, i] . k[b, j] / sqrt(d), with d = q.shape[-1]: "
                "q @ k.transpose(1, 2) / math.sqrt(d), shape (B, Nq, Nk)."
            ),
        ),
        Question(
            id="q2_cosine",
            symbol="cosine_score",
            title="Cosine-similarity scores",
            points=2,
            reference=scoring.cosine_score,
            cases=cosine_cases,
            hint=(
                "Divide every query and key by its length first (F.normalize(x, dim=-1) "
                "does it and leaves a zero vector at 0), then take the dot products."
            ),
        ),
        Question(
            id="q3_additive",
            symbol="AdditiveScore",
            call="module",
            title="Additive (Bahdanau) scores",
            points=3,
            reference=scoring.AdditiveScore,
            cases=additive_cases,
            rtol=1e-4,
            atol=1e-5,
            hint=(
                "W_q, W_k and w_v are nn.Linear(..., bias=False) layers. Project, then add "
                "W_q(q).unsqueeze(2) (B, Nq, 1, h) to W_k(k).unsqueeze(1) (B, 1, Nk, h), "
                "take tanh, apply w_v and squeeze the last axis."
            ),
        ),
        Question(
            id="q4_bilinear",
            symbol="BilinearScore",
            call="module",
            title="Bilinear (general) scores",
            points=2,
            reference=scoring.BilinearScore,
            cases=bilinear_cases,
            rtol=1e-4,
            atol=1e-5,
            hint=(
                "W is an nn.Parameter of shape (query_dim, key_dim); the scores are "
                "q @ W @ k.transpose(1, 2), shape (B, Nq, Nk)."
            ),
        ),
        Question(
            id="q5_attention",
            symbol="scaled_dot_attention",
            title="Scaled dot-product attention: weights and output",
            points=2,
            reference=_attention,
            cases=attention_cases,
            diagnose=rows_sum_to_one(pick=_second),
            hint=(
                "weights = softmax(scaled dot scores) over the keys (dim=-1), output = "
                "weights @ v; return the pair (output, weights)."
            ),
        ),
    ),
)
