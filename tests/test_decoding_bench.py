"""The decoding benchmark runs end to end on a tiny setting and writes its JSON."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "decoding_bench.py"


def test_decoding_benchmark_writes_json(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("decoding_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.main(["--lengths", "4", "9", "--batch", "3", "--rounds", "1", "--d-model", "16",
                "--heads", "4", "--layers", "1", "--d-ff", "16", "--vocab", "20",
                "--out", str(tmp_path)])
    report = json.loads((tmp_path / "decoding_bench.json").read_text())
    assert set(report["time"]) == {"4", "9"}
    assert all(row["identical_ids"] and row["ratio"] > 0 for row in report["time"].values())
    sizes = report["cache_bytes"]
    assert [sizes[k]["num_kv_heads"] for k in ("MHA", "GQA", "MQA")] == [4, 2, 1]
    assert sizes["MHA"]["bytes_per_token"] == 2 * 1 * 4 * 4 * 4
    assert all(row["measured"] == row["bytes_per_token"] for row in sizes.values())
    assert "uncached/cached" in capsys.readouterr().out
