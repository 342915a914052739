"""Hostile and broken submissions: each earns nothing it did not compute, with a reason,
and a batch of them completes; the same batch graded twice gives the same gradebook.

The submissions are built in code from chapter 1's solution and learner notebooks. The
batch is graded once (module fixture) through the real CLI, with short time limits.
"""

from __future__ import annotations

import csv
import json
import os
import time
import uuid
from pathlib import Path

import pytest
from grading_helpers import EXERCISE, learner_cells, solution_cells, write_notebook

from attention_course.grading.cli import main as grade_main

TIMEOUT = 8.0
MARKER = f"attention-grade-test-{uuid.uuid4().hex}"


def _replace(cells: list[str], symbol: str, source: str) -> list[str]:
    """``cells`` with the cell that defines ``symbol`` replaced by ``source``."""
    out = [source if (f"def {symbol}(" in c or f"class {symbol}(" in c) else c for c in cells]
    assert out != cells
    return out


def _submissions(folder: Path, out: Path) -> dict[str, Path]:
    sol, stubs = solution_cells(), learner_cells()
    setup = sol[0]
    cells: dict[str, list[str]] = {
        "solution": sol,
        "solution_again": sol,
        "learner": stubs,
        "loop_top": [setup, "while True:\n    pass\n", *sol[1:]],
        "loop_in_q1": _replace(sol, "gaussian_weights",
                               "def gaussian_weights(q, k, h):\n    while True:\n        pass\n"),
        "os_exit_top": [setup, "import os\nos._exit(0)\n", *sol[1:]],
        "os_exit_in_q2": _replace(
            sol, "nadaraya_watson_predict",
            "import os\ndef nadaraya_watson_predict(q, k, v, h):\n    os._exit(3)\n"),
        "sys_exit": ["import sys\nsys.exit(0)\n", *stubs, "raise SystemExit(10)\n"],
        "monkeypatch": [
            *stubs,
            "import torch, sys\n"
            "torch.allclose = lambda *a, **k: True\n"
            "torch.equal = lambda *a, **k: True\n"
            "torch.isclose = lambda a, b, **k: torch.ones_like(a, dtype=torch.bool)\n"
            "torch.testing.assert_close = lambda *a, **k: None\n"
            "import attention_course.grading as g\n"
            "g.check = lambda *a, **k: print('10/10')\n"
            "sys.modules['attention_course.grading'].run_checks = lambda *a, **k: []\n"
            "def gaussian_weights(q, k, h):\n    return torch.zeros(len(q), len(k))\n"
            "def choose_bandwidth(x, y, c):\n    return 0.3\n",
            "import attention_course.grading.compare\n",
        ],
        "fake_score": [
            *stubs,
            "print('{\"score\": 10, \"max_score\": 10}')\nprint('Total: 10/10 points')\n"
            "print('[PASS] q1_weights `gaussian_weights`: 2/2 points')\n",
        ],
        "background": [
            setup,
            "import subprocess, sys\n"
            f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', "
            f"'{MARKER}'], start_new_session=True)\n"
            "import os\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            f"    os.execv(sys.executable, [sys.executable, '-c', "
            f"'import time; time.sleep(300)', '{MARKER}'])\n",
            *stubs[1:],
        ],
        "flood": [setup, "import sys\nfor _ in range(1500):\n    sys.stdout.write('x' * 100000)\n",
                  *stubs[1:]],
        "memory_hog": [setup, "hog = [bytearray(1 << 30) for _ in range(64)]\n", *stubs[1:]],
        "write_out": [
            *stubs,
            f"import pathlib\nout = pathlib.Path({str(out)!r})\n"
            "for name in ('gradebook.csv', 'write_out.json', 'solution.json'):\n"
            "    try:\n"
            "        (out / name).write_text('write_out,10,10\\n')\n"
            "    except OSError as e:\n"
            "        print(e)\n",
        ],
        "forge_channel": [setup, "import os, sys\nos.write(int(sys.argv[1]), b'\\xff' * 64)\n",
                          *sol[1:]],
        "forge_record": [
            *stubs,
            "import io, os, struct, sys, torch\n"
            "b = io.BytesIO()\n"
            "torch.save({'nonce': 'guess', 'event': 'q_result', 'id': 'q4_bandwidth', "
            "'outputs': [0.1, 0.5, 0.2]}, b)\n"
            "data = b.getvalue()\n"
            "os.write(int(sys.argv[1]), struct.pack('!I', len(data)) + data)\n",
        ],
        "nonce_hunt": [
            *stubs,
            "import gc, torch\n"
            "channel = next(o for o in gc.get_objects() if type(o).__name__ == 'Channel')\n"
            "channel.send('q_result', id='q1_weights', outputs=[torch.zeros(3, 5)] * 4)\n",
        ],
        "zip_bomb": [
            *stubs,
            "import gc, io, os, struct, zipfile\n"
            "channel = next(o for o in gc.get_objects() if type(o).__name__ == 'Channel')\n"
            "z = io.BytesIO()\n"
            "with zipfile.ZipFile(z, 'w', zipfile.ZIP_DEFLATED) as archive:\n"
            "    archive.writestr('archive/data.pkl', bytes(1 << 28))\n"
            "data = z.getvalue()\n"
            "os.write(channel.fd, struct.pack('!I', len(data)) + data)\n",
        ],
        "fanout_bomb": [
            *stubs,
            "import gc\n"
            "channel = next(o for o in gc.get_objects() if type(o).__name__ == 'Channel')\n"
            "a = [0.0] * 1000\nb = [a] * 1000\nc = [b] * 1000\nd = [c] * 1000\n"
            "channel.send('q_result', id='q1_weights', outputs=d)\n",
        ],
        "import_reference": [
            setup,
            "from attention_course.kernel_regression import attention_weights\n"
            "def gaussian_weights(q, k, h):\n    return attention_weights(q, k, h)\n",
            "from attention_course.grading.exercises import ex01_attention_pooling\n",
            *stubs[3:],
        ],
        "evil_objects": [
            setup,
            "class Liar:\n    def __eq__(self, other):\n        return True\n"
            "def gaussian_weights(q, k, h):\n    return Liar()\n"
            "def choose_bandwidth(x, y, c):\n    return [Liar()]\n",
            "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)\n",
        ],
    }
    paths = {name: write_notebook(folder / f"{name}.ipynb", c) for name, c in cells.items()}
    corrupt = folder / f"corrupt_{EXERCISE}.ipynb"
    corrupt.write_text('{"cells": [ this is not json', encoding="utf-8")
    paths[corrupt.stem] = corrupt
    return paths


def _marked_processes() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if MARKER.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    folder = tmp_path_factory.mktemp("submissions")
    out = tmp_path_factory.mktemp("gradebook")
    paths = _submissions(folder, out)
    args = [*map(str, paths.values()), "--json", "--out", str(out), "--timeout", str(TIMEOUT),
            "--question-timeout", "3", "--jobs", "2"]
    start = time.monotonic()
    status = grade_main(args)
    elapsed = time.monotonic() - start
    records = {json.loads((out / f"{name}.json").read_text())["submission"]:
               json.loads((out / f"{name}.json").read_text()) for name in paths}
    return {"status": status, "elapsed": elapsed, "out": out, "records": records,
            "paths": paths}


def _questions(record):
    return {q["id"]: q for q in record["questions"]}


def test_batch_completes_with_a_complete_gradebook(batch):
    assert batch["status"] == 0
    with open(batch["out"] / "gradebook.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["submission"] for r in rows] == list(batch["paths"])
    assert len(rows) >= 20
    assert batch["elapsed"] < 20 * TIMEOUT / 2  # well under 20 x the per-submission timeout
    for name in batch["paths"]:
        assert (batch["out"] / f"{name}.feedback.txt").exists()


def test_solution_full_marks_learner_zero(batch):
    r = batch["records"]
    assert r["solution"]["score"] == r["solution"]["max_score"] == 10
    assert r["solution_again"]["score"] == 10
    assert r["learner"]["score"] == 0
    assert {q["status"] for q in r["learner"]["questions"]} == {"not_implemented"}


def test_infinite_loops(batch):
    top = batch["records"]["loop_top"]
    assert top["score"] == 0
    for q in top["questions"]:
        assert q["status"] == "timeout" and "did not run to the end in code cell 2" in q["message"]
    in_q1 = _questions(batch["records"]["loop_in_q1"])
    assert in_q1["q1_weights"]["status"] == "timeout"
    assert "did not finish within its 3 s limit" in in_q1["q1_weights"]["message"]
    # q2's solution calls gaussian_weights, so it hangs too; q3 and q4 still count
    assert in_q1["q2_predict"]["status"] == "timeout"
    assert batch["records"]["loop_in_q1"]["score"] == 6


def test_exits(batch):
    top = batch["records"]["os_exit_top"]
    assert top["score"] == 0
    assert all("exit status 0" in q["message"] for q in top["questions"])
    in_q2 = _questions(batch["records"]["os_exit_in_q2"])
    assert in_q2["q2_predict"]["status"] == "crashed"
    assert "exit status 3" in in_q2["q2_predict"]["message"]
    assert batch["records"]["os_exit_in_q2"]["score"] == 8
    sys_exit = batch["records"]["sys_exit"]
    assert sys_exit["score"] == 0
    assert any("SystemExit" in e for e in sys_exit["notebook_errors"])


def test_monkeypatching_and_printing_earn_nothing(batch):
    patched = _questions(batch["records"]["monkeypatch"])
    assert batch["records"]["monkeypatch"]["score"] == 0
    assert patched["q1_weights"]["status"] == "failed"
    assert "row 0 of the attention weights sums to 0" in patched["q1_weights"]["message"]
    assert patched["q4_bandwidth"]["status"] == "failed"
    assert any("ModuleNotFoundError" in e or "No module" in e
               for e in batch["records"]["monkeypatch"]["notebook_errors"])
    assert batch["records"]["fake_score"]["score"] == 0


def test_corrupted_notebook(batch):
    record = batch["records"][f"corrupt_{EXERCISE}"]
    assert record["score"] == 0 and record["max_score"] == 10
    assert "not valid JSON" in record["error"]
    assert all(q["points"] == 0 and q["message"] for q in record["questions"])


def test_no_process_left_behind(batch):
    assert batch["records"]["background"]["score"] == 0
    assert _marked_processes() == []


def test_output_flood_is_capped(batch):
    assert batch["records"]["flood"]["score"] == 0
    feedback = (batch["out"] / "flood.feedback.txt").read_text()
    assert len(feedback) < 200_000 and "more bytes of output not kept" in feedback


def test_memory_hog_hits_the_limit(batch):
    record = batch["records"]["memory_hog"]
    assert record["score"] == 0
    assert any("MemoryError" in e for e in record["notebook_errors"])


def test_writing_into_the_output_folder_changes_nothing(batch):
    out = batch["out"]
    assert json.loads((out / "solution.json").read_text())["score"] == 10
    assert json.loads((out / "write_out.json").read_text())["score"] == 0
    assert "write_out,10,10" not in (out / "gradebook.csv").read_text()
    if batch["records"]["write_out"]["isolation"].get("read_only_files"):
        feedback = (out / "write_out.feedback.txt").read_text()
        assert feedback.count("Read-only file system") + feedback.count("Permission denied") == 3


def test_forged_channel_data_earns_nothing(batch):
    garbage = batch["records"]["forge_channel"]
    assert garbage["score"] == 0
    assert all("malformed" in q["message"] for q in garbage["questions"])
    forged = _questions(batch["records"]["forge_record"])
    assert forged["q4_bandwidth"]["status"] == "not_implemented"
    assert batch["records"]["forge_record"]["score"] == 0


def test_forging_with_the_real_nonce_still_needs_the_right_answer(batch):
    record = batch["records"]["nonce_hunt"]
    assert record["score"] == 0
    assert _questions(record)["q1_weights"]["status"] == "failed"


def test_forged_records_cannot_exhaust_the_grader(batch):
    zip_bomb = batch["records"]["zip_bomb"]
    assert zip_bomb["score"] == 0
    assert {q["status"] for q in zip_bomb["questions"]} == {"not_implemented"}
    fanout = _questions(batch["records"]["fanout_bomb"])
    assert fanout["q1_weights"]["status"] == "error"
    assert "more than 100000 items" in fanout["q1_weights"]["message"]


def test_reference_is_out_of_reach(batch):
    record = batch["records"]["import_reference"]
    assert _questions(record)["q1_weights"]["status"] == "missing"
    errors = " ".join(record["notebook_errors"])
    assert "not available while this exercise is graded" in errors
    assert "ModuleNotFoundError" in errors


def test_objects_are_never_trusted(batch):
    record = _questions(batch["records"]["evil_objects"])
    assert record["q1_weights"]["status"] == "error" and "Liar" in record["q1_weights"]["message"]
    assert record["q4_bandwidth"]["status"] == "error"
    assert any("network" in e.lower() or "unreachable" in e.lower() or "refused" in e.lower()
               for e in batch["records"]["evil_objects"]["notebook_errors"])


def test_grading_twice_gives_the_same_gradebook(tmp_path):
    folder = tmp_path / "subs"
    folder.mkdir()
    sol, stubs = solution_cells(), learner_cells()
    paths = [
        write_notebook(folder / "a.ipynb", sol),
        write_notebook(folder / "b.ipynb", stubs),
        write_notebook(folder / "c.ipynb", _replace(
            sol, "nadaraya_watson_predict",
            "import os\ndef nadaraya_watson_predict(q, k, v, h):\n    os._exit(3)\n")),
    ]
    (folder / f"d_{EXERCISE}.ipynb").write_text("not json")
    paths.append(folder / f"d_{EXERCISE}.ipynb")
    outputs = []
    for run in ("one", "two"):
        out = tmp_path / run
        assert grade_main([*map(str, paths), "--out", str(out), "--jobs", "2",
                           "--timeout", str(TIMEOUT)]) == 0
        outputs.append({p.name: p.read_text() for p in sorted(out.iterdir())
                        if p.suffix in (".csv", ".json")})
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) == 5


def test_fallback_without_namespaces(tmp_path):
    """Where namespaces are unavailable: the process group, the environment token and the
    socket patch still leave nothing behind and keep the network out."""
    from attention_course.grading.grader import grade_notebook
    from attention_course.grading.sandbox import Limits

    paths = _submissions(tmp_path, tmp_path / "out")
    limits = Limits(timeout=TIMEOUT, question_timeout=3, namespaces=False)
    for name, score in [("solution", 10), ("background", 0), ("os_exit_in_q2", 8),
                        ("evil_objects", 0)]:
        record = grade_notebook(paths[name], limits=limits)
        assert record.score == score, (name, [q.message for q in record.questions])
        assert not record.isolation.get("pid_namespace")
        if name == "evil_objects":
            assert any("network is disabled" in e for e in record.notebook_errors)
    assert _marked_processes() == []


def test_main_command_has_grade(tmp_path, capsys):
    from attention_course.cli import main

    assert main(["grade", "--json", str(tmp_path / "missing_01_attention_pooling.ipynb")]) == 0
    (record,) = json.loads(capsys.readouterr().out)
    assert record["score"] == 0 and record["max_score"] == 10
    assert "could not be read" in record["error"]
