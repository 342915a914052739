"""Tests for attention_course.scoring: every score against its formula, soft vs. hard."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_course.scoring import (
    AdditiveScore,
    BilinearScore,
    MLPScore,
    cosine_score,
    dot_score,
    gumbel_softmax_weights,
    hard_attention_weights,
    scaled_dot_score,
)


def _qk(b=2, nq=3, nk=4, dq=5, dk=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, nq, dq, generator=g), torch.randn(b, nk, dk, generator=g)


def _pairwise(q, k, fn):
    """Apply ``fn(q_i, k_j)`` to every pair, the slow and obvious way: ``(B, Nq, Nk)``."""
    b, nq, nk = q.shape[0], q.shape[1], k.shape[1]
    out = torch.empty(b, nq, nk)
    for n in range(b):
        for i in range(nq):
            for j in range(nk):
                out[n, i, j] = fn(q[n, i], k[n, j])
    return out


def test_dot_score_formula():
    q, k = _qk()
    expected = _pairwise(q, k, lambda a, c: (a * c).sum())
    torch.testing.assert_close(dot_score(q, k), expected)


def test_scaled_dot_score_formula():
    q, k = _qk(dq=16, dk=16, seed=1)
    expected = _pairwise(q, k, lambda a, c: (a * c).sum() / 4.0)
    torch.testing.assert_close(scaled_dot_score(q, k), expected)


def test_cosine_score_formula_and_range():
    q, k = _qk(seed=2)
    expected = _pairwise(q, k, lambda a, c: (a @ c) / (a.norm() * c.norm()))
    scores = cosine_score(q, k)
    torch.testing.assert_close(scores, expected)
    assert scores.abs().max() <= 1 + 1e-6
    # Lengths do not matter, only directions; a zero vector scores 0 (no NaN).
    torch.testing.assert_close(cosine_score(3 * q, 0.5 * k), scores)
    zero = cosine_score(torch.zeros(1, 1, 5), k[:1])
    assert torch.equal(zero, torch.zeros(1, 1, 4))


@pytest.mark.parametrize("dq,dk", [(5, 5), (3, 7)])
def test_additive_score_formula(dq, dk):
    q, k = _qk(dq=dq, dk=dk, seed=3)
    torch.manual_seed(0)
    score = AdditiveScore(dq, dk, hidden_dim=6)
    w_q, w_k, w_v = score.W_q.weight, score.W_k.weight, score.w_v.weight[0]
    assert w_q.shape == (6, dq) and w_k.shape == (6, dk) and w_v.shape == (6,)
    expected = _pairwise(q, k, lambda a, c: w_v @ torch.tanh(w_q @ a + w_k @ c))
    torch.testing.assert_close(score(q, k), expected.detach())


@pytest.mark.parametrize("dq,dk", [(5, 5), (3, 7)])
def test_bilinear_score_formula(dq, dk):
    q, k = _qk(dq=dq, dk=dk, seed=4)
    torch.manual_seed(1)
    score = BilinearScore(dq, dk)
    assert score.W.shape == (dq, dk)
    expected = _pairwise(q, k, lambda a, c: a @ score.W @ c)
    torch.testing.assert_close(score(q, k), expected.detach())


def test_bilinear_score_is_asymmetric_and_dot_is_its_identity_case():
    x, _ = _qk(b=1, nq=4, dq=5, seed=5)
    torch.manual_seed(2)
    score = BilinearScore(5, 5)
    s = score(x, x)[0]
    assert not torch.allclose(s, s.T)  # a(x_i, x_j) != a(x_j, x_i)
    with torch.no_grad():
        score.W.copy_(torch.eye(5))
    torch.testing.assert_close(score(x, x), dot_score(x, x))


@pytest.mark.parametrize("dq,dk", [(5, 5), (3, 7)])
def test_mlp_score_formula(dq, dk):
    q, k = _qk(dq=dq, dk=dk, seed=6)
    torch.manual_seed(3)
    score = MLPScore(dq, dk, hidden_dim=8)
    first, last = score.net[0], score.net[2]

    def formula(a, c):
        hidden = torch.relu(first.weight @ torch.cat([a, c]) + first.bias)
        return last.weight[0] @ hidden + last.bias[0]

    torch.testing.assert_close(score(q, k), _pairwise(q, k, formula).detach())


@pytest.mark.parametrize("module", [AdditiveScore(3, 7, 4), BilinearScore(3, 7), MLPScore(3, 7, 4)])
def test_learned_scores_have_gradients_and_check_sizes(module):
    q, k = _qk(dq=3, dk=7, seed=7)
    module(q, k).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters())
    with pytest.raises(ValueError, match=r"q \(2, 3, 7\) and k \(2, 3, 3\)"):
        module(k[:, :3], q[:, :4])


def test_bad_shapes_raise_value_errors_naming_shapes():
    q, k = _qk(dq=5, dk=6)
    with pytest.raises(ValueError, match=r"q \(2, 3, 5\) and k \(2, 4, 6\)"):
        dot_score(q, k)
    with pytest.raises(ValueError, match=r"batch"):
        scaled_dot_score(q, k[:1, :, :5])
    with pytest.raises(ValueError, match=r"\(3, 5\)"):
        cosine_score(q[0], k[0, :, :5])


@settings(max_examples=30, deadline=None)
@given(d=st.integers(1, 64), seed=st.integers(0, 10_000))
def test_property_scaled_dot_is_dot_over_sqrt_d(d, seed):
    q, k = _qk(dq=d, dk=d, seed=seed)
    torch.testing.assert_close(scaled_dot_score(q, k) * math.sqrt(d), dot_score(q, k))


def test_scaling_keeps_variance_near_one_for_large_d():
    q, k = _qk(b=1, nq=200, nk=200, dq=256, dk=256, seed=8)
    raw, scaled = dot_score(q, k), scaled_dot_score(q, k)
    assert 200 < raw.var().item() < 310  # Var(q . k) = d = 256
    assert 0.8 < scaled.var().item() < 1.2


# ---------------------------------------------------------------- soft vs. hard


def test_hard_attention_is_one_hot_and_blocks_gradients():
    scores = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 1.0]], requires_grad=True)
    weights = hard_attention_weights(scores)
    assert torch.equal(weights, torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]))
    assert not weights.requires_grad  # argmax cuts the graph: no gradient reaches scores


def test_gumbel_softmax_is_a_distribution_and_reproducible():
    scores = torch.randn(4, 6, generator=torch.Generator().manual_seed(9))
    a = gumbel_softmax_weights(scores, 0.5, generator=torch.Generator().manual_seed(1))
    b = gumbel_softmax_weights(scores, 0.5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and torch.all(a >= 0)
    torch.testing.assert_close(a.sum(-1), torch.ones(4))


def test_gumbel_softmax_low_temperature_is_nearly_one_hot_and_samples_softmax():
    scores = torch.tensor([1.0, 0.0, -1.0]).repeat(20_000, 1)
    g = torch.Generator().manual_seed(10)
    samples = gumbel_softmax_weights(scores, temperature=0.01, generator=g)
    assert samples.max(-1).values.mean() > 0.99
    frequencies = samples.argmax(-1).bincount(minlength=3) / 20_000
    torch.testing.assert_close(frequencies, torch.softmax(scores[0], -1), atol=0.015, rtol=0)


def test_gumbel_softmax_hard_is_one_hot_with_soft_gradient():
    scores = torch.randn(3, 5, generator=torch.Generator().manual_seed(11), requires_grad=True)
    weights = gumbel_softmax_weights(scores, 1.0, hard=True, generator=torch.Generator())
    assert torch.equal(weights.detach().sum(-1), torch.ones(3))
    assert set(weights.detach().unique().tolist()) <= {0.0, 1.0}
    (weights * torch.arange(5.0)).sum().backward()
    assert scores.grad is not None and scores.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="temperature"):
        gumbel_softmax_weights(scores, 0.0)
