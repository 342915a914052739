"""Smoke test of benchmarks/attention_bench.py at toy sizes (no timings are asserted)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "attention_bench.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("attention_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_writes_json_and_plot(bench, tmp_path, capsys):
    bench.main(["--lengths", "8", "16", "--batch", "1", "--embed-dim", "16", "--heads", "2",
                "--repeats", "1", "--warmup", "0", "--max-explicit-len", "8",
                "--out", str(tmp_path)])
    report = json.loads((tmp_path / "attention_bench.json").read_text())
    assert (tmp_path / "attention_bench.png").stat().st_size > 0
    fb = report["time"]["forward_backward"]
    assert set(fb["8"]) == {"ours_fused", "ours_explicit", "torch_mha", "bare_sdpa"}
    assert "ours_explicit" not in fb["16"]  # skipped above --max-explicit-len
    assert fb["16"]["torch_mha"]["ratio_to_torch_mha"] == 1.0
    if "memory" in report:
        assert set(report["memory"]["forward"]["16"]) == {"ours_fused", "torch_mha", "bare_sdpa"}
    assert "wrote" in capsys.readouterr().out
