"""The grader's third red-team round, rebuilt: every finding a class folder or notebook.

A batch always completes and writes its gradebook whatever a file holds; a wrong answer
of any type is the student's zero with a message; links are refused; submissions cannot
talk to each other; limits hold while the parent decodes; honest code runs as in Jupyter;
what the instructor reads cannot be forged.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from grading_helpers import EXERCISE, SOLUTION, learner_cells, solution_cells, write_notebook

from attention_course.grading.cli import main as grade_main
from attention_course.grading.grader import grade_notebook
from attention_course.grading.sandbox import Limits

TIMEOUT = 30.0  # room for a machine twice as slow: these notebooks take a second or two
linux_root = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux's")


def _replace(cells: list[str], symbol: str, source: str) -> list[str]:
    out = [source if (f"def {symbol}(" in c or f"class {symbol}(" in c) else c for c in cells]
    assert out != cells
    return out


def _with(cells: list[str], after: str, source: str) -> list[str]:
    """``cells`` with ``source`` as a new cell right after the one defining ``after``."""
    i = next(i for i, c in enumerate(cells) if f"def {after}(" in c or f"class {after}(" in c)
    return [*cells[:i + 1], source, *cells[i + 1:]]


KEYRING_WRITE = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(248, b"user", b"answers", code.encode(), len(code), -4)  # @u keyring
print("add_key:", r, ctypes.get_errno())
import fcntl, sys
held = open(sys.executable, "rb")
try:
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("flock: held")
except OSError as error:
    print("flock:", error)
import socket
try:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\\0attention-answers")
    server.listen(1)
    print("abstract socket: bound")
except OSError as error:
    print("abstract socket:", error)
open("/dev/shm/answers.py", "w").write(code)
print("sysv shm:", libc.shmget(0x5EED, 4096, 0o1666))  # IPC_CREAT
import time
time.sleep(4)  # stay while the reader looks
"""

KEYRING_READ = """
import ctypes, os, socket, sys, fcntl
libc = ctypes.CDLL(None, use_errno=True)
found = []
import time
for _ in range(30):  # the writer may still be starting
    key = libc.syscall(249, b"user", b"answers", None, -4)  # request_key in @u
    if key > 0 or os.path.exists("/dev/shm/answers.py"):
        break
    time.sleep(0.2)
print("request_key:", key, ctypes.get_errno())
if key > 0:
    buf = ctypes.create_string_buffer(65536)
    n = libc.syscall(250, 11, key, buf, 65536)  # KEYCTL_READ
    if n > 0:
        found.append(buf.raw[:n].decode())
probe = open(sys.executable, "rb")
try:
    fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fcntl.flock(probe, fcntl.LOCK_UN)
    print("flock: free")
except OSError as error:
    print("flock:", error)
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\\0attention-answers")
    print("abstract socket: connected")
except OSError as error:
    print("abstract socket:", error)
print("sysv shm:", libc.shmget(0x5EED, 0, 0))  # -1: not there
if os.path.exists("/dev/shm/answers.py"):
    found.append(open("/dev/shm/answers.py").read())
for code in found:
    exec(code)
print("found:", len(found))
"""


