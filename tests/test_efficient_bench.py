"""Smoke test of benchmarks/efficient_bench.py at toy sizes (no timings are asserted)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "efficient_bench.py"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH.parent))  # it reuses helpers from attention_bench.py
    try:
        spec = importlib.util.spec_from_file_location("efficient_bench", BENCH)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH.parent))
    return module


def test_benchmark_writes_json_and_plot(bench, tmp_path, capsys):
    bench.main(["--lengths", "16", "40", "--heads", "2", "--head-dim", "8", "--block-size", "8",
                "--repeats", "2", "--warmup", "0", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "efficient_bench.json").read_text())
    assert (tmp_path / "efficient_bench.png").stat().st_size > 0
    for mode in ("forward", "forward_backward"):
        row = report["time"][mode]["40"]
        assert set(row) == {"flash", "sdpa"} and row["sdpa"]["ratio_to_sdpa"] == 1.0
        assert len(row["flash"]["times_s"]) == 2 and row["flash"]["ratio_to_sdpa"] > 0
    if "memory" in report:
        assert set(report["memory"]["forward_backward"]["40"]) == {"explicit", "flash", "sdpa"}
    out = capsys.readouterr().out
    assert "flash / sdpa, forward+backward: N=16 x" in out and "wrote" in out
