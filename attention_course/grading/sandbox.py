"""Run a submission's code in a sandboxed child process and collect its raw answers.

The parent side of the protocol in :mod:`attention_course.grading._driver`. One call of
:func:`run_child` starts one child: a fresh process group, running as the user
``nobody`` in new network and PID namespaces when the grader is root, with limits on
wall-clock time (enforced here), CPU time, address space, file size and (as root) the
number of processes; stdout and stderr are drained into a capped buffer. Every record the
child sends is loaded with ``torch.load(weights_only=True)`` and checked to be plain data;
nothing is unpickled as an object. Afterwards every process of the child is killed: the
PID namespace (as root), the process group, and any process still carrying the child's
random environment token.
"""

from __future__ import annotations

import io
import json
import os
import pwd
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attention_course.grading._driver import HEADER
from attention_course.grading.compare import NotPlainData, validate_plain

DRIVER = str(Path(__file__).with_name("_driver.py"))
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
TOKEN_VAR = "ATTENTION_COURSE_SANDBOX"
MAX_RECORD = 64 << 20
MAX_CHANNEL = 256 << 20
ERROR_STATUSES = ("not_implemented", "missing", "error")


class GraderError(RuntimeError):
    """The grader itself failed (not the submission): e.g. the child could not start."""


@dataclass(frozen=True)
class Limits:
    """Limits for one submission.

    ``timeout``: wall-clock seconds for running the notebook and answering all questions
    (children together; starting Python and torch is not counted); ``memory_mb``: address
    space of the child; ``output_kb``: captured stdout+stderr kept; ``file_mb``: largest
    file the child may write; ``max_processes``: tasks of the sandbox user (root only).
    """

    timeout: float = 60.0
    memory_mb: int = 3072
    output_kb: int = 64
    file_mb: int = 64
    max_processes: int = 256
    startup_timeout: float = 120.0
    namespaces: bool = True
    question_timeout: float | None = None  # caps every question's own time_limit

    def time_limit(self, question_limit: float) -> float:
        if self.question_timeout is None:
            return question_limit
        return min(question_limit, self.question_timeout)


@dataclass
class Attempt:
    """What one child did: raw answers per question and how it ended."""

    answers: dict[str, tuple] = field(default_factory=dict)
    cell_errors: list[tuple[int, str]] = field(default_factory=list)
    isolation: dict[str, Any] = field(default_factory=dict)
    ready: bool = False
    cells_done: bool = False
    current_cell: int | None = None
    current_question: str | None = None
    end: str = ""  # done | timeout | exited | violation
    exit_status: int | None = None
    elapsed: float = 0.0
    output: str = ""


def _sandbox_ids() -> tuple[int | None, int | None]:
    if os.geteuid() != 0:
        return None, None
    try:
        entry = pwd.getpwnam("nobody")
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return 65534, 65534


class _Drain(threading.Thread):
    """Read the child's stdout+stderr, keeping only the first ``limit`` bytes."""

    def __init__(self, stream: Any, limit: int) -> None:
        super().__init__(daemon=True)
        self.stream, self.limit = stream, limit
        self.kept = bytearray()
        self.total = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        fd = self.stream.fileno()
        while not self.stopped.is_set():
            ready, _, _ = select.select([fd], [], [], 0.2)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            self.total += len(chunk)
            room = self.limit - len(self.kept)
            if room > 0:
                self.kept += chunk[:room]

    def text(self) -> str:
        text = self.kept.decode("utf-8", errors="replace")
        text = "".join(c if c.isprintable() or c in "\n\t" else "?" for c in text)
        if self.total > len(self.kept):
            text += f"\n[... {self.total - len(self.kept)} more bytes of output not kept]"
        return text


def _pids_with_token(token: str) -> list[int]:
    marker = f"{TOKEN_VAR}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _kill_everything(proc: subprocess.Popen, token: str, pid_namespace: bool) -> None:
    """Leave no process of the child behind."""
    if pid_namespace and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # the root guard kills the namespace's init
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            pass
    for _ in range(5):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        stragglers = _pids_with_token(token) if os.path.isdir("/proc") else []
        for pid in stragglers:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if proc.poll() is None:
            try:
                proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                continue
        if not stragglers:
            break
        time.sleep(0.05)


