"""Chapter 1: attention pooling as kernel regression
(Nadaraya 1964, Watson 1964).

A query ``x`` is answered with a weighted average of the values ``y_i``; the
weight of ``y_i`` grows as its key ``x_i`` gets closer to ``x``. Shapes:
``queries`` is ``(Nq,)`` or ``(Nq, d)``, ``keys`` is ``(Nk,)`` or
``(Nk, d)``, ``values`` is ``(Nk,)`` or ``(Nk, dv)``; ``weights`` is always
``(Nq, Nk)`` and each of its rows sums to 1.

With the Gaussian kernel the weights are a softmax of scores, and the score
``-|q - k|^2 / (2 h^2)`` is a dot product plus a bias per key (plus a term
of the query alone, which the softmax ignores): :func:`gaussian_score_parts`,
the bridge to chapter 2's dot-product attention.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import nn

from attention_course.training import train

KERNELS = ("gaussian", "boxcar", "epanechnikov")
KERNEL_NAMES = {
    "gaussian": "Gaussian",
    "boxcar": "boxcar",
    "epanechnikov": "Epanechnikov",
}


def _as_points(x: torch.Tensor, name: str) -> torch.Tensor:
    """``(N,)`` or ``(N, d)`` -> ``(N, d)``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor, got {type(x).__name__}"
        )
    if not x.is_floating_point():
        x = x.to(torch.get_default_dtype())
    if x.dim() == 1:
        return x[:, None]
    if x.dim() == 2:
        return x
    raise ValueError(
        f"{name} must have shape (N,) or (N, d), got {tuple(x.shape)}"
    )


