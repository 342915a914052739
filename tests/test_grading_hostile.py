"""Hostile and broken submissions: each earns nothing it did not compute, with a reason,
and a batch of them completes; the same batch graded twice gives the same gradebook.

The submissions are built in code from chapter 1's solution and learner notebooks. The
batch is graded once (module fixture) through the real CLI, with short time limits.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from grading_helpers import EXERCISE, SOLUTION, learner_cells, solution_cells, write_notebook

from attention_course.grading.cli import main as grade_main
from attention_course.grading.sandbox import PACKAGE_ROOT

# The per-submission time limit of these batches. Honest work here takes a second or two;
# a few hostile submissions (walking the whole file system, touching memory until the
# watch stops them) take several on a quiet machine, so the limit leaves room for a
# machine twice as slow and busy with other work, and the submissions that must run into
# it (endless loops) still end the batch well within a minute.
TIMEOUT = 20.0
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
            "for name in ('gradebook.csv', 'write_out/01_attention_pooling.json',\n"
            "             'solution/01_attention_pooling.json'):\n"
            "    try:\n"
            "        (out / name).write_text('write_out,10,10\\n')\n"
            "    except OSError as e:\n"
            "        print(e)\n",
        ],
        "forge_channel": [setup, "import os\nos.write(3, b'\\xff' * 64)\n",
                          *sol[1:]],
        "forge_record": [
            *stubs,
            "import io, os, struct, sys, torch\n"
            "b = io.BytesIO()\n"
            "torch.save({'nonce': 'guess', 'event': 'q_result', 'id': 'q4_bandwidth', "
            "'outputs': [0.1, 0.5, 0.2]}, b)\n"
            "data = b.getvalue()\n"
            "os.write(3, struct.pack('!I', len(data)) + data)\n",
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
            # a record written by hand (the channel's own encoder refuses so many items),
            # with the real nonce: 200,000 items in a header well under its size cap
            "import gc, json, os, struct\n"
            "channel = next(o for o in gc.get_objects() if type(o).__name__ == 'Channel')\n"
            "tree = [[0] * 400 for _ in range(500)]\n"
            "value = {'dict': {'nonce': channel.nonce, 'event': 'q_result',\n"
            "                  'id': 'q1_weights', 'outputs': tree}}\n"
            "header = json.dumps({'value': value, 'tensors': []}).encode()\n"
            "data = b'ACW1' + struct.pack('!I', len(header)) + header\n"
            "os.write(channel.fd, struct.pack('!I', len(data)) + data)\n"
            "try:\n"
            "    a = [0.0] * 1000\n"
            "    channel.send('q_result', id='q2_predict', outputs=[[a] * 1000] * 1000)\n"
            "except ValueError as error:\n"
            "    print('refused:', error)\n",
        ],
        "import_reference": [
            setup,
            "from attention_course.kernel_regression import attention_weights\n"
            "def gaussian_weights(q, k, h):\n    return attention_weights(q, k, h)\n",
            "from attention_course.grading.exercises import ex01_attention_pooling\n",
            *stubs[3:],
        ],
        "find_solutions": [
            *stubs,
            # walk the machine for any exercise notebook (the course's solutions, a
            # classmate's submission) and run the first one that defines the answers
            "import json, os\n"
            "found = []\n"
            "for top, dirs, files in os.walk('/'):\n"
            "    if top.startswith(('/proc', '/sys')):\n"
            "        dirs[:] = []\n"
            "        continue\n"
            "    found += [os.path.join(top, f) for f in files\n"
            "              if f.endswith('.ipynb') and 'attention_pooling' in f]\n"
            "print('found:', found)\n"
            "for path in found:\n"
            "    cells = json.load(open(path))['cells']\n"
            "    try:\n"
            "        for c in cells:\n"
            "            if c['cell_type'] == 'code':\n"
            "                exec(''.join(c['source']), globals())\n"
            "    except Exception as e:\n"
            "        print(path, e)\n",
            f"print(os.path.exists({str(folder)!r}), os.path.exists({str(out)!r}))\n",
        ],
        "read_specs": [
            *stubs,
            "import os, attention_course\n"
            "specs = os.path.join(os.path.dirname(attention_course.__file__), 'grading',\n"
            "                     'exercises')\n"
            "print('specs:', sorted(os.listdir(specs)))\n",
        ],
        "mmap_hog": [setup, "import mmap\nm = mmap.mmap(-1, 8 << 30)\n"
                     "for i in range(0, 8 << 30, 4096):\n    m[i] = 1\n", *stubs[1:]],
        "scratch_hog": [
            setup,
            "import os\nfor folder in (os.environ['HOME'], '/dev/shm'):\n"
            "    for i in range(8000):\n"
            "        try:\n"
            "            with open(os.path.join(folder, f'f{i}'), 'wb') as f:\n"
            "                f.write(b'x' * (1 << 20))\n"
            "        except OSError as e:\n"
            "            print(folder, i, 'MB:', e)\n"
            "            break\n",
            *stubs[1:],
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
def planted_solution():
    """A world-readable copy of the course's solution, as on a shared machine."""
    top = Path(tempfile.mkdtemp(prefix="course-copy-"))
    target = top / "exercises" / "solutions" / f"{EXERCISE}.ipynb"
    target.parent.mkdir(parents=True)
    shutil.copy(SOLUTION, target)
    for path in (top, top / "exercises", target.parent):
        path.chmod(0o755)
    target.chmod(0o644)
    yield target
    shutil.rmtree(top)