def _job_bytes(config: dict, payload: dict) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(payload, buffer)
    header = json.dumps(config).encode()
    return HEADER.pack(len(header)) + header + buffer.getvalue()


def _stored_and_small(record: bytes) -> bool:
    """A ``torch.save`` archive whose entries are stored (not compressed) and small.

    Checked before ``torch.load``, so a forged record cannot inflate into gigabytes.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(record)) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return False
    return all(e.compress_type == zipfile.ZIP_STORED for e in entries) and (
        sum(e.file_size for e in entries) <= MAX_RECORD
    )


class _Session:
    """Parse the child's records and keep the deadlines (single-threaded)."""

    def __init__(self, nonce: str, questions: list[dict], limits: Limits, budget: float,
                 time_limits: dict[str, float], workdir: str) -> None:
        self.nonce, self.workdir = nonce, workdir
        self.pending = {q["id"] for q in questions}
        self.limits, self.budget, self.time_limits = limits, budget, time_limits
        self.attempt = Attempt()
        self.started = time.monotonic()
        self.deadline = self.started + limits.startup_timeout
        self.ready_at: float | None = None
        self.done = False
        self.buffer = bytearray()
        self.received = 0

    def overall_deadline(self) -> float:
        assert self.ready_at is not None
        return self.ready_at + self.budget

    def feed(self, chunk: bytes) -> bool:
        """Take bytes from the channel; False on a protocol violation."""
        self.received += len(chunk)
        if self.received > MAX_CHANNEL:
            return False
        self.buffer += chunk
        while len(self.buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self.buffer)
            if size > MAX_RECORD:
                return False
            if len(self.buffer) < HEADER.size + size:
                break
            record = bytes(self.buffer[HEADER.size : HEADER.size + size])
            del self.buffer[: HEADER.size + size]
            self.handle(record)
            if self.done:
                break
        return True

    def handle(self, record: bytes) -> None:
        import torch

        if not _stored_and_small(record):
            return
        try:
            event = torch.load(io.BytesIO(record), weights_only=True)
        except Exception:
            return  # not ours: ignore
        if type(event) is not dict or event.get("nonce") != self.nonce:
            return
        for key in ("error", "message"):  # the random folder name would vary between runs
            if type(event.get(key)) is str:
                event[key] = event[key].replace(self.workdir, "<workdir>")
        kind, now, a = event.get("event"), time.monotonic(), self.attempt
        if kind == "ready" and not a.ready:
            facts = event.get("isolation")
            if type(facts) is dict:
                a.isolation = {str(k): v for k, v in facts.items() if type(v) in (bool, int)}
            a.ready, self.ready_at = True, now
            self.deadline = self.overall_deadline()
        elif not a.ready:
            return
        elif kind == "cell_start" and type(event.get("index")) is int:
            a.current_cell = event["index"]
        elif kind == "cell_error" and type(event.get("index")) is int:
            a.cell_errors.append((event["index"], str(event.get("error"))[:500]))
        elif kind == "cells_done":
            a.cells_done, a.current_cell = True, None
        elif kind == "q_start" and event.get("id") in self.pending - set(a.answers):
            qid = event["id"]
            a.current_question = qid
            self.deadline = min(now + self.time_limits.get(qid, 10.0), self.overall_deadline())
        elif kind in ("q_result", "q_error") and event.get("id") in self.pending - set(a.answers):
            qid = event["id"]
            if kind == "q_result":
                try:
                    a.answers[qid] = ("result", validate_plain(event.get("outputs")))
                except NotPlainData as error:
                    a.answers[qid] = ("error", "error", f"returned {error}")
            else:
                status = event.get("status")
                status = status if status in ERROR_STATUSES else "error"
                a.answers[qid] = ("error", status, str(event.get("message"))[:500])
            if a.current_question == qid:
                a.current_question = None
            self.deadline = self.overall_deadline()
        elif kind == "done":
            self.done = True


