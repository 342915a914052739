"""Recognise layers left with their default biases, for the ``diagnose`` hooks of specs.

The grader sets only the weights of a learner's module, so a layer built with
``nn.Linear``'s default ``bias=True`` keeps a random bias: the answer is the right
formula with offsets added. :func:`fits_with_offsets` says whether some offsets explain
an answer. (Not an exercise: the registry reads only the ``ex*`` modules.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def fits_with_offsets(residual: Callable[[], torch.Tensor], offsets: Sequence[torch.Tensor],
                      scale: float) -> bool:
    """Fit ``offsets`` (float64 tensors that require gradients, zero to start) so that
    ``residual()`` vanishes; whether it then vanishes relative to ``scale``, the size of
    the answer."""
    optimiser = torch.optim.LBFGS(list(offsets), max_iter=200, tolerance_grad=1e-14,
                                  tolerance_change=1e-16, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimiser.zero_grad()
        loss = residual().pow(2).mean()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimiser.step(closure)
        with torch.no_grad():
            return float(residual().abs().max()) < 1e-4 * (1 + scale)