def _class(top: Path, outside: Path) -> dict[str, Path]:
    """A class folder holding every finding of the round, each in its own student's folder."""
    sol, stubs = solution_cells(), learner_cells()
    nb = f"{EXERCISE}.ipynb"
    answer = next(c for c in sol if "def gaussian_weights(" in c)

    def put(student: str, cells: list[str], name: str = nb) -> Path:
        (top / student).mkdir(parents=True, exist_ok=True)
        return write_notebook(top / student / name, cells)

    paths = {
        "honest": put("honest", sol),
        # one file stops the batch, three ways
        "surrogate": put("surrogate", [*sol, 'raise ValueError("\\ud800 \\udfff")\n']),
        "escape_names": put("escape_names", [
            *stubs,
            "class Forged(Exception):\n    pass\n"
            "Forged.__name__ = 'E\\x1b[2J\\x1b]0;pwned\\x07\\nScore: 10/10'\n"
            "raise Forged('\\x1b[1A\\x1b[2KScore: 10/10')\n"]),
        # wrong types are wrong answers
        "huge_bandwidth": put("huge_bandwidth", _replace(
            sol, "choose_bandwidth", "def choose_bandwidth(x, y, candidates):\n"
                                     "    return 2 ** 1100\n")),
        "float4": put("float4", _replace(
            sol, "gaussian_weights", "import torch\ndef gaussian_weights(q, k, h):\n"
            "    return torch.zeros(len(q), len(k), 2, dtype=torch.uint8).view("
            "getattr(torch, 'float4_e2m1fn_x2', torch.float8_e5m2)).squeeze(-1)\n")),
        "subclass": put("subclass", _with(
            sol, "gaussian_weights",
            "import torch\nclass Sneaky(torch.Tensor):\n    pass\n"
            "_right = gaussian_weights\n"
            "def gaussian_weights(q, k, h):\n"
            "    return _right(q, k, h).as_subclass(Sneaky)\n")),
        # honest code that Jupyter runs
        "time_magic": put("time_magic", [
            "%%time\n" + c if "def gaussian_weights(" in c else c for c in sol]),
        "black": put("black", [*sol, "ok = (\n    1 + 1\n    != 3\n)\nassert ok\n"]),
        "pool": put("pool", [*sol, "import multiprocessing\n"
                     "with multiprocessing.get_context('fork').Pool(8) as pool:\n"
                     "    print(sum(pool.map(abs, range(100))))\n"]),
        # submissions that talk to each other
        # the writer leaves its answer to q1 where the next submission could look
        "writer": put("writer", [*sol[:1], f"code = {answer!r}\n" + KEYRING_WRITE, *sol[1:]]),
        "reader": put("reader", [*stubs, KEYRING_READ]),
    }
    # a notebook saved with 21 MB of figures: graded, its outputs dropped
    big = json.loads(paths["honest"].read_text())
    figure = {"output_type": "display_data", "metadata": {},
              "data": {"image/png": "iVBORw0KGgo" * (2 << 20)}}
    big["cells"][0]["outputs"] = [figure]
    (top / "figures").mkdir()
    (top / "figures" / nb).write_text(json.dumps(big))
    paths["figures"] = top / "figures" / nb
    # a 5,000-digit integer in the metadata
    (top / "bigint").mkdir()
    text = paths["honest"].read_text().replace('"metadata": {', '"metadata": {"n": '
                                                + "9" * 5000 + ", ", 1)
    (top / "bigint" / nb).write_text(text)
    paths["bigint"] = top / "bigint" / nb
    # a file name that is not UTF-8 (a Windows zip), and one with an escape sequence
    (top / "zed").mkdir()
    latin = os.path.join(os.fsencode(top / "zed"), b"caf\xe9_" + nb.encode())
    shutil.copy(paths["honest"], latin)
    paths["latin1"] = Path(os.fsdecode(latin))
    (top / "esc").mkdir()
    escaped = top / "esc" / f"\x1b[2J{nb}"
    shutil.copy(SOLUTION, escaped)
    paths["escaped_file"] = escaped
    # links: to the solution, to a classmate, a hard link from outside, a pipe
    for student, target in (("link_solution", SOLUTION), ("link_classmate", paths["honest"])):
        (top / student).mkdir()
        (top / student / nb).symlink_to(target)
        paths[student] = top / student / nb
    shutil.copy(SOLUTION, outside / nb)
    (top / "hardlink").mkdir()
    os.link(outside / nb, top / "hardlink" / nb)
    paths["hardlink"] = top / "hardlink" / nb
    (top / "fifo").mkdir()
    os.mkfifo(top / "fifo" / nb)
    paths["fifo"] = top / "fifo" / nb
    (top / "folder_link").symlink_to(outside, target_is_directory=True)
    # names a spreadsheet would run
    for student in ("-2+3", "+cmd", "@SUM(A1)", "=HYPERLINK(1)"):
        put(student, stubs)
    return paths


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    top = tmp_path_factory.mktemp("class")
    outside = tmp_path_factory.mktemp("outside")
    paths = _class(top, outside)
    out = tmp_path_factory.mktemp("grades")
    status = grade_main([str(top), "--out", str(out), "--json", "--timeout", str(TIMEOUT),
                         "--jobs", "2"])
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {"status": status, "out": out, "rows": rows, "paths": paths, "top": top}


def _row(batch, student: str) -> dict:
    (row,) = [r for r in batch["rows"] if r["student"] == student]
    return row


def _record(batch, student: str) -> dict:
    return json.loads((batch["out"] / student / f"{EXERCISE}.json").read_text("utf-8"))


def test_the_batch_completes_and_every_file_has_its_row(batch):
    assert batch["status"] == 3  # graded; some submissions could not be (refused)
    students = {r["student"] for r in batch["rows"]}
    for name in ("honest", "surrogate", "bigint", "zed", "escape_names", "huge_bandwidth",
                 "float4", "subclass", "link_solution", "link_classmate", "hardlink",
                 "fifo", "folder_link", "writer", "reader", "figures"):
        assert name in students, name
    assert (batch["out"] / "totals.csv").is_file()


def test_odd_text_and_names_are_graded_not_fatal(batch):
    assert _row(batch, "surrogate")["score"] == "10"
    record = _record(batch, "surrogate")
    assert any("\\ud800" in e for e in record["notebook_errors"])
    assert _row(batch, "bigint")["error"].startswith("the notebook file is not valid JSON")
    zed = _row(batch, "zed")
    assert zed["score"] == "10" and "caf\\xe9_" in zed["file"]