def _as_query_key_points(
    queries: torch.Tensor, keys: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries ``(Nq, d)`` and keys ``(Nk, d)`` with the same feature
    size ``d``."""
    q, k = _as_points(queries, "queries"), _as_points(keys, "keys")
    if q.shape[1] != k.shape[1]:
        raise ValueError(
            f"queries and keys must have the same feature size; got queries "
            f"{tuple(queries.shape)} and keys {tuple(keys.shape)}"
        )
    return q, k


def _check_inputs(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    q, k = _as_query_key_points(queries, keys)
    if not isinstance(values, torch.Tensor):
        raise TypeError(
            f"values must be a torch.Tensor, got {type(values).__name__}"
        )
    if values.dim() not in (1, 2) or values.shape[0] != k.shape[0]:
        raise ValueError(
            f"values must have shape (Nk,) or (Nk, dv) with "
            f"Nk = {k.shape[0]} keys; got values {tuple(values.shape)} "
            f"for keys {tuple(keys.shape)}"
        )
    return q, k


def squared_distances(
    queries: torch.Tensor, keys: torch.Tensor
) -> torch.Tensor:
    """``|q_i - k_j|^2`` for every query and key, ``(Nq, Nk)``.

    Computed from the differences, so it is exact: ``torch.cdist``'s fast
    path (``|q|^2 + |k|^2 - 2 q.k``) loses the small distances a narrow
    kernel depends on.
    """
    q, k = _as_query_key_points(queries, keys)
    return (q[:, None, :] - k[None, :, :]).pow(2).sum(dim=-1)


def scaled_distances(
    queries: torch.Tensor,
    keys: torch.Tensor,
    bandwidth: float | torch.Tensor = 1.0,
) -> torch.Tensor:
    """``u[i, j] = |q_i - k_j| / h``, the distance of every query to every
    key, ``(Nq, Nk)``."""
    return squared_distances(queries, keys).sqrt() / bandwidth


def _check_bandwidth(bandwidth: float | torch.Tensor) -> None:
    if not bool(torch.all(torch.as_tensor(bandwidth) > 0)):
        raise ValueError(f"bandwidth must be positive, got {bandwidth}")


def kernel_scores(u: torch.Tensor, kernel: str = "gaussian") -> torch.Tensor:
    """Unnormalised kernel values ``K(u)`` for scaled distances ``u``.

    ``gaussian``: ``exp(-u^2 / 2)``; ``boxcar``: ``1`` for ``|u| <= 1``;
    ``epanechnikov``: ``max(0, 1 - u^2)`` (the constant factors cancel when
    normalised).
    """
    if kernel == "gaussian":
        return torch.exp(-0.5 * u**2)
    if kernel == "boxcar":
        return (u.abs() <= 1).to(u.dtype)
    if kernel == "epanechnikov":
        return torch.clamp(1 - u**2, min=0)
    raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")


def gaussian_scores(
    queries: torch.Tensor,
    keys: torch.Tensor,
    bandwidth: float | torch.Tensor = 1.0,
) -> torch.Tensor:
    """The Gaussian kernel's scores ``-|q_i - k_j|^2 / (2 h^2)``,
    ``(Nq, Nk)``.

    Their softmax over the keys (each row) is the kernel's attention
    weights.
    """
    return -0.5 * squared_distances(queries, keys) / bandwidth**2


def attention_weights(
    queries: torch.Tensor,
    keys: torch.Tensor,
    bandwidth: float | torch.Tensor = 1.0,
    kernel: str = "gaussian",
) -> torch.Tensor:
    """Normalised kernel weights ``alpha(q_i, k_j)``, ``(Nq, Nk)``, rows
    summing to 1.

    The Gaussian kernel is normalised with a softmax of its scores, which is
    exact and never divides by zero. For the compact kernels a query with no
    key inside its window gives all its weight to the nearest key.
    """
    _check_bandwidth(bandwidth)
    if kernel == "gaussian":
        scores = gaussian_scores(queries, keys, bandwidth)
        return torch.softmax(scores, dim=-1)
    u = scaled_distances(queries, keys, bandwidth)
    scores = kernel_scores(u, kernel)
    totals = scores.sum(dim=-1, keepdim=True)
    nearest = torch.zeros_like(scores).scatter_(
        -1, u.argmin(dim=-1, keepdim=True), 1.0
    )
    return torch.where(
        totals > 0,
        scores / totals.clamp_min(torch.finfo(u.dtype).tiny),
        nearest,
    )


def average_pooling(
    queries: torch.Tensor, values: torch.Tensor
) -> torch.Tensor:
    """The baseline: every query gets the mean of all values.
    ``(Nq,)`` or ``(Nq, dv)``."""
    q = _as_points(queries, "queries")
    mean = values.mean(dim=0)
    return mean.expand(q.shape[0], *mean.shape).clone()


def nadaraya_watson(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    bandwidth: float | torch.Tensor = 1.0,
    kernel: str = "gaussian",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Nadaraya-Watson kernel regression: ``f(q) = sum_j alpha(q, k_j) v_j``.

    Returns ``(predictions, weights)``: predictions ``(Nq,)`` for values
    ``(Nk,)`` (or ``(Nq, dv)`` for values ``(Nk, dv)``) and weights
    ``(Nq, Nk)``, rows summing to 1. A wide bandwidth approaches average
    pooling, a narrow one the nearest neighbour.
    """
    _check_inputs(queries, keys, values)
    weights = attention_weights(queries, keys, bandwidth, kernel)
    return weights @ values.to(weights.dtype), weights


class GaussianScoreParts(NamedTuple):
    """The three terms of the Gaussian score (see
    :func:`gaussian_score_parts`)."""

    dot: torch.Tensor
    """``q_i . k_j / h^2``, ``(Nq, Nk)``: a scaled dot-product score."""
    key_bias: torch.Tensor
    """``-|k_j|^2 / (2 h^2)``, ``(Nk,)``: one bias per key."""
    query_term: torch.Tensor
    """``-|q_i|^2 / (2 h^2)``, ``(Nq,)``: the same for every key of a row."""


def gaussian_score_parts(
    queries: torch.Tensor,
    keys: torch.Tensor,
    bandwidth: float | torch.Tensor = 1.0,
) -> GaussianScoreParts:
    """Expand the Gaussian score into a dot product and two norms.

    ``-|q - k|^2 / (2 h^2) = q.k / h^2 - |k|^2 / (2 h^2) - |q|^2 / (2 h^2)``,
    so ``dot[i, j] + key_bias[j] + query_term[i]`` is
    :func:`gaussian_scores`. A softmax over the keys ignores ``query_term``
    (it shifts a whole row), so ``softmax(dot + key_bias)`` is the Gaussian
    weights: dot-product attention with scale ``1 / h^2`` plus a bias per
    key. Queries ``(Nq,)`` or ``(Nq, d)``, keys ``(Nk,)`` or ``(Nk, d)``.

    The expanded form subtracts large numbers to get small distances, so it
    is less exact in floating point than :func:`squared_distances`.
    """
    _check_bandwidth(bandwidth)
    q, k = _as_query_key_points(queries, keys)
    scale = 1 / bandwidth**2
    return GaussianScoreParts(
        dot=scale * (q @ k.T),
        key_bias=-0.5 * scale * k.pow(2).sum(dim=-1),
        query_term=-0.5 * scale * q.pow(2).sum(dim=-1),
    )


def leave_one_out_mse(
    x: torch.Tensor,
    y: torch.Tensor,
    bandwidth: float,
    kernel: str = "gaussian",
) -> float:
    """Mean squared error of predicting each ``y_i`` from all the other
    points.

    ``x`` is ``(N,)`` or ``(N, d)``, ``y`` is ``(N,)`` or ``(N, dv)``. Each
    point's own distance is set to infinity, so it gets no weight. With a
    compact kernel a point with no other point inside its window has no
    prediction, and the result is ``nan``.
    """
    _check_inputs(x, x, y)
    _check_bandwidth(bandwidth)
    u = scaled_distances(x, x, bandwidth)
    itself = torch.eye(u.shape[0], dtype=torch.bool, device=u.device)
    u = u.masked_fill(itself, math.inf)
    if kernel == "gaussian":
        weights = torch.softmax(-0.5 * u**2, dim=-1)
    else:
        scores = kernel_scores(u, kernel)
        weights = scores / scores.sum(dim=-1, keepdim=True)
    y = y.to(weights.dtype)
    return torch.mean((weights @ y - y) ** 2).item()


def choose_bandwidth(
    x: torch.Tensor,
    y: torch.Tensor,
    candidates: Sequence[float],
    kernel: str = "gaussian",
) -> float:
    """The candidate bandwidth with the lowest leave-one-out error
    on ``(x, y)``."""
    if len(candidates) == 0:
        raise ValueError("candidates must hold at least one bandwidth")
    errors = [leave_one_out_mse(x, y, float(h), kernel) for h in candidates]
    finite = [
        (e, float(h))
        for e, h in zip(errors, candidates, strict=True)
        if math.isfinite(e)
    ]
    if not finite:
        raise ValueError(
            "every candidate bandwidth left some point with no neighbour"
        )
    return min(finite)[1]


class NWKernelRegression(nn.Module):
    """Nadaraya-Watson attention pooling with a Gaussian kernel whose
    bandwidth is learned.

    The one learned number is the bandwidth; the predictions still need every
    training pair (it stays a non-parametric estimator). The bandwidth is
    ``exp(log_bandwidth)``, so it stays positive while gradient descent moves
    it. ``forward`` returns the predictions and keeps the last
    weights in ``self.attention_weights`` ``(Nq, Nk)`` for plotting.
    """

    def __init__(self, init_bandwidth: float = 1.0) -> None:
        super().__init__()
        if init_bandwidth <= 0:
            raise ValueError(
                f"init_bandwidth must be positive, got {init_bandwidth}"
            )
        self.log_bandwidth = nn.Parameter(
            torch.tensor(math.log(init_bandwidth))
        )
        self.attention_weights: torch.Tensor | None = None

    @property
    def bandwidth(self) -> torch.Tensor:
        return self.log_bandwidth.exp()

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        exclude_self: bool = False,
    ) -> torch.Tensor:
        """Predictions ``(Nq,)`` or ``(Nq, dv)``.

        ``exclude_self`` (needs ``Nq == Nk``, queries equal to keys) gives
        the diagonal no weight: the leave-one-out fit used in training,
        without which the best bandwidth would shrink to zero and every point
        would predict itself.
        """
        q, k = _check_inputs(queries, keys, values)
        scores = gaussian_scores(q, k, self.bandwidth)
        if exclude_self:
            if q.shape[0] != k.shape[0]:
                raise ValueError(
                    f"exclude_self needs as many queries as keys; got "
                    f"queries {tuple(queries.shape)} and keys "
                    f"{tuple(keys.shape)}"
                )
            eye = torch.eye(q.shape[0], dtype=torch.bool, device=q.device)
            scores = scores.masked_fill(eye, -math.inf)
        weights = torch.softmax(scores, dim=-1)
        self.attention_weights = weights
        return weights @ values.to(weights.dtype)


