"""Chapter 10's measurements of attention's cost: what the chapter counts,
times and reads about :func:`attention_course.efficient.flash_attention`
(Dao et al. 2022) and plain attention.

- :func:`attention_flops` counts the arithmetic and :func:`attention_bytes`
  the traffic to and from memory: the two axes of a roofline.
- :func:`time_round_robin` times calls that take turns, so that their ratios
  are fair on a busy machine.
- :func:`peak_memory` measures the memory a call really needs;
  :class:`StepMemory` measures one training step of attention (explicit,
  blockwise or fused) in a process of its own.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from attention_course.efficient import _check_count, flash_attention
from attention_course.masking import scaled_dot_product_attention

_M_MMAP_THRESHOLD = -3  # glibc's mallopt() parameter number


def attention_flops(num_queries: int, num_keys: int, head_dim: int,
                    batch: int = 1, heads: int = 1, is_causal: bool = False,
                    window: int | None = None) -> int:
    """Floating-point operations of the two matrix products of attention's
    forward pass.

    ``Q K^T`` and ``P V`` each cost ``2 * head_dim`` operations (a multiply and
    an add) per query-key pair that is computed, so the count is
    ``4 * head_dim * pairs * B * H`` with ``pairs = Nq * Nk``, or only the
    allowed pairs with ``is_causal`` (top-left aligned) and ``window``: what a
    kernel that skips masked blocks must do at least. The softmax adds
    ``O(pairs)``; a recomputing backward does 2.5 times the forward's products
    (five instead of two).
    """
    for name, value in (("num_queries", num_queries), ("num_keys", num_keys),
                        ("head_dim", head_dim), ("batch", batch),
                        ("heads", heads)):
        _check_count(name, value, 0)
    if window is not None:
        _check_count("window", window, 1)
        if not is_causal:
            raise ValueError(f"window={window} needs is_causal=True")
    if is_causal:
        # keys j <= i
        seen = torch.arange(1, num_queries + 1).clamp(max=num_keys)
        if window is not None:
            seen = seen - (
                torch.arange(1, num_queries + 1) - window
            ).clamp(0, num_keys)
        pairs = int(seen.sum())
    else:
        pairs = num_queries * num_keys
    return 4 * head_dim * pairs * batch * heads


def attention_bytes(num_queries: int, num_keys: int, head_dim: int,
                    batch: int = 1, heads: int = 1, tiled: bool = False,
                    block_size: int = 128, element_size: int = 4) -> int:
    """Bytes that attention's forward pass moves between the processor and
    main memory, at least: a model for the roofline.

    Every kernel reads ``Q`` (``Nq x d``), ``K`` and ``V`` (``Nk x d``) and
    writes ``O`` (``Nq x d``). The explicit path also writes the scores
    ``S`` (``Nq x Nk``), reads them back for the softmax, writes the weights
    ``P`` and reads them for ``P V``: ``4 Nq Nk`` more elements. A ``tiled``
    kernel (a fused one, FlashAttention) keeps a block of ``block_size``
    queries and their scores on chip and streams ``K`` and ``V`` past it, so it
    reads ``K`` and ``V`` once per block of queries and never writes ``S`` or
    ``P``. ``element_size`` is 4 for float32. Counts for ``batch * heads``
    heads, without masks.
    """
    for name, value in (("num_queries", num_queries), ("num_keys", num_keys),
                        ("head_dim", head_dim), ("batch", batch),
                        ("heads", heads)):
        _check_count(name, value, 0)
    _check_count("block_size", block_size, 1)
    _check_count("element_size", element_size, 1)
    query_and_output = 2 * num_queries * head_dim
    if tiled:
        query_blocks = -(-num_queries // block_size)  # ceil
        elements = query_and_output + query_blocks * 2 * num_keys * head_dim
    else:
        elements = (query_and_output + 2 * num_keys * head_dim
                    + 4 * num_queries * num_keys)
    return elements * element_size * batch * heads


def time_round_robin(steps: Mapping[str, Callable[[], object]],
                     repeats: int = 5, warmup: int = 1,
                     device: torch.device | str | None = None
                     ) -> dict[str, list[float]]:
    """Seconds each call of each step took, the steps taking turns:
    ``{name: [seconds of round 1, round 2, ...]}``.

    Each of ``repeats`` rounds calls every step once, in an order rotated from
    round to round, so that a machine that speeds up or slows down (a shared
    one) affects every step alike: the ratio of two steps' times *in the same
    round* is a fair comparison, and its median over the rounds a robust one.
    ``warmup`` untimed rounds come first (first calls load kernels and
    allocate). On a CUDA ``device`` each call is synchronised.
    """
    _check_count("repeats", repeats, 1)
    _check_count("warmup", warmup, 0)
    cuda = device is not None and torch.device(device).type == "cuda"

    def call(step: Callable[[], object]) -> float:
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    names = list(steps)
    for _ in range(warmup):
        for name in names:
            call(steps[name])
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        shift = r % max(len(names), 1)
        for name in names[shift:] + names[:shift]:
            times[name].append(call(steps[name]))
    return times


def _resident_kib() -> tuple[int, int]:
    """``(VmRSS, VmHWM)`` from ``/proc/self/status`` in KiB: resident memory now
    and its peak."""
    status = dict(line.split(":", 1)
                  for line in Path("/proc/self/status").read_text().splitlines()
                  if ":" in line)
    return int(status["VmRSS"].split()[0]), int(status["VmHWM"].split()[0])


def peak_memory(fn: Callable[[], object],
                device: torch.device | str = "cpu") -> float:
    """The peak memory, in MiB, that calling ``fn()`` needs on top of what is
    held before.

    On a CUDA device: PyTorch's own count of the peak allocated bytes. On the
    CPU (Linux only): the growth of the process's peak resident set, ``VmHWM``,
    after resetting it to the current size by writing ``5`` to
    ``/proc/self/clear_refs``. glibc's malloc keeps freed blocks below a
    threshold it raises as it goes, which inflates such readings for code that
    allocates many medium blocks (blockwise attention); the first call therefore
    sets that threshold to 128 KiB (``mallopt(M_MMAP_THRESHOLD)``, the same as
    ``MALLOC_MMAP_THRESHOLD_=131072``), so large blocks go back to the system
    when freed, for the rest of the process. That makes the process's later
    work slower (every large block is faulted in page by page again): to time
    code in the same process, measure its memory with :class:`StepMemory`,
    which does it in a process of its own.
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - before) / 2**20
    clear_refs = Path("/proc/self/clear_refs")
    if device.type != "cpu" or not clear_refs.exists():
        raise RuntimeError(f"peak_memory measures CUDA devices, or the CPU on "
                           f"Linux; got device {device}")
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, 131072)
        # free memory kept from earlier work: not resident, not reused free
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: measure as it is
        pass
    clear_refs.write_text("5")
    before, _ = _resident_kib()
    fn()
    return (_resident_kib()[1] - before) / 1024