def test_wrong_types_are_wrong_answers(batch):
    huge = {q["id"]: q for q in _record(batch, "huge_bandwidth")["questions"]}
    assert huge["q4_bandwidth"]["points"] == 0 and "inf" in huge["q4_bandwidth"]["message"]
    assert _record(batch, "huge_bandwidth")["score"] == 9
    odd = {q["id"]: q for q in _record(batch, "float4")["questions"]}
    assert odd["q1_weights"]["status"] == "error"
    assert "dtype float" in odd["q1_weights"]["message"]
    assert _record(batch, "subclass")["score"] == 10  # its plain data is the answer


def test_links_and_special_files_are_refused_with_a_reason(batch):
    for student, why in (("link_solution", "symbolic link"), ("link_classmate",
                                                              "symbolic link"),
                         ("hardlink", "hard links"), ("fifo", "named pipe"),
                         ("folder_link", "symbolic link")):
        row = _row(batch, student)
        assert row["score"] == "0" and why in row["error"], (student, row)


@linux_root
def test_submissions_cannot_talk_to_each_other(batch, tmp_path):
    reader = _record(batch, "reader")
    assert reader["score"] == 0
    feedback = (batch["out"] / "reader" / f"{EXERCISE}.feedback.txt").read_text("utf-8")
    assert "found: 0" in feedback and "sysv shm: -1" in feedback
    writer = (batch["out"] / "writer" / f"{EXERCISE}.feedback.txt").read_text("utf-8")
    assert "add_key: -1" in writer and "No locks available" in writer
    # and in a later batch
    (tmp_path / "later").mkdir()
    later = write_notebook(tmp_path / "later" / f"{EXERCISE}.ipynb",
                           [*learner_cells(), KEYRING_READ])
    record = grade_notebook(later, limits=Limits(timeout=TIMEOUT))
    assert record.score == 0 and "found: 0" in record.output


def test_honest_code_runs_as_in_jupyter(batch):
    for student in ("honest", "time_magic", "black", "pool", "figures"):
        assert _row(batch, student)["score"] == "10", (student, _record(batch, student))


def test_what_the_instructor_reads_cannot_be_forged(batch, capsys):
    for path in batch["out"].rglob("*"):
        if path.is_file():
            text = path.read_text("utf-8")
            assert "\x1b" not in text and "\x07" not in text, path
    feedback = (batch["out"] / "escape_names" / f"{EXERCISE}.feedback.txt").read_text()
    assert "\\x1b[2J" in feedback
    assert not any(line.startswith("Score: 10/10") for line in feedback.splitlines())
    with open(batch["out"] / "gradebook.csv", newline="", encoding="utf-8") as f:
        cells = [cell for row in csv.reader(f) for cell in row]
    assert not any(c.startswith(("=", "+", "-", "@")) for c in cells)
    assert "'-2_3" in cells and "'@SUM_A1_" in cells


def _grade_alone(tmp_path: Path, cells: list[str], memory: int) -> dict:
    path = write_notebook(tmp_path / f"{EXERCISE}.ipynb", cells)
    return grade_notebook(path, limits=Limits(timeout=TIMEOUT, memory_mb=memory)).to_json()


@linux_root
def test_memory_in_forked_helpers_is_counted_while_the_parent_decodes(tmp_path):
    helpers = ("import os, time\n"
               "for _ in range(3):\n"
               "    if os.fork() == 0:\n"
               "        hold = bytearray(250 << 20)\n"
               "        for i in range(0, len(hold), 4096):\n"
               "            hold[i] = 1\n"
               "        time.sleep(60)\n"
               "        os._exit(0)\n"
               "time.sleep(3)\n")
    record = _grade_alone(tmp_path, [*solution_cells(), helpers], memory=300)
    assert record["score"] < 10
    assert any("memory limit" in q["message"] for q in record["questions"])


@linux_root
def test_memory_parked_in_socket_buffers_is_counted(tmp_path):
    park = ("import socket, time\n"
            "pairs = []\n"
            "for _ in range(900):\n"
            "    a, b = socket.socketpair()\n"
            "    a.setblocking(False)\n"
            "    try:\n"
            "        while True:\n"
            "            a.send(bytes(65536))\n"
            "    except BlockingIOError:\n"
            "        pass\n"
            "    pairs.append((a, b))\n"
            "time.sleep(3)\n")
    record = _grade_alone(tmp_path, [*solution_cells(), park], memory=100)
    if not record["isolation"].get("memory_buffers_counted", True):
        pytest.skip("this machine does not let the grader look into a child's sockets")
    assert record["score"] < 10
    assert any("memory limit" in q["message"] for q in record["questions"])


def test_a_huge_record_of_pickle_opcodes_is_dropped_in_time(tmp_path):
    flood = ("import gc, os, struct\n"
             "channel = next(o for o in gc.get_objects() if type(o).__name__ == 'Channel')\n"
             "data = b'\\x80\\x05' + b'(' * (60 << 20)\n"
             "os.write(channel.fd, struct.pack('!I', len(data)) + data)\n")
    import time

    start = time.monotonic()
    record = _grade_alone(tmp_path, [*learner_cells(), flood], memory=2048)
    assert record["score"] == 0
    assert time.monotonic() - start < 3 * TIMEOUT