class BandwidthFit(NamedTuple):
    """What :func:`learn_bandwidth` returns."""

    model: NWKernelRegression
    losses: list[float]
    """The leave-one-out training loss at each step."""
    bandwidths: list[float]
    """The bandwidth at each step, before its update."""
    validation: list[float]
    """The held-out MSE at each step (empty without ``validation``)."""


def learn_bandwidth(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    init_bandwidth: float = 1.0,
    steps: int = 200,
    lr: float = 0.05,
    validation: tuple[torch.Tensor, torch.Tensor] | None = None,
    progress: bool = True,
) -> BandwidthFit:
    """Learn a Gaussian bandwidth by gradient descent on the leave-one-out
    error of the training pairs ``x`` ``(N,)`` or ``(N, d)``, ``y`` ``(N,)``.

    Each step is one full batch: every training input is a query against the
    other pairs (Adam, learning rate ``lr``, on the device of ``x``).
    ``validation=(x_val, y_val)`` records, before each step, the error of
    predicting ``y_val`` at ``x_val`` from all the training pairs; it is only
    watched, never trained on.
    """
    model = NWKernelRegression(init_bandwidth)
    bandwidths: list[float] = []
    watched: list[float] = []

    def loss_fn(m: NWKernelRegression, batch: tuple) -> torch.Tensor:
        xs, ys = batch
        bandwidths.append(m.bandwidth.item())
        if validation is not None:
            x_val, y_val = (t.to(xs.device) for t in validation)
            with torch.no_grad():
                error = torch.mean((m(x_val, xs, ys) - y_val) ** 2)
            watched.append(error.item())
        predictions = m(xs, xs, ys, exclude_self=True)
        return torch.mean((predictions - ys) ** 2)

    losses = train(model, loss_fn, [(x, y)], epochs=steps, lr=lr,
                   device=x.device, progress=progress,
                   desc="learning the bandwidth")
    return BandwidthFit(model, losses, bandwidths, watched)