STEP_PATHS = ("explicit", "blockwise", "fused")


def _attention_step(path: str, n: int, heads: int, head_dim: int,
                    block_size: int, device: torch.device | str
                    ) -> Callable[[], None]:
    """One training step of attention on random ``(1, heads, n, head_dim)``
    inputs: forward, ``.sum().backward()``, gradients dropped."""
    if path not in STEP_PATHS:
        raise ValueError(f"path must be one of {', '.join(STEP_PATHS)}, got "
                         f"{path!r}")
    _check_count("n", n, 1)
    _check_count("block_size", block_size, 1)
    generator = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(1, heads, n, head_dim, device=device,
                           generator=generator, requires_grad=True)
               for _ in range(3))

    def attend() -> Tensor:
        if path == "explicit":
            return scaled_dot_product_attention(q, k, v)[0]
        if path == "blockwise":
            return flash_attention(q, k, v, block_size=block_size)
        return F.scaled_dot_product_attention(q, k, v)

    def step() -> None:
        attend().sum().backward()
        q.grad = k.grad = v.grad = None

    return step


def _serve_step_memory() -> None:
    """The child of :class:`StepMemory`: one request a line on stdin
    (``{"path", "n", "heads", "head_dim", "block_size"}``), one answer a line
    on stdout (``{"mib": ...}`` or ``{"error": ...}``)."""
    # the parent's Ctrl-C (or its kernel's interrupt) is the parent's: this
    # process ends when its stdin closes
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if threads > 0:
        torch.set_num_threads(threads)
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write to the answers
    for path in STEP_PATHS:  # first calls load kernels: not part of a reading
        _attention_step(path, 64, 2, 16, 32, "cpu")()
    print(json.dumps({"ready": True}), file=out, flush=True)
    for line in sys.stdin:
        try:
            request = json.loads(line)
            step = _attention_step(request["path"], request["n"],
                                   request["heads"], request["head_dim"],
                                   request["block_size"], "cpu")
            answer = {"mib": peak_memory(step)}
            del step
        except Exception as error:  # reported to the parent, which raises
            answer = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(answer), file=out, flush=True)


