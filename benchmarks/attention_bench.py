"""Benchmark: our MultiHeadAttention against PyTorch's, over sequence length.

Four ways to compute the same multi-head self-attention, batch-first, fp32:

* ``ours_fused``    -- ``MultiHeadAttention(..., need_weights=False)`` (fused SDPA kernel)
* ``ours_explicit`` -- ``MultiHeadAttention(..., need_weights=True)`` (materialises weights)
* ``torch_mha``     -- ``torch.nn.MultiheadAttention(batch_first=True)`` with ``need_weights=False``
* ``bare_sdpa``     -- one packed ``nn.Linear`` in-projection, ``F.scaled_dot_product_attention``,
  the output projection: the least work any module can do.

Each is timed forward only (under ``torch.no_grad()``, modules in eval mode) and
forward+backward, for lengths 128 to 4096. Configurations are timed round-robin within a
run, and every time is reported as a ratio to ``torch_mha`` measured in the same round
(the median over rounds), so a busy machine slows all of them alike. Peak memory is the
growth of the resident set size of a fresh child process during one step over what it
held before (glibc is told to return large blocks to the system at once, so the readings
are honest); it needs Linux.

Run: ``python benchmarks/attention_bench.py`` (``make bench``); on a shared machine wrap
it in ``flock /tmp/attn-cpu.lock``. Writes ``benchmarks/results/attention_bench.json``
and ``attention_bench.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from attention_course.multihead import MultiHeadAttention

CONFIGS = ("ours_fused", "ours_explicit", "torch_mha", "bare_sdpa")
MODES = ("forward", "forward_backward")
BASELINE = "torch_mha"


class BareSDPA(nn.Module):
    """Packed in-projection, the fused kernel, out-projection: nothing else."""

    def __init__(self, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.in_proj = nn.Linear(embed_dim, 3 * embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, e = x.shape
        q, k, v = self.in_proj(x).view(b, n, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, e))


def make_step(config: str, mode: str, embed_dim: int, num_heads: int,
              x: torch.Tensor) -> Callable[[], None]:
    """A no-argument function running one forward (and backward) pass of ``config``."""
    torch.manual_seed(0)
    if config.startswith("ours"):
        module = MultiHeadAttention(embed_dim, num_heads)
        need = config == "ours_explicit"
        call = lambda: module(x, x, x, need_weights=need)[0]
    elif config == "torch_mha":
        module = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)
        call = lambda: module(x, x, x, need_weights=False)[0]
    else:
        module = BareSDPA(embed_dim, num_heads)
        call = lambda: module(x)
    if mode == "forward":
        module.eval()

        def step() -> None:
            with torch.no_grad():
                call()
    else:
        module.train()

        def step() -> None:
            call().sum().backward()
            module.zero_grad(set_to_none=True)
            x.grad = None
    return step


def time_once(step: Callable[[], None]) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def environment() -> dict:
    """The software and machine a measurement ran on."""
    return {"torch": torch.__version__, "threads": torch.get_num_threads(),
            "machine": platform.machine(), "processor": platform.processor(),
            "python": platform.python_version()}


def skip(config: str, length: int, max_explicit: int) -> bool:
    return config == "ours_explicit" and length > max_explicit


def run_timing(args: argparse.Namespace) -> dict:
    results: dict = {}
    for mode in MODES:
        results[mode] = {}
        for length in args.lengths:
            x = torch.randn(args.batch, length, args.embed_dim, requires_grad=mode != "forward")
            configs = [c for c in CONFIGS if not skip(c, length, args.max_explicit_len)]
            steps = {c: make_step(c, mode, args.embed_dim, args.heads, x) for c in configs}
            for step in steps.values():
                for _ in range(args.warmup):
                    step()
            times: dict[str, list[float]] = {c: [] for c in configs}
            for r in range(args.repeats):
                order = configs[r % len(configs):] + configs[: r % len(configs)]
                for c in order:
                    times[c].append(time_once(steps[c]))
            row = {}
            for c in configs:
                ratios = [t / b for t, b in zip(times[c], times[BASELINE], strict=True)]
                row[c] = {"median_s": statistics.median(times[c]), "times_s": times[c],
                          "ratio_to_torch_mha": statistics.median(ratios)}
            results[mode][str(length)] = row
            print(f"{mode:17s} N={length:5d}  " + "  ".join(
                f"{c}={row[c]['median_s'] * 1e3:8.1f} ms (x{row[c]['ratio_to_torch_mha']:.2f})"
                for c in configs), flush=True)
    return results


def _status_kib(field: str) -> int:
    """A ``/proc/self/status`` field in KiB (``VmRSS``: resident now, ``VmHWM``: its peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def memory_worker(config: str, mode: str, lengths: list[int], batch: int, embed_dim: int,
                  heads: int) -> None:
    """Child process: print the peak resident-memory growth (MiB) of one step per length.

    The peak (``VmHWM``) is reset before each step through ``/proc/self/clear_refs``
    (``getrusage``'s ``ru_maxrss`` would not do: it is inherited from the parent process).
    """
    torch.randn(8, 8) @ torch.randn(8, 8)  # load the kernels before the first baseline
    for length in lengths:
        x = torch.randn(batch, length, embed_dim, requires_grad=mode != "forward")
        step = make_step(config, mode, embed_dim, heads, x)
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak to the current RSS
        before = _status_kib("VmRSS")
        step()
        peak = _status_kib("VmHWM")
        print(json.dumps({"length": length, "peak_mib": (peak - before) / 1024}), flush=True)
        del step, x


def run_memory(args: argparse.Namespace) -> dict:
    if not Path("/proc/self/clear_refs").exists():
        print("peak memory needs Linux's /proc/self/clear_refs; skipped")
        return {}
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    results: dict = {mode: {} for mode in MODES}
    for mode in MODES:
        for config in CONFIGS:
            lengths = [n for n in args.lengths if not skip(config, n, args.max_explicit_len)]
            cmd = [sys.executable, __file__, "--memory-worker", config, mode,
                   "--lengths", *map(str, lengths), "--batch", str(args.batch),
                   "--embed-dim", str(args.embed_dim), "--heads", str(args.heads)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                rec = json.loads(line)
                results[mode].setdefault(str(rec["length"]), {})[config] = rec["peak_mib"]
        for length, row in results[mode].items():
            print(f"peak memory {mode:17s} N={int(length):5d}  " + "  ".join(
                f"{c}={row[c]:8.1f} MiB" for c in CONFIGS if c in row), flush=True)
    return results


def _length_axis(ax, report: dict) -> None:
    """A log2 x axis labelled with the measured lengths, a legend and a grid."""
    from matplotlib.ticker import NullFormatter

    lengths = report["settings"]["lengths"]
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("sequence length N")
    ax.legend()
    ax.grid(alpha=0.3, which="both")


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, mode in zip(axes[:2], MODES, strict=True):
        for config in CONFIGS:
            pts = [(int(n), row[config]["median_s"]) for n, row in report["time"][mode].items()
                   if config in row]
            ax.plot(*zip(*pts, strict=True), marker="o", label=config)
        ax.set(yscale="log", ylabel="seconds", title=f"time, {mode.replace('_', ' + ')}")
        _length_axis(ax, report)
    if "memory" in report:
        ax = axes[2]
        for config in CONFIGS:
            pts = [(int(n), row[config]) for n, row in report["memory"]["forward_backward"].items()
                   if config in row]
            ax.plot(*zip(*pts, strict=True), marker="o", label=config)
        ax.set(yscale="log", ylabel="MiB", title="peak memory growth, forward + backward")
        _length_axis(ax, report)
    else:
        axes[2].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def summarise(report: dict) -> None:
    fb = report["time"]["forward_backward"]
    ratios = [row["ours_fused"]["ratio_to_torch_mha"] for n, row in fb.items()
              if 512 <= int(n) <= 4096]
    if ratios:
        print(f"ours_fused / torch_mha, forward+backward, N in 512..4096: median ratio "
              f"{statistics.median(ratios):.3f} (per length: "
              + ", ".join(f"{r:.2f}" for r in ratios) + ")")
    if "memory" in report:
        mem = report["memory"]["forward_backward"]
        lengths = sorted(int(n) for n in mem if "ours_fused" in mem[n])
        if len(lengths) >= 2:
            lo, hi = lengths[-2], lengths[-1]
            growth = mem[str(hi)]["ours_fused"] / max(mem[str(lo)]["ours_fused"], 1e-9)
            print(f"ours_fused peak memory N={lo} -> {hi}: x{growth:.2f} "
                  f"(linear would be x{hi / lo:.0f}, quadratic x{(hi / lo) ** 2:.0f})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+",
                        default=[128, 256, 512, 1024, 2048, 4096])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--embed-dim", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds per length")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--max-explicit-len", type=int, default=2048,
                        help="skip the explicit path above this length (its memory is quadratic)")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory measurement")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--memory-worker", nargs=2, metavar=("CONFIG", "MODE"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_worker:
        memory_worker(*args.memory_worker, args.lengths, args.batch, args.embed_dim, args.heads)
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}, "
          f"embed_dim {args.embed_dim}, {args.heads} heads, {args.repeats} rounds", flush=True)
    report = {
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "memory_worker")},
        "environment": environment(),
        "time": run_timing(args),
    }
    if not args.no_memory and (memory := run_memory(args)):
        report["memory"] = memory
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "attention_bench.json").write_text(json.dumps(report, indent=2))
    plot(report, args.out / "attention_bench.png")
    summarise(report)
    print(f"wrote {args.out / 'attention_bench.json'} and {args.out / 'attention_bench.png'}")


if __name__ == "__main__":
    main()
