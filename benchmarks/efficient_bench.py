"""Benchmark: our blockwise flash attention against PyTorch's fused kernel, over length.

Three ways to compute the same exact attention on ``(B, H, N, d)`` inputs, fp32:

* ``flash``    -- :func:`attention_course.efficient.flash_attention` (pure PyTorch, online
  softmax over blocks of keys, a backward that recomputes the weights)
* ``sdpa``     -- ``torch.nn.functional.scaled_dot_product_attention`` (a fused kernel)
* ``explicit`` -- :func:`attention_course.masking.scaled_dot_product_attention`
  (materialises the ``(N, N)`` weights; memory only)

``flash`` and ``sdpa`` are timed forward only (under ``torch.no_grad()``) and
forward+backward, round-robin within a run; each time is reported as a ratio to ``sdpa``
in the same round (the median over rounds), so a busy machine slows both alike. Peak
memory is measured for all three in a child process, with
:func:`attention_course.experiments.efficient.peak_memory` (the growth of the resident set
during one step; Linux only).

Run: ``python benchmarks/efficient_bench.py`` (on a shared machine wrap it in
``flock /tmp/attn-cpu.lock``). Writes ``benchmarks/results/efficient_bench.json`` and
``efficient_bench.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from attention_bench import _length_axis, time_once

from attention_course.efficient import flash_attention
from attention_course.experiments.efficient import peak_memory
from attention_course.masking import scaled_dot_product_attention

TIMED = ("flash", "sdpa")
MEASURED = ("explicit", "flash", "sdpa")
MODES = ("forward", "forward_backward")
BASELINE = "sdpa"


def make_step(config: str, mode: str, args: argparse.Namespace,
              length: int) -> Callable[[], None]:
    """A no-argument function running one forward (and backward) pass of ``config``."""
    generator = torch.Generator().manual_seed(0)
    shape = (args.batch, args.heads, length, args.head_dim)
    query, key, value = (torch.randn(shape, generator=generator,
                                     requires_grad=mode != "forward") for _ in range(3))
    if config == "flash":
        attend = lambda: flash_attention(query, key, value, block_size=args.block_size)
    elif config == "sdpa":
        attend = lambda: F.scaled_dot_product_attention(query, key, value)
    else:
        attend = lambda: scaled_dot_product_attention(query, key, value)[0]
    if mode == "forward":

        def step() -> None:
            with torch.no_grad():
                attend()
    else:

        def step() -> None:
            attend().sum().backward()
            query.grad = key.grad = value.grad = None
    return step


def run_timing(args: argparse.Namespace) -> dict:
    results: dict = {}
    for mode in MODES:
        results[mode] = {}
        for length in args.lengths:
            steps = {c: make_step(c, mode, args, length) for c in TIMED}
            for step in steps.values():
                for _ in range(args.warmup):
                    step()
            times: dict[str, list[float]] = {c: [] for c in TIMED}
            for r in range(args.repeats):
                for c in TIMED[r % 2:] + TIMED[: r % 2]:
                    times[c].append(time_once(steps[c]))
            row = {}
            for c in TIMED:
                ratios = [t / b for t, b in zip(times[c], times[BASELINE], strict=True)]
                row[c] = {"median_s": statistics.median(times[c]), "times_s": times[c],
                          "ratio_to_sdpa": statistics.median(ratios)}
            results[mode][str(length)] = row
            print(f"{mode:17s} N={length:5d}  " + "  ".join(
                f"{c}={row[c]['median_s'] * 1e3:8.1f} ms" for c in TIMED)
                + f"  flash/sdpa x{row['flash']['ratio_to_sdpa']:.2f}", flush=True)
    return results


def memory_worker(args: argparse.Namespace) -> None:
    """Child process: print the peak memory growth (MiB) of one step per configuration,
    mode and length, as JSON lines. Started with glibc's mmap threshold at 128 KiB, so
    every large block goes back to the system when freed and no step inherits another's."""
    for mode in MODES:
        for config in MEASURED:
            make_step(config, mode, args, min(args.lengths))()  # first calls load kernels
            for length in args.lengths:
                step = make_step(config, mode, args, length)
                print(json.dumps({"mode": mode, "config": config, "length": length,
                                  "peak_mib": peak_memory(step)}), flush=True)
                del step