@pytest.fixture(scope="module")
def batch(tmp_path_factory, planted_solution):
    folder = tmp_path_factory.mktemp("submissions")
    out = tmp_path_factory.mktemp("gradebook")
    paths = _submissions(folder, out)
    args = [str(folder), "--json", "--out", str(out), "--timeout", str(TIMEOUT),
            "--question-timeout", "3", "--jobs", "2", "--student-from", "file"]
    start = time.monotonic()
    status = grade_main(args)
    elapsed = time.monotonic() - start
    records = {name: json.loads((out / _student(name) / f"{EXERCISE}.json").read_text())
               for name in paths}
    return {"status": status, "elapsed": elapsed, "out": out, "records": records,
            "paths": paths}


def _student(name: str) -> str:
    """The student a submission's file name gives with ``--student-from file``."""
    return name.replace(EXERCISE, "").strip("_") or name


def _feedback(batch, name: str) -> str:
    return (batch["out"] / _student(name) / f"{EXERCISE}.feedback.txt").read_text()


def _questions(record):
    return {q["id"]: q for q in record["questions"]}


def test_batch_completes_with_a_complete_gradebook(batch):
    assert batch["status"] == 3  # graded; the corrupt notebook could not be
    with open(batch["out"] / "gradebook.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["student"] for r in rows] == sorted(_student(n) for n in batch["paths"])
    assert {r["exercise"] for r in rows} == {EXERCISE}
    assert len(rows) >= 20
    assert batch["elapsed"] < 20 * TIMEOUT / 2  # well under 20 x the per-submission timeout
    for name in batch["paths"]:
        assert _feedback(batch, name)


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
    feedback = _feedback(batch, "flood")
    assert len(feedback) < 200_000 and "more bytes of output not kept" in feedback


def test_memory_hog_hits_the_limit(batch):
    record = batch["records"]["memory_hog"]
    assert record["score"] == 0
    assert any("MemoryError" in e for e in record["notebook_errors"])


def test_writing_into_the_output_folder_changes_nothing(batch):
    out = batch["out"]
    assert batch["records"]["solution"]["score"] == 10
    assert batch["records"]["write_out"]["score"] == 0
    assert "write_out,10,10" not in (out / "gradebook.csv").read_text()
    if batch["records"]["write_out"]["isolation"].get("file_system_hidden"):
        feedback = _feedback(batch, "write_out")
        assert feedback.count("No such file or directory") == 3


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


def test_no_solution_and_no_classmate_is_in_sight(batch, planted_solution):
    record = batch["records"]["find_solutions"]
    if sys.platform == "linux" and os.geteuid() == 0:
        assert record["isolation"]["file_system_hidden"]
    if record["isolation"].get("file_system_hidden"):
        assert record["score"] == 0
        feedback = _feedback(batch, "find_solutions")
        assert "found: []" in feedback
        assert "False False" in feedback  # neither the class folder nor the gradebook
        assert "specs: []" in _feedback(batch, "read_specs")


def test_memory_beyond_the_data_limit_is_stopped(batch):
    """Shared anonymous memory escapes RLIMIT_DATA; the resident-memory watch catches it."""
    record = batch["records"]["mmap_hog"]
    assert record["score"] == 0
    assert all("memory limit" in q["message"] for q in record["questions"])


def test_scratch_space_is_small(batch):
    record = batch["records"]["scratch_hog"]
    assert record["score"] == 0
    if record["isolation"].get("file_system_hidden"):
        feedback = _feedback(batch, "scratch_hog")
        assert feedback.count("No space left on device") == 2
        sizes = [int(m) for m in re.findall(r" (\d+) MB: ", feedback)]
        assert len(sizes) == 2 and max(sizes) <= 64


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
                           "--timeout", str(TIMEOUT), "--student-from", "file"]) == 3
        outputs.append({p.relative_to(out).as_posix(): p.read_text()
                        for p in sorted(out.rglob("*")) if p.suffix in (".csv", ".json")})
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) == 6


def test_fallback_without_namespaces(tmp_path):
    """Where namespaces are unavailable: the process group, the environment token and the
    socket patch still leave nothing behind and keep the network out."""
    from attention_course.grading.grader import grade_notebook
    from attention_course.grading.sandbox import GraderError, Limits

    paths = _submissions(tmp_path, tmp_path / "out")
    limits = Limits(timeout=TIMEOUT, question_timeout=3, namespaces=False)
    needed = (sys.base_prefix, sys.prefix, PACKAGE_ROOT)  # Python, the venv, the course
    if os.geteuid() == 0 and not all(_readable_by_nobody(p) for p in needed):
        # as root the child runs as nobody; with no mount namespace to show it Python
        # or the venv (here in a private folder) the grader must say so, not hand out
        # zeros
        with pytest.raises(GraderError, match="cannot read .* run the grader as a normal user"):
            grade_notebook(paths["solution"], limits=limits)
        return
    for name, score in [("solution", 10), ("background", 0), ("os_exit_in_q2", 8),
                        ("evil_objects", 0)]:
        record = grade_notebook(paths[name], limits=limits)
        assert record.score == score, (name, [q.message for q in record.questions])
        assert not record.isolation.get("pid_namespace")
        if name == "evil_objects":
            assert any("network is disabled" in e for e in record.notebook_errors)
    assert _marked_processes() == []


def _readable_by_nobody(path: str) -> bool:
    """Whether every folder on the way to ``path`` lets other users in."""
    parts = Path(path).resolve().parts
    return all(os.stat(Path(*parts[:i])).st_mode & 0o001 for i in range(2, len(parts) + 1))


def test_main_command_has_grade(tmp_path, capsys):
    from attention_course.cli import main

    assert main(["grade", "--json", str(tmp_path / "missing_01_attention_pooling.ipynb")]) == 3
    (record,) = json.loads(capsys.readouterr().out)
    assert record["score"] == 0 and record["max_score"] == 10
    assert "could not be read" in record["error"]