def pooling_predictions(
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    x_test: torch.Tensor,
    candidates: Sequence[float],
    *,
    fixed_bandwidth: float = 1.0,
    steps: int = 200,
    lr: float = 0.05,
) -> dict[str, tuple[torch.Tensor, float | None]]:
    """The chapter's poolings fitted on ``(x_train, y_train)``, each
    answering the queries ``x_test``.

    Returns ``{name: (predictions, bandwidth)}`` with predictions shaped
    like ``x_test``'s rows: average pooling (no bandwidth), the Gaussian
    kernel with ``fixed_bandwidth``, each kernel of :data:`KERNELS` with the
    candidate of lowest leave-one-out error, and the Gaussian kernel with a
    bandwidth learned from 1 by :func:`learn_bandwidth`.
    """
    results: dict[str, tuple[torch.Tensor, float | None]] = {
        "average pooling": (average_pooling(x_test, y_train), None),
    }
    fixed = nadaraya_watson(x_test, x_train, y_train, fixed_bandwidth)[0]
    results[f"Gaussian, h = {fixed_bandwidth:g}"] = (fixed, fixed_bandwidth)
    for kernel in KERNELS:
        h = choose_bandwidth(x_train, y_train, candidates, kernel)
        pred = nadaraya_watson(x_test, x_train, y_train, h, kernel)[0]
        results[f"{KERNEL_NAMES[kernel]}, h by leave-one-out"] = (pred, h)
    fit = learn_bandwidth(x_train, y_train, steps=steps, lr=lr,
                          progress=False)
    with torch.no_grad():
        learned = fit.model(x_test, x_train, y_train)
    results["Gaussian, h learned"] = (learned, fit.model.bandwidth.item())
    return results
