"""Run a submission's code in a sandboxed child process and collect its raw answers.

The parent side of the protocol in :mod:`attention_course.grading._driver`. A
:class:`ForkServer` is one trusted process that has imported torch; :func:`run_child`
asks it for a fresh child per submission (or starts a server of its own for one child).
The child runs in new namespaces, in a root file system of its own that holds only the
Python runtime, the installed packages and a small scratch folder, without privileges,
under limits on CPU time, data size and file size; this side enforces wall-clock time
and the **memory the submission holds** (all its processes together: their proportional
share of anonymous and shared memory, so that pages shared after a fork count once, and
the bytes parked in their sockets and pipes), watched by a thread of its own, and drains
its stdout and stderr into a capped buffer. Every record the child sends is decoded as
plain data (:mod:`attention_course.grading.wire`: a JSON header and raw tensor bytes; no
pickle, no ``torch.load``, so no record can run code whatever torch is installed), with
a size cap, and checked to be plain data. Afterwards every process of the child is
killed: its process group and, through the PID namespace, everything it started; without
namespaces, any process still carrying the child's random environment token.
"""

from __future__ import annotations

import glob
import io
import itertools
import json
import os
import pwd
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attention_course.grading import wire
from attention_course.grading._driver import HEADER
from attention_course.grading.compare import NotPlainData, validate_plain
from attention_course.grading.text import safe_text
from attention_course.i18n import ENV, language

DRIVER = str(Path(__file__).with_name("_driver.py"))
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
TOKEN_VAR = "ATTENTION_COURSE_SANDBOX"
MAX_RECORD = 64 << 20
MAX_CHANNEL = 256 << 20
ERROR_STATUSES = ("not_implemented", "missing", "error")
MEMORY_POLL = 0.1
SERVER_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "MPLBACKEND": "Agg",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MALLOC_ARENA_MAX": "2",
    "LANG": "C.UTF-8",
}


class GraderError(RuntimeError):
    """The grader itself failed (not the submission): e.g. the child could not start."""


@dataclass(frozen=True)
class Limits:
    """Limits for one submission.

    - ``timeout``: wall-clock seconds for running the notebook and answering all questions
      (children together; starting the child is not counted).
    - ``memory_mb``: memory the submission may use beyond what Python and torch hold when
      it starts: the resident memory of all its processes together, and the writable data
      of each.
    - ``scratch_mb``: size of its private scratch folder (``/tmp``, also ``$HOME``).
    - ``output_kb``: captured stdout+stderr kept; ``file_mb``: largest file it may write;
      ``max_processes``: tasks of the sandbox user (root only).
    - ``device``: ``"cpu"`` hides any GPU from the submission, ``"cuda"`` lets it use them.
    - ``fresh_process``: start a new Python for every child instead of forking it from the
      batch's server (slower; for comparison).
    """

    timeout: float = 60.0
    memory_mb: int = 2048
    scratch_mb: int = 64
    output_kb: int = 64
    file_mb: int = 64
    max_processes: int = 256
    startup_timeout: float = 120.0
    namespaces: bool = True
    question_timeout: float | None = None  # caps every question's own time_limit
    device: str = "cpu"
    fresh_process: bool = False

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
    environment_error: str | None = None
    cells_done: bool = False
    current_cell: int | None = None
    current_question: str | None = None
    end: str = ""  # done | timeout | exited | violation | memory
    exit_status: int | None = None
    elapsed: float = 0.0
    peak_memory: int = 0
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
    """Read a process's stdout+stderr, keeping only the first ``limit`` bytes."""

    def __init__(self, fd: int, limit: int) -> None:
        super().__init__(daemon=True)
        self.fd, self.limit = fd, limit
        self.kept = bytearray()
        self.total = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if not ready:
                continue
            chunk = os.read(self.fd, 65536)
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


