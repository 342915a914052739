"""Chapter 2: attention scoring functions, and soft vs. hard attention.

A scoring function ``a(q, k)`` says how well a key matches a query; a softmax
then turns the scores of one query into attention weights. Every function and
module here maps queries ``q (B, Nq, dq)`` and keys ``k (B, Nk, dk)`` to
scores ``(B, Nq, Nk)``:

- ``dot_score``: ``q . k`` (Luong et al. 2015), needs ``dq == dk``;
- ``scaled_dot_score``: ``q . k / sqrt(d)`` (Vaswani et al. 2017);
- ``cosine_score``: ``q . k / (|q| |k|)``, in ``[-1, 1]``;
- ``AdditiveScore``: ``w_v^T tanh(W_q q + W_k k)`` (Bahdanau et al.
  2015), any ``dq, dk``;
- ``BilinearScore``: ``q^T W k``, Luong's "general" score, any ``dq, dk``;
- ``MLPScore``: a small network on the concatenation ``[q; k]``.

Hard attention picks the single best value (``hard_attention_weights``),
which has no useful gradient. Stochastic hard attention draws one value with
probabilities equal to the weights (``sample_hard_attention``); on average
it gives the soft output. The Gumbel-softmax (Jang et al. 2017, Maddison et
al. 2017) is a differentiable relaxation of that draw
(``gumbel_softmax_weights``).

Section 2.4's comparison of the scores once trained is in
:mod:`attention_course.experiments.scoring`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def _check_qk(
    q: torch.Tensor, k: torch.Tensor, same_dim: bool = True
) -> None:
    """``q (B, Nq, dq)`` and ``k (B, Nk, dk)``; ``dq == dk`` when
    ``same_dim``."""
    shapes = f"q {tuple(q.shape)} and k {tuple(k.shape)}"
    if q.dim() != 3 or k.dim() != 3:
        raise ValueError(
            "q and k must have shapes (B, Nq, d) and (B, Nk, d); "
            f"got {shapes}"
        )
    if q.shape[0] != k.shape[0]:
        raise ValueError(
            f"q and k must have the same batch size B; got {shapes}"
        )
    if same_dim and q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"this score needs q and k of the same size d; got {shapes}"
        )


def dot_score(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``a(q, k) = q . k``: ``q (B, Nq, d)``, ``k (B, Nk, d)`` ->
    ``(B, Nq, Nk)``."""
    _check_qk(q, k)
    return q @ k.transpose(1, 2)


