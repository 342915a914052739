"""Exercise 1: attention pooling by kernel regression (chapter 1).

The references are the package's own chapter-1 code (``attention_course.kernel_regression``).
"""

from __future__ import annotations

import torch

from attention_course import kernel_regression as kr
from attention_course.grading.compare import rows_sum_to_one
from attention_course.grading.spec import Case, Exercise, Question


def _points(g: torch.Generator, n: int) -> torch.Tensor:
    return torch.sort(torch.rand(n, generator=g) * 5).values


def _data(g: torch.Generator, n: int, noise: float = 0.3) -> tuple[torch.Tensor, torch.Tensor]:
    x = _points(g, n)
    return x, 2 * torch.sin(x) + x**0.8 + noise * torch.randn(n, generator=g)


def weight_cases() -> list[Case]:
    g = torch.Generator().manual_seed(101)
    cases = []
    for n_queries, n_keys, h in [(3, 5, 1.0), (4, 7, 0.5), (6, 6, 2.0), (1, 4, 0.8)]:
        q, k = _points(g, n_queries), _points(g, n_keys)
        cases.append(Case(args=(q, k, h), label=f"{n_queries} queries, {n_keys} keys, h = {h}"))
    return cases


def predict_cases() -> list[Case]:
    g = torch.Generator().manual_seed(102)
    cases = []
    for n_queries, n_keys, h in [(5, 10, 1.0), (8, 20, 0.4), (3, 6, 3.0)]:
        keys, values = _data(g, n_keys)
        queries = _points(g, n_queries)
        label = f"{n_queries} queries, {n_keys} keys, h = {h}"
        cases.append(Case(args=(queries, keys, values, h), label=label))
    return cases


def module_cases() -> list[Case]:
    g = torch.Generator().manual_seed(103)
    cases = []
    for n_queries, n_keys, h in [(4, 9, 0.7), (10, 12, 1.5)]:
        keys, values = _data(g, n_keys)
        queries = _points(g, n_queries)
        cases.append(
            Case(
                init_args=(1.0,),
                params={"log_bandwidth": torch.tensor(h).log()},
                args=(queries, keys, values),
                label=f"{n_queries} queries, {n_keys} keys, log_bandwidth set to log({h})",
            )
        )
    return cases


def bandwidth_cases() -> list[Case]:
    g = torch.Generator().manual_seed(104)
    candidates = [0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.2, 2.0, 4.0]
    cases = []
    for n, noise in [(40, 0.1), (60, 1.0), (30, 0.4)]:
        x, y = _data(g, n, noise)
        label = f"{n} points, noise {noise}, {len(candidates)} candidates"
        cases.append(Case(args=(x, y, candidates), label=label))
    return cases


def _predict(queries, keys, values, bandwidth):
    return kr.nadaraya_watson(queries, keys, values, bandwidth)[0]


EXERCISE = Exercise(
    id="01_attention_pooling",
    title="Attention pooling by kernel regression",
    forbidden_imports=("attention_course.kernel_regression",),
    questions=(
        Question(
            id="q1_weights",
            symbol="gaussian_weights",
            title="Gaussian kernel attention weights",
            points=2,
            reference=kr.attention_weights,
            cases=weight_cases,
            diagnose=rows_sum_to_one(),
            hint=(
                "weights[i, j] = softmax over j of -(q_i - k_j)^2 / (2 h^2): one row per "
                "query, one column per key. Broadcast queries[:, None] against keys[None, :]."
            ),
        ),
        Question(
            id="q2_predict",
            symbol="nadaraya_watson_predict",
            title="The Nadaraya-Watson prediction",
            points=2,
            reference=_predict,
            cases=predict_cases,
            hint="f(q_i) = sum_j weights[i, j] * values[j]: a matrix-vector product, shape (Nq,).",
        ),
        Question(
            id="q3_module",
            symbol="LearnableBandwidthPooling",
            title="Attention pooling with a learnable bandwidth",
            call="module",
            points=3,
            reference=kr.NWKernelRegression,
            cases=module_cases,
            hint=(
                "Keep the bandwidth as h = exp(log_bandwidth), with log_bandwidth an "
                "nn.Parameter holding a scalar (shape ()), and use it in the Gaussian weights."
            ),
        ),
        Question(
            id="q4_bandwidth",
            symbol="choose_bandwidth",
            title="Choosing the bandwidth by leave-one-out",
            points=3,
            reference=kr.choose_bandwidth,
            cases=bandwidth_cases,
            hint=(
                "For each candidate h, predict every y_i from all the other points (give the "
                "diagonal weight 0: put -inf in the scores before the softmax), take the mean "
                "squared error, and return the h (a float) with the smallest error."
            ),
        ),
    ),
)