class Child:
    """A child of the fork server, seen from here: its pid and, once it ended, its status."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.pid: int | None = None
        self.status: int | None = None
        self.spawned = threading.Event()
        self.exited = threading.Event()

    def poll(self) -> int | None:
        return self.status if self.exited.is_set() else None


class ForkServer:
    """One trusted process that has imported torch and forks a fresh child per submission.

    Start it once per batch, from a thread that outlives the batch (the server dies with
    that thread); :meth:`spawn` is safe to call from several threads.
    """

    def __init__(self, startup_timeout: float = 120.0) -> None:
        self.startup_timeout = startup_timeout
        self.children: dict[int, Child] = {}
        self.numbers = itertools.count(1)
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.package_dir: str | None = None
        self.alive = False

    def __enter__(self) -> ForkServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        out_read, out_write = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-B", DRIVER, str(theirs.fileno())],
                stdin=subprocess.DEVNULL, stdout=out_write, stderr=out_write,
                pass_fds=(theirs.fileno(),), env=SERVER_ENV, start_new_session=True,
            )
        except OSError as error:
            ours.close()
            raise GraderError(f"could not start the grading server: {error}") from error
        finally:
            theirs.close()
            os.close(out_write)
        self.sock = ours
        drain = _Drain(out_read, 16 << 10)
        drain.start()
        ours.settimeout(self.startup_timeout)
        try:
            hello = json.loads(ours.recv(65536) or b"{}")
        except (OSError, ValueError):
            hello = {}
        ours.settimeout(None)
        if hello.get("op") != "ready":
            self.close()
            drain.join(timeout=2)
            raise GraderError("the grading server did not start (Python and torch could not "
                              "be loaded); its output:\n" + drain.text()[-3000:])
        self.package_dir, self.alive = hello.get("package_dir"), True
        threading.Thread(target=self._listen, daemon=True).start()

    def _listen(self) -> None:
        assert self.sock is not None
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            message = json.loads(data)
            child = self.children.get(message.get("id"))
            if child is None:
                continue
            if message["op"] == "spawned":
                child.pid = message["pid"]
                child.spawned.set()
            elif message["op"] == "exit":
                child.status = message["status"]
                self.children.pop(child.number, None)
                child.exited.set()
        self.alive = False
        for child in list(self.children.values()):
            child.spawned.set()
            child.exited.set()

    def spawn(self, job_fd: int, record_fd: int, output_fd: int) -> Child:
        """Fork a child that reads its job from ``job_fd``, sends records to ``record_fd``
        and writes its output to ``output_fd``."""
        if not self.alive or self.sock is None:
            raise GraderError("the grading server is not running")
        with self.lock:
            child = Child(next(self.numbers))
            self.children[child.number] = child
            request = {"op": "spawn", "id": child.number, "package_root": PACKAGE_ROOT}
            try:
                socket.send_fds(self.sock, [json.dumps(request).encode()],
                                [job_fd, record_fd, output_fd])
            except OSError as error:
                raise GraderError(f"the grading server is gone: {error}") from error
        child.spawned.wait(30)
        if child.pid is None:
            raise GraderError("the grading server did not start a child")
        return child

    def close(self) -> None:
        """Stop the server (its children are killed with it) and wait for it to exit."""
        self.alive = False
        if self.sock is not None:
            try:  # wakes the listening thread and tells the server: no more work
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.sock.close()
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


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


def _children_of(pid: int) -> list[int]:
    """The direct children of ``pid`` (from ``/proc/PID/task/*/children``)."""
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return found


def _process_memory(pid: int) -> int:
    """Anonymous and shared memory of one process, its proportional share (PSS) of pages
    it shares with others (0 when it is gone): a page shared by a process and the
    workers it forked counts once over all of them."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            rollup = f.read()
    except OSError:
        rollup = ""
    fields = {"Pss_Anon:": 0, "Pss_Shmem:": 0}
    for line in rollup.splitlines():
        name, _, rest = line.partition(" ")
        if name in fields:
            fields[name] = int(rest.split()[0]) << 10
    if "Pss_Anon:" in rollup:
        return sum(fields.values())
    try:  # an older kernel: resident anonymous and shared memory
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
    except OSError:
        return 0
    total = 0
    for line in status.splitlines():
        if line.startswith(("RssAnon:", "RssShmem:")):
            total += int(line.split()[1]) << 10
    return total


_PIDFD_OPEN, _PIDFD_GETFD = 434, 438  # the same number on every Linux architecture
_SIOCOUTQ, _FIONREAD = 0x5411, 0x541B


def _queued_bytes(pids: list[int]) -> int | None:
    """Bytes parked in the sockets (sent, not yet read) and pipes the processes hold, each
    socket and pipe counted once; ``None`` where this machine does not let us look (no
    ``pidfd_getfd``, or not allowed to look into the processes)."""
    import ctypes
    import fcntl
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    seen: set[str] = set()
    total = 0
    for pid in pids:
        try:
            entries = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        pidfd = -1
        try:
            for entry in entries[:4096]:
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{entry}")
                except OSError:
                    continue
                if not target.startswith(("socket:", "pipe:")) or target in seen:
                    continue
                seen.add(target)
                if pidfd < 0:
                    pidfd = libc.syscall(_PIDFD_OPEN, pid, 0)
                    if pidfd < 0:
                        return None
                fd = libc.syscall(_PIDFD_GETFD, pidfd, int(entry), 0)
                if fd < 0:
                    if ctypes.get_errno() in (1, 38):  # EPERM, ENOSYS: we cannot look
                        return None
                    continue  # closed meanwhile
                try:
                    request = _SIOCOUTQ if target.startswith("socket:") else _FIONREAD
                    out = fcntl.ioctl(fd, request, struct.pack("i", 0))
                    total += max(0, struct.unpack("i", out)[0])
                except OSError:
                    pass  # a socket that keeps no count (a listening one)
                finally:
                    os.close(fd)
        finally:
            if pidfd >= 0:
                os.close(pidfd)
    return total


def _tree(pid: int, include_root: bool) -> list[int]:
    """The processes below ``pid`` (and ``pid`` itself if asked)."""
    found = [pid] if include_root else []
    stack, seen = _children_of(pid), {pid}
    while stack:
        child = stack.pop()
        if child in seen:
            continue
        seen.add(child)
        found.append(child)
        stack += _children_of(child)
    return found


def tree_memory(pid: int, include_root: bool) -> tuple[int, bool]:
    """The memory the processes below ``pid`` (and ``pid`` if asked) hold together: their
    PSS plus what their sockets and pipes hold; and whether the buffers could be
    counted."""
    pids = _tree(pid, include_root)
    queued = _queued_bytes(pids)
    return sum(_process_memory(p) for p in pids) + (queued or 0), queued is not None


class _MemoryWatch(threading.Thread):
    """Watch what a child holds, every ``MEMORY_POLL`` seconds, from the moment it is
    ready (its baseline: Python and torch), whatever else this process is doing (decoding
    a record included); past ``limit`` bytes beyond the baseline it kills the child."""

    def __init__(self, child: Child, session: _Session, limit: int, token: str) -> None:
        super().__init__(daemon=True)
        self.child, self.session, self.limit, self.token = child, session, limit, token
        self.stopped = threading.Event()
        self.over = False
        self.buffers_counted = True

    def run(self) -> None:
        baseline: int | None = None
        attempt = self.session.attempt
        while not self.stopped.wait(MEMORY_POLL if baseline is not None else 0.02):
            if self.child.poll() is not None:
                return
            if not attempt.ready or self.child.pid is None:
                continue
            guarded = bool(attempt.isolation.get("pid_namespace"))
            used, counted = tree_memory(self.child.pid, include_root=not guarded)
            self.buffers_counted = self.buffers_counted and counted
            baseline = used if baseline is None else baseline
            attempt.peak_memory = max(attempt.peak_memory, used - baseline)
            if used - baseline > self.limit:
                self.over = True
                _kill_everything(self.child, self.token)
                return


def _kill_everything(child: Child, token: str) -> None:
    """Leave no process of the child behind.

    Killing the child (the guard of its PID namespace) ends everything in the namespace;
    its process group and the environment token catch the rest where there is none. A
    pid is signalled only while the server has not reported it gone (so never a reused
    one); a process group's number stays reserved while any member lives.
    """
    for _ in range(5):
        if child.pid is not None:
            targets = [(os.killpg, child.pid)]
            if not child.exited.is_set():
                targets.append((os.kill, child.pid))
            for kill, target in targets:
                try:
                    kill(target, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        stragglers = _pids_with_token(token) if os.path.isdir("/proc") else []
        for pid in stragglers:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        child.exited.wait(1)
        if child.exited.is_set() and not stragglers:
            break
        time.sleep(0.05)


def _job_bytes(config: dict, payload: dict) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(payload, buffer)
    header = json.dumps(config).encode()
    return HEADER.pack(len(header)) + header + buffer.getvalue()


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
        try:  # plain data only, in time and memory linear in the record's size
            event = wire.decode(record)
        except wire.WireError as error:
            claimed = wire.peek(record)  # an answer too big or malformed: say so
            qid = claimed.get("id")
            if (claimed.get("nonce") == self.nonce and claimed.get("event") == "q_result"
                    and self.attempt.ready and qid in self.pending - set(self.attempt.answers)):
                self.attempt.answers[qid] = ("error", "error", f"returned {error}")
                if self.attempt.current_question == qid:
                    self.attempt.current_question = None
                self.deadline = self.overall_deadline()
            return  # not ours, or not plain data: ignored
        if type(event) is not dict or event.get("nonce") != self.nonce:
            return
        for key in ("error", "message"):  # the random folder name would vary between runs
            if type(event.get(key)) is str:  # and no escape sequence reaches a terminal
                event[key] = safe_text(event[key].replace(self.workdir, "<workdir>"),
                                       newlines=False)
        kind, now, a = event.get("event"), time.monotonic(), self.attempt
        if kind == "environment_error" and not a.ready:
            a.environment_error = str(event.get("message"))[:1000]
            self.done = True
        elif kind == "ready" and not a.ready:
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


def gpu_devices() -> list[str]:
    """The device files a CUDA program opens (NVIDIA's), to show the child when grading on GPU."""
    return sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/dri/*"))


def run_child(
    cells: list[str],
    questions: list[dict],
    time_limits: dict[str, float],
    limits: Limits,
    budget: float,
    forbidden: tuple[str, ...] = (),
    server: ForkServer | None = None,
) -> Attempt:
    """Run the notebook's code cells and the questions' calls in one sandboxed child.

    ``questions`` are call specs (``Prepared.call_spec()``); ``budget`` is the wall-clock
    time allowed after the child is ready; ``server`` is the batch's fork server (without
    one, or with ``limits.fresh_process``, a server is started for this child alone).
    Raises :class:`GraderError` when the child cannot start or the sandbox cannot run a
    notebook, which is never the submission's fault: no submission code runs before.
    """
    if server is None or limits.fresh_process:
        with ForkServer(limits.startup_timeout) as own:
            return _run_child(cells, questions, time_limits, limits, budget, forbidden, own)
    return _run_child(cells, questions, time_limits, limits, budget, forbidden, server)


def _run_child(cells: list[str], questions: list[dict], time_limits: dict[str, float],
               limits: Limits, budget: float, forbidden: tuple[str, ...],
               server: ForkServer) -> Attempt:
    nonce, token = secrets.token_hex(16), secrets.token_hex(16)
    uid, gid = _sandbox_ids()
    base = tempfile.mkdtemp(prefix="attention-grade-")
    os.chmod(base, 0o711)
    work, root_dir = os.path.join(base, "work"), os.path.join(base, "root")
    os.mkdir(work, 0o700)
    os.mkdir(root_dir, 0o700)
    if uid is not None:
        os.chown(work, uid, gid)
    gpu = limits.device == "cuda"
    config = {
        "nonce": nonce,
        "workdir": work,
        "root_dir": root_dir,
        "uid": uid,
        "gid": gid,
        "namespaces": limits.namespaces,
        "data_bytes": None if gpu else limits.memory_mb << 20,
        "scratch_bytes": limits.scratch_mb << 20,
        "cpu_seconds": int(budget + 30),
        "file_bytes": limits.file_mb << 20,
        "max_processes": limits.max_processes,
        "forbidden": list(forbidden),
        "package_root": PACKAGE_ROOT,
        "devices": gpu_devices() if gpu else [],
        "device": limits.device,
        "env": {
            TOKEN_VAR: token,
            "ATTENTION_COURSE_DEVICE": "cuda" if gpu else "cpu",
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "") if gpu else "",
            # the submission's own messages (a forbidden import, ...) in the grader's language
            ENV: language(),
        },
    }
    job = _job_bytes(config, {"cells": cells, "questions": questions})
    pipes = [os.pipe() for _ in range(3)]  # job, records, output
    (job_read, job_write), (record_read, record_write), (out_read, out_write) = pipes
    session = _Session(nonce, questions, limits, budget, time_limits, work)
    child: Child | None = None
    drain = _Drain(out_read, limits.output_kb << 10)
    try:
        child = server.spawn(job_read, record_write, out_write)
    finally:
        for fd in (job_read, record_write, out_write):
            os.close(fd)
        if child is None:
            for fd in (job_write, record_read, out_read):
                os.close(fd)
            shutil.rmtree(base, ignore_errors=True)
    drain.start()
    attempt = session.attempt
    watch = _MemoryWatch(child, session, limits.memory_mb << 20, token)
    try:
        threading.Thread(target=_feed, args=(job_write, job), daemon=True).start()
        watch.start()
        attempt.end = _pump(record_read, child, session, watch)
    finally:
        watch.stopped.set()
        _kill_everything(child, token)
        watch.join(timeout=5)
        drain.stopped.set()
        drain.join(timeout=2)
        os.close(record_read)
        os.close(out_read)
        shutil.rmtree(base, ignore_errors=True)
    if watch.over:  # killed for its memory, whatever the channel said meanwhile
        attempt.end = "memory"
    attempt.isolation["memory_buffers_counted"] = watch.buffers_counted
    attempt.output = drain.text().replace(work, "<workdir>")
    status = child.status
    attempt.exit_status = 128 - status if status is not None and status < 0 else status
    attempt.elapsed = time.monotonic() - (session.ready_at or session.started)
    if attempt.environment_error:
        raise GraderError(f"the grading sandbox cannot run notebooks: "
                          f"{attempt.environment_error}")
    if not attempt.ready:
        raise GraderError(
            "the grading child did not start (no submission code had run yet); its output:\n"
            + attempt.output[-3000:]
        )
    return attempt


def _feed(fd: int, job: bytes) -> None:
    """Write the job into the child's stdin (in a thread: a stuck child cannot block us)."""
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(job)
    except (BrokenPipeError, OSError, ValueError):
        pass


def _pump(read_fd: int, child: Child, session: _Session, watch: _MemoryWatch) -> str:
    """Read records until the child is done, exits, overruns, misbehaves or uses too much
    memory (which ``watch`` finds, in a thread of its own)."""
    exited_at: float | None = None
    while True:
        now = time.monotonic()
        if watch.over:
            return "memory"
        if now >= session.deadline:
            return "timeout"
        if exited_at is None and child.poll() is not None:
            exited_at = now
        wait = 0.05 if exited_at is not None else min(session.deadline - now, MEMORY_POLL)
        ready, _, _ = select.select([read_fd], [], [], max(wait, 0.0))
        if ready:
            chunk = os.read(read_fd, 1 << 20)
            if chunk:
                if not session.feed(chunk):
                    return "violation"
                if watch.over:
                    return "memory"
                if session.done:
                    return "done"
                if time.monotonic() >= session.deadline:  # decoding counts too
                    return "timeout"
                continue
            if exited_at is None:  # the channel was closed but the child lives on
                time.sleep(0.05)
                continue
        if exited_at is not None:
            return "memory" if watch.over else "exited"
