"""Benchmark: greedy decoding with and without the KV cache, and the cache's size.

A Transformer sized like chapter 6's (d_model 64, 4 heads, 2 + 2 layers, d_ff 128)
translates a batch of random source sentences, forced to generate exactly N tokens (its
``eos_id`` is -1, a token it can never produce), once with the KV cache and once without,
for N = 128 and 512. The two are timed alternately, round by round, and the ratio
uncached / cached is taken within each round (the median over rounds is printed), so a
busy machine slows both alike. The two must produce identical ids. The batch is 16
sentences (chapter 6 translates hundreds at once): with a single sentence, a model this
small spends most of a cached step on per-operation overhead, and the cache gains less.

Then the bytes one generated token adds to the self-attention cache, for multi-head,
grouped-query and multi-query attention with the same number of query heads: from
:func:`attention_course.decoding.kv_cache_bytes_per_token`, checked against a real cache.

Run: ``python benchmarks/decoding_bench.py``; on a shared machine wrap it in
``flock /tmp/attn-cpu.lock``. Writes ``benchmarks/results/decoding_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention_bench import environment, time_once  # noqa: E402

from attention_course.decoding import kv_cache_bytes_per_token  # noqa: E402
from attention_course.transformer import Transformer  # noqa: E402

NEVER = -1  # an eos_id no model produces: every row runs the full length
BOS = 1


def make_model(args: argparse.Namespace, num_kv_heads: int | None = None) -> Transformer:
    torch.manual_seed(0)
    return Transformer(args.vocab, args.vocab, args.d_model, args.heads, args.layers, args.d_ff,
                       max_len=max(*args.lengths, args.src_len - 1) + 1,
                       num_kv_heads=num_kv_heads).eval()


def source_batch(args: argparse.Namespace) -> torch.Tensor:
    """Random sentences of different lengths, right-padded with ``pad_id`` 0."""
    g = torch.Generator().manual_seed(0)
    src = torch.randint(3, args.vocab, (args.batch, args.src_len), generator=g)
    lengths = torch.randint(args.src_len // 2, args.src_len + 1, (args.batch,), generator=g)
    return src.masked_fill(torch.arange(args.src_len) >= lengths[:, None], 0)


def decoder(model: Transformer, src: torch.Tensor, length: int, use_cache: bool,
            ids: dict[bool, torch.Tensor]) -> Callable[[], None]:
    """A no-argument step: greedy-decode ``length`` tokens, keep them in ``ids[use_cache]``."""
    def step() -> None:
        ids[use_cache] = model.greedy_decode(src, BOS, NEVER, max_len=length,
                                             use_cache=use_cache)
    return step


def run_timing(args: argparse.Namespace) -> dict:
    model, src = make_model(args), source_batch(args)
    results = {}
    for length in args.lengths:
        ids: dict[bool, torch.Tensor] = {}
        steps = {name: decoder(model, src, length, name == "cached", ids)
                 for name in ("cached", "uncached")}
        steps["cached"]()  # warm-up
        times: dict[str, list[float]] = {name: [] for name in steps}
        for r in range(args.rounds):
            for name in sorted(steps, reverse=r % 2 == 1):
                times[name].append(time_once(steps[name]))
        identical = torch.equal(ids[True], ids[False])
        assert ids[True].shape == (args.batch, length), ids[True].shape
        ratios = [u / c for u, c in zip(times["uncached"], times["cached"], strict=True)]
        results[str(length)] = {"cached_s": times["cached"], "uncached_s": times["uncached"],
                                "ratio": statistics.median(ratios), "identical_ids": identical}
        print(f"N={length:4d}  cached {statistics.median(times['cached']):7.2f} s  uncached "
              f"{statistics.median(times['uncached']):7.2f} s  uncached/cached "
              f"x{results[str(length)]['ratio']:.1f}  identical ids: {identical}", flush=True)
    return results


def run_cache_size(args: argparse.Namespace) -> dict:
    """Bytes per token, by formula and as measured in a cache after a few decoder steps."""
    head_dim = args.d_model // args.heads
    results = {}
    for name, kv_heads in [("MHA", args.heads), ("GQA", max(args.heads // 2, 1)), ("MQA", 1)]:
        model, src = make_model(args, kv_heads), source_batch(args)
        memory, _ = model.encode(src)
        cache = model.new_cache()
        with torch.no_grad():
            model.decode(torch.full((args.batch, 5), BOS), memory, src, cache=cache)
        measured = sum(layer[0].nbytes for layer in cache.layers) / (args.batch * len(cache))
        formula = kv_cache_bytes_per_token(args.layers, kv_heads, head_dim)
        results[name] = {"num_kv_heads": kv_heads, "bytes_per_token": formula,
                         "measured": measured}
        print(f"{name}: {args.heads} query heads, {kv_heads} key/value heads: {formula} bytes "
              f"per token and sentence (measured {measured:.0f})", flush=True)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512],
                        help="tokens to generate")
    parser.add_argument("--batch", type=int, default=16, help="sentences decoded together")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--d-ff", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=120)
    parser.add_argument("--src-len", type=int, default=12)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}, "
          f"d_model {args.d_model}, {args.heads} heads, {args.layers} + {args.layers} layers, "
          f"{args.rounds} rounds", flush=True)
    report = {"settings": {k: v for k, v in vars(args).items() if k != "out"},
              "environment": environment(), "time": run_timing(args),
              "cache_bytes": run_cache_size(args)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decoding_bench.json").write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out / 'decoding_bench.json'}")


if __name__ == "__main__":
    main()