def run_child(
    cells: list[str],
    questions: list[dict],
    time_limits: dict[str, float],
    limits: Limits,
    budget: float,
    forbidden: tuple[str, ...] = (),
) -> Attempt:
    """Run the notebook's code cells and the questions' calls in one sandboxed child.

    ``questions`` are call specs (``Prepared.call_spec()``); ``budget`` is the wall-clock
    time allowed after the child is ready. Raises :class:`GraderError` when the child
    cannot start, which is never the submission's fault: no submission code runs before.
    """
    nonce, token = secrets.token_hex(16), secrets.token_hex(16)
    uid, gid = _sandbox_ids()
    base = tempfile.mkdtemp(prefix="attention-grade-")
    os.chmod(base, 0o711)
    work = os.path.join(base, "work")
    os.mkdir(work, 0o700)
    if uid is not None:
        os.chown(work, uid, gid)
    config = {
        "nonce": nonce,
        "workdir": work,
        "uid": uid,
        "gid": gid,
        "namespaces": limits.namespaces,
        "memory_bytes": limits.memory_mb << 20,
        "cpu_seconds": int(budget + 30),
        "file_bytes": limits.file_mb << 20,
        "max_processes": limits.max_processes,
        "forbidden": list(forbidden),
        "package_root": PACKAGE_ROOT,
    }
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": work,
        "TMPDIR": work,
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": os.path.join(work, ".matplotlib"),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MALLOC_ARENA_MAX": "2",
        "ATTENTION_COURSE_DEVICE": "cpu",
        "CUDA_VISIBLE_DEVICES": "",
        "LANG": "C.UTF-8",
        TOKEN_VAR: token,
    }
    job = _job_bytes(config, {"cells": cells, "questions": questions})
    read_fd, write_fd = os.pipe()
    session = _Session(nonce, questions, limits, budget, time_limits, work)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-B", DRIVER, str(write_fd)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(write_fd,),
            cwd=work,
            env=env,
            start_new_session=True,
        )
    except OSError as error:
        os.close(read_fd)
        os.close(write_fd)
        shutil.rmtree(base, ignore_errors=True)
        raise GraderError(f"could not start the grading child: {error}") from error
    os.close(write_fd)
    drain = _Drain(proc.stdout, limits.output_kb << 10)
    drain.start()
    attempt = session.attempt
    try:
        threading.Thread(target=_feed, args=(proc.stdin, job), daemon=True).start()
        attempt.end = _pump(read_fd, proc, session)
    finally:
        _kill_everything(proc, token, bool(attempt.isolation.get("pid_namespace")))
        drain.stopped.set()
        drain.join(timeout=2)
        os.close(read_fd)
        shutil.rmtree(base, ignore_errors=True)
    attempt.output = drain.text().replace(work, "<workdir>")
    status = proc.returncode
    attempt.exit_status = 128 - status if status is not None and status < 0 else status
    attempt.elapsed = time.monotonic() - (session.ready_at or session.started)
    if not attempt.ready:
        raise GraderError(
            "the grading child did not start (no submission code had run yet); its output:\n"
            + attempt.output[-3000:]
        )
    return attempt


def _feed(stream: Any, job: bytes) -> None:
    """Write the job to the child's stdin (in a thread: a stuck child cannot block us)."""
    try:
        stream.write(job)
        stream.close()
    except (BrokenPipeError, OSError, ValueError):
        pass


def _pump(read_fd: int, proc: subprocess.Popen, session: _Session) -> str:
    """Read records until the child is done, exits, overruns or misbehaves."""
    exited_at: float | None = None
    while True:
        now = time.monotonic()
        if now >= session.deadline:
            return "timeout"
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        wait = 0.05 if exited_at is not None else min(session.deadline - now, 0.5)
        ready, _, _ = select.select([read_fd], [], [], wait)
        if ready:
            chunk = os.read(read_fd, 1 << 20)
            if chunk:
                if not session.feed(chunk):
                    return "violation"
                if session.done:
                    return "done"
                continue
            if exited_at is None:  # the channel was closed but the child lives on
                time.sleep(0.05)
                continue
        if exited_at is not None:
            return "exited"  # nothing more to read after the child ended