def run_memory(args: argparse.Namespace) -> dict:
    if not Path("/proc/self/clear_refs").exists():
        print("peak memory needs Linux's /proc/self/clear_refs; skipped")
        return {}
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    cmd = [sys.executable, __file__, "--memory-worker", "--lengths", *map(str, args.lengths),
           "--batch", str(args.batch), "--heads", str(args.heads), "--head-dim",
           str(args.head_dim), "--block-size", str(args.block_size)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    results: dict = {mode: {} for mode in MODES}
    for line in out.splitlines():
        rec = json.loads(line)
        results[rec["mode"]].setdefault(str(rec["length"]), {})[rec["config"]] = rec["peak_mib"]
    for mode in MODES:
        for length, row in results[mode].items():
            print(f"peak memory {mode:17s} N={int(length):5d}  " + "  ".join(
                f"{c}={row[c]:8.1f} MiB" for c in MEASURED), flush=True)
    return results


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    timing = report["time"]["forward_backward"]
    for config in TIMED:
        pts = [(int(n), row[config]["median_s"]) for n, row in timing.items()]
        axes[0].plot(*zip(*pts, strict=True), marker="o", label=config)
    axes[0].set(yscale="log", ylabel="seconds", title="time, forward + backward")
    _length_axis(axes[0], report)
    if "memory" in report:
        memory = report["memory"]["forward_backward"]
        for config in MEASURED:
            pts = [(int(n), row[config]) for n, row in memory.items()]
            axes[1].plot(*zip(*pts, strict=True), marker="o", label=config)
        axes[1].set(yscale="log", ylabel="MiB", title="peak memory growth, forward + backward")
        _length_axis(axes[1], report)
    else:
        axes[1].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def summarise(report: dict) -> None:
    timing = report["time"]["forward_backward"]
    print("flash / sdpa, forward+backward: " + ", ".join(
        f"N={n} x{row['flash']['ratio_to_sdpa']:.2f}" for n, row in timing.items()))
    if "memory" in report:
        memory = report["memory"]["forward_backward"]
        lengths = sorted(int(n) for n in memory)
        if len(lengths) >= 2:
            lo, hi = lengths[-2], lengths[-1]
            for config in MEASURED:
                growth = memory[str(hi)][config] / max(memory[str(lo)][config], 1e-9)
                print(f"{config} peak memory N={lo} -> {hi}: x{growth:.2f} "
                      f"(linear would be x{hi / lo:.0f}, quadratic x{(hi / lo) ** 2:.0f})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--block-size", type=int, default=128, help="flash_attention's")
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds per length")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--no-memory", action="store_true", help="skip the memory measurement")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--memory-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_worker:
        memory_worker(args)
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}, "
          f"{args.heads} heads of {args.head_dim}, block {args.block_size}, "
          f"{args.repeats} rounds", flush=True)
    report = {
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "memory_worker")},
        "environment": {"torch": torch.__version__, "threads": torch.get_num_threads(),
                        "machine": platform.machine(), "processor": platform.processor(),
                        "python": platform.python_version()},
        "time": run_timing(args),
    }
    if not args.no_memory and (memory := run_memory(args)):
        report["memory"] = memory
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "efficient_bench.json").write_text(json.dumps(report, indent=2))
    plot(report, args.out / "efficient_bench.png")
    summarise(report)
    print(f"wrote {args.out / 'efficient_bench.json'} and {args.out / 'efficient_bench.png'}")


if __name__ == "__main__":
    main()
