"""Attention, from kernels to Transformers: the course's companion package.

One module per chapter (``kernel_regression``, ``scoring``, ``masking``,
``seq2seq``, ``multihead``, ``transformer``, ``channel_spatial``, ...), the
chapters' experiments in ``experiments`` (``experiments.seq2seq``, ...) and a
few shared helpers (``data``, ``metrics``, ``plotting``, ``training``,
``device``, ``grading``).
Import the module you need, for example
``from attention_course import kernel_regression``.
"""

from attention_course.device import get_device

__version__ = "0.1.0"

__all__ = ["__version__", "get_device"]