def scaled_dot_score(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``a(q, k) = q . k / sqrt(d)``: ``q (B, Nq, d)``, ``k (B, Nk, d)`` ->
    ``(B, Nq, Nk)``.

    If the entries of ``q`` and ``k`` are independent with mean 0 and
    variance 1, then ``q . k`` has variance ``d``; dividing by ``sqrt(d)``
    brings it back to 1.
    """
    return dot_score(q, k) / math.sqrt(q.shape[-1])


def cosine_score(
    q: torch.Tensor, k: torch.Tensor, eps: float = 1e-8
) -> torch.Tensor:
    """``a(q, k) = q . k / (|q| |k|)`` in ``[-1, 1]``:
    ``(B, Nq, d), (B, Nk, d) -> (B, Nq, Nk)``.

    Only directions count, not lengths; a zero vector (norm below ``eps``)
    scores 0.
    """
    _check_qk(q, k)
    q_unit = F.normalize(q, dim=-1, eps=eps)
    k_unit = F.normalize(k, dim=-1, eps=eps)
    return q_unit @ k_unit.transpose(1, 2)


def _check_dims(module: nn.Module, q: torch.Tensor, k: torch.Tensor) -> None:
    _check_qk(q, k, same_dim=False)
    if q.shape[-1] != module.query_dim or k.shape[-1] != module.key_dim:
        raise ValueError(
            f"{type(module).__name__} expects q (B, Nq, {module.query_dim}) "
            f"and k (B, Nk, {module.key_dim}); got q {tuple(q.shape)} and "
            f"k {tuple(k.shape)}"
        )


class AdditiveScore(nn.Module):
    """Additive (Bahdanau) score ``a(q, k) = w_v^T tanh(W_q q + W_k k)``.

    ``W_q`` is ``(hidden_dim, query_dim)``, ``W_k`` is
    ``(hidden_dim, key_dim)`` and ``w_v`` is ``(hidden_dim,)``, so queries
    and keys may have different sizes. ``bias=True`` adds a learned vector
    ``b`` inside the ``tanh`` (as ``W_q``'s bias):
    ``w_v^T tanh(W_q q + W_k k + b)``.
    ``forward(q (B, Nq, query_dim), k (B, Nk, key_dim))`` ->
    ``(B, Nq, Nk)``.
    """

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        hidden_dim: int,
        bias: bool = False,
    ) -> None:
        super().__init__()
        self.query_dim, self.key_dim = query_dim, key_dim
        self.W_q = nn.Linear(query_dim, hidden_dim, bias=bias)
        self.W_k = nn.Linear(key_dim, hidden_dim, bias=False)
        self.w_v = nn.Linear(hidden_dim, 1, bias=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        _check_dims(self, q, k)
        # (B, Nq, 1, h) + (B, 1, Nk, h) -> (B, Nq, Nk, h): every query meets
        # every key.
        features = torch.tanh(
            self.W_q(q).unsqueeze(2) + self.W_k(k).unsqueeze(1)
        )
        return self.w_v(features).squeeze(-1)


class BilinearScore(nn.Module):
    """Bilinear ("general", Luong et al. 2015) score ``a(q, k) = q^T W k``.

    ``W`` is ``(query_dim, key_dim)``; with ``W`` not symmetric,
    ``a(x, y) != a(y, x)``.
    ``forward(q (B, Nq, query_dim), k (B, Nk, key_dim))`` -> ``(B, Nq, Nk)``.
    """

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__()
        self.query_dim, self.key_dim = query_dim, key_dim
        self.W = nn.Parameter(torch.empty(query_dim, key_dim))
        # Var(q^T W k) = sum_ij W_ij^2 for unit-variance q, k: start the
        # scores at variance 1.
        nn.init.normal_(self.W, std=1.0 / math.sqrt(query_dim * key_dim))

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        _check_dims(self, q, k)
        return q @ self.W @ k.transpose(1, 2)


class MLPScore(nn.Module):
    """A small network on the pair:
    ``a(q, k) = w_2^T relu(W_1 [q; k] + b_1) + b_2``.

    ``AdditiveScore`` is the same idea with ``tanh`` and no biases, since
    ``W_1 [q; k] = W_q q + W_k k``.
    ``forward(q (B, Nq, query_dim), k (B, Nk, key_dim))`` -> ``(B, Nq, Nk)``.
    """

    def __init__(
        self, query_dim: int, key_dim: int, hidden_dim: int
    ) -> None:
        super().__init__()
        self.query_dim, self.key_dim = query_dim, key_dim
        self.net = nn.Sequential(
            nn.Linear(query_dim + key_dim, hidden_dim),
            nn.ReLU(),
            nn.Linear(hidden_dim, 1),
        )

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        _check_dims(self, q, k)
        num_queries, num_keys = q.shape[1], k.shape[1]
        pairs = torch.cat(
            [
                q.unsqueeze(2).expand(-1, -1, num_keys, -1),
                k.unsqueeze(1).expand(-1, num_queries, -1, -1),
            ],
            dim=-1,
        )  # (B, Nq, Nk, query_dim + key_dim)
        return self.net(pairs).squeeze(-1)


def hard_attention_weights(scores: torch.Tensor) -> torch.Tensor:
    """One-hot weights on the best-scoring key of each query:
    ``(..., Nk)`` -> ``(..., Nk)``.

    The argmax is piecewise constant in the scores, so no gradient flows
    back to them.
    """
    return F.one_hot(scores.argmax(dim=-1), scores.shape[-1]).to(
        scores.dtype
    )


def sample_hard_attention(
    weights: torch.Tensor,
    values: torch.Tensor,
    num_samples: int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Stochastic hard attention: for each query draw one key ``J`` with
    ``P(J = j) = weights[..., j]`` and output its value ``values[J]``.

    ``weights (Nq, Nk)`` (rows sum to 1), ``values (Nk, dv)`` ->
    ``(num_samples, Nq, dv)``: ``num_samples`` independent draws per query.
    """
    if weights.dim() != 2 or values.dim() != 2:
        raise ValueError(
            f"weights must be (Nq, Nk) and values (Nk, dv); got weights "
            f"{tuple(weights.shape)} and values {tuple(values.shape)}"
        )
    if weights.shape[1] != values.shape[0]:
        raise ValueError(
            f"weights (Nq, Nk) and values (Nk, dv) must agree on Nk; got "
            f"weights {tuple(weights.shape)} and values "
            f"{tuple(values.shape)}"
        )
    if num_samples < 1:
        raise ValueError(
            f"num_samples must be at least 1, got {num_samples}"
        )
    drawn = torch.multinomial(
        weights, num_samples, replacement=True, generator=generator
    )  # (Nq, num_samples): the index of the key drawn each time
    return values[drawn.T]


def gumbel_softmax_weights(
    scores: torch.Tensor,
    temperature: float = 1.0,
    hard: bool = False,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Gumbel-softmax sample ``softmax((scores + g) / temperature)``,
    ``g ~ Gumbel(0, 1)``.

    ``scores`` are logits ``(..., Nk)``. The argmax of the sample, the key it
    leans towards most, is ``argmax(scores + g)``: drawn with probabilities
    ``softmax(scores)`` whatever the temperature. The temperature sets only
    how close the sample is to one-hot: as it goes to 0 the sample becomes
    that one-hot choice (hard attention on a random key); for any temperature
    > 0 it is differentiable. With ``hard=True`` the forward pass returns
    the one-hot argmax while the gradient is that of the soft sample (the
    straight-through estimator). ``generator`` makes the noise
    reproducible.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    uniform = torch.rand(
        scores.shape, generator=generator, dtype=scores.dtype
    )
    uniform = uniform.to(scores.device).clamp_min(
        torch.finfo(scores.dtype).tiny
    )
    gumbel = -torch.log(-torch.log(uniform))
    soft = torch.softmax((scores + gumbel) / temperature, dim=-1)
    if not hard:
        return soft
    return hard_attention_weights(soft) - soft.detach() + soft