class StepMemory:
    """Peak memory, in MiB, of one training step of attention (forward and
    backward) on random inputs: ``memory(path, n, block_size=128)``.

    ``path`` is ``"explicit"``
    (:func:`attention_course.masking.scaled_dot_product_attention`),
    ``"blockwise"`` (:func:`flash_attention` with ``block_size``) or
    ``"fused"`` (:func:`torch.nn.functional.scaled_dot_product_attention`), on
    inputs ``(1, heads, n, head_dim)`` in float32.

    On a CUDA ``device`` the step runs here and :func:`peak_memory` reads
    PyTorch's count. On the CPU it runs in a Python process of its own, started
    at the first call, with as many threads as this one, that reads the growth
    of its peak resident set (:func:`peak_memory`) with glibc's malloc set to
    give every block of 128 KiB or more pages of its own
    (``MALLOC_MMAP_THRESHOLD_=131072``): set in this process, that would slow
    down everything it times afterwards, since every such block would be
    faulted in page by page again. Use it as a context manager, or
    :meth:`close` it.
    """

    def __init__(self, device: torch.device | str = "cpu", heads: int = 8,
                 head_dim: int = 64) -> None:
        _check_count("heads", heads, 1)
        _check_count("head_dim", head_dim, 1)
        self.device = torch.device(device)
        if self.device.type not in ("cpu", "cuda"):
            raise RuntimeError(f"StepMemory measures CUDA devices, or the CPU "
                               f"on Linux; got device {self.device}")
        self.heads, self.head_dim = heads, head_dim
        self._child: subprocess.Popen | None = None

    def __call__(self, path: str, n: int, block_size: int = 128) -> float:
        if self.device.type == "cuda":
            return peak_memory(_attention_step(path, n, self.heads,
                                               self.head_dim, block_size,
                                               self.device), self.device)
        if path not in STEP_PATHS:
            raise ValueError(f"path must be one of {', '.join(STEP_PATHS)}, "
                             f"got {path!r}")
        child = self._start()
        request = {"path": path, "n": n, "heads": self.heads,
                   "head_dim": self.head_dim, "block_size": block_size}
        child.stdin.write(json.dumps(request) + "\n")
        child.stdin.flush()
        answer = self._read(child)
        if "error" in answer:
            raise RuntimeError(f"StepMemory: {answer['error']}")
        return answer["mib"]

    def _start(self) -> subprocess.Popen:
        if self._child is not None and self._child.poll() is None:
            return self._child
        if not Path("/proc/self/clear_refs").exists():
            raise RuntimeError("StepMemory measures the CPU on Linux only")
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072",
               "OMP_NUM_THREADS": str(torch.get_num_threads())}
        self._child = subprocess.Popen(
            [sys.executable, "-c",
             "from attention_course.experiments.efficient import "
             "_serve_step_memory; _serve_step_memory()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self._read(self._child)  # ready
        return self._child

    @staticmethod
    def _read(child: subprocess.Popen) -> dict:
        line = child.stdout.readline()
        if not line:
            raise RuntimeError(f"StepMemory: the measuring process ended "
                               f"(exit status {child.wait()})")
        return json.loads(line)

    def close(self) -> None:
        """End the measuring process, if one runs."""
        if self._child is not None:
            self._child.stdin.close()
            self._child.wait()
            self._child = None

    def __enter__(self) -> StepMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
