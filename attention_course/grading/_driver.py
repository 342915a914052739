"""The trusted driver of the grading child process, and the one calling procedure.

The grader's parent runs this file as a script (``python -I -B _driver.py FD``) in a fresh
process group. It reads its whole job from stdin before any submission code runs: a JSON
header (sandbox settings, the nonce) and a ``torch.save`` payload (the notebook's code
cells, the questions' call specs and their inputs). Then it moves into new network and
PID namespaces (the PID namespace dies with its first process, so nothing the submission
starts can outlive it): directly as root, inside a new user namespace as a normal user
where the kernel allows that. It sets resource limits, drops to ``nobody`` when root,
executes the notebook's code cells and calls the learner's code on
each case. Every event goes to the parent through the pipe ``FD`` as a length-prefixed
``torch.save`` record of plain data.

The submission runs in this same process and could tamper with anything here: that is
fine, because the parent trusts nothing it receives. It loads every record with
``weights_only=True``, accepts only plain tensors and numbers, and compares them with
answers it computed itself. This file imports only the standard library and torch, and
never the question specs, so the child process holds no reference answers.
"""

from __future__ import annotations

import builtins
import ctypes
import io
import json
import os
import re
import signal
import struct
import sys
import types

HEADER = struct.Struct("!I")
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
MOUNT_FLAGS = {"nosuid": 2, "nodev": 4, "noexec": 8, "noatime": 1024, "nodiratime": 2048,
               "relatime": 1 << 21}
PR_SET_PDEATHSIG = 1
MAX_MESSAGE = 500


# --------------------------------------------------------------------------- calling
def clone_inputs(value):
    """A fresh copy of plain inputs, so one call cannot change the next call's inputs."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(clone_inputs(v) for v in value)
    if isinstance(value, dict):
        return {k: clone_inputs(v) for k, v in value.items()}
    return value


def _load_param(obj, name: str, value) -> None:
    import torch

    try:
        target = obj.get_parameter(name)
    except AttributeError:
        try:
            target = obj.get_buffer(name)
        except AttributeError:
            raise AttributeError(
                f"{type(obj).__name__} has no parameter or buffer named {name!r}"
            ) from None
    if tuple(target.shape) != tuple(value.shape):
        raise ValueError(
            f"parameter {name!r} of {type(obj).__name__} has shape {tuple(target.shape)}, "
            f"but the exercise asks for shape {tuple(value.shape)}"
        )
    with torch.no_grad():
        target.copy_(value)


def call_case(target, kind: str, method: str, case: dict):
    """Call ``target`` (a function, or a class for ``kind == "module"``) on one case."""
    case = clone_inputs(case)
    if kind == "function":
        return target(*case["args"], **case["kwargs"])
    obj = target(*case["init_args"], **case["init_kwargs"])
    for name, value in case["params"].items():
        _load_param(obj, name, value)
    fn = obj if method == "forward" else getattr(obj, method)
    return fn(*case["args"], **case["kwargs"])


def to_plain(value, depth: int = 0):
    """The learner's output as plain data: detached CPU tensors, numbers, containers."""
    import torch

    if depth > 8:
        raise TypeError("the output is nested more than 8 levels deep")
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu").as_subclass(torch.Tensor).contiguous().clone()
    if value is None or isinstance(value, (bool, int, float, str)):
        return type(value)(value) if value is not None else None
    if isinstance(value, (list, tuple)):
        return [to_plain(v, depth + 1) for v in value] if isinstance(value, list) else tuple(
            to_plain(v, depth + 1) for v in value
        )
    if isinstance(value, dict):
        return {str(k): to_plain(v, depth + 1) for k, v in value.items()}
    if hasattr(value, "item") and hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0:
        return value.item()  # a numpy scalar
    if type(value).__module__ == "numpy" and hasattr(value, "shape"):
        return torch.from_numpy(value.copy())
    raise TypeError(
        f"returned a {type(value).__name__}; return tensors or numbers "
        f"(or tuples/lists/dicts of them)"
    )


def describe_error(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip().rstrip(":")
    text = re.sub(r"0x[0-9a-fA-F]{6,}", "0x...", text)
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


# --------------------------------------------------------------------------- sandbox
def _unshare(flags: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.unshare(flags) == 0
    except (OSError, AttributeError):
        return False


def _map_self(uid: int, gid: int) -> bool:
    """Enter a new user namespace in which this process keeps its own uid and gid."""
    if not _unshare(CLONE_NEWUSER):
        return False
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                           ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    except OSError:
        return False
    return True


def _enter_user_namespace() -> bool:
    """As a normal user: a user namespace, so that network and PID namespaces are allowed.

    Probed in a throwaway child first, because a half-made user namespace cannot be left.
    """
    uid, gid = os.getuid(), os.getgid()
    probe = os.fork()
    if probe == 0:
        os._exit(0 if _map_self(uid, gid) else 1)
    _, status = os.waitpid(probe, 0)
    return status == 0 and _map_self(uid, gid)


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _guard(pid: int) -> None:
    """The outer process: wait for the namespace's first process; SIGTERM kills it."""

    def stop(signum, frame):
        os.kill(pid, signal.SIGKILL)

    signal.signal(signal.SIGTERM, stop)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            os._exit(1)
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _reachable(path: str) -> bool:
    """Whether every directory on the way to ``path`` lets others traverse it."""
    import stat

    parts = os.path.abspath(path).split(os.sep)
    for i in range(2, len(parts) + 1):
        prefix = os.sep.join(parts[:i]) or os.sep
        try:
            if not os.stat(prefix).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


def _private_mounts(libc) -> bool:
    """A mount namespace of our own, whose changes do not propagate back."""
    return (
        libc.unshare(CLONE_NEWNS) == 0
        and libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0
    )


def _unescape(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def _read_only_files(libc, writable: str) -> bool:
    """Remount every file system read-only, except ``writable`` (bound onto itself).

    ``/proc``, ``/sys`` and ``/dev`` (but not ``/dev/shm``) are left alone. Flags the
    kernel locks (nosuid, nodev, noexec, atime) are kept, as a user namespace requires.
    """
    if libc.mount(writable.encode(), writable.encode(), None, MS_BIND | MS_REC, None) != 0:
        return False
    skip = ("/proc", "/sys", "/dev")
    ok = True
    with open("/proc/self/mountinfo") as f:
        lines = f.read().splitlines()
    for line in lines:
        fields = line.split()
        point, options = _unescape(fields[4]), fields[5].split(",")
        if point == writable or point.startswith(writable + "/"):
            continue
        if any(point == s or point.startswith(s + "/") for s in skip) and not point.startswith(
            "/dev/shm"
        ):
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for option in options:
            flags |= MOUNT_FLAGS.get(option, 0)
        if libc.mount(None, point.encode(), None, flags, None) != 0:
            ok = False
    return ok


def _expose_python(libc) -> bool:
    """In a private mount namespace, make the interpreter readable for the sandbox user.

    Python may live under a directory only root can enter (``/root/.pyenv``). Each such
    directory is covered with an empty tmpfs, and only the paths the child needs (the
    interpreter, its libraries, the package) are bound back into it; the rest stays hidden.
    """
    needed = {os.path.realpath(p) for p in (*sys.path, sys.prefix, sys.base_prefix) if p}
    needed.add(os.path.dirname(os.path.realpath(sys.executable)))
    needed = {p for p in needed if os.path.isdir(p)}
    needed = sorted(p for p in needed if not any(p.startswith(q + os.sep) for q in needed))
    blocked: dict[str, list[str]] = {}
    for path in needed:
        if _reachable(path):
            continue
        parts = path.split(os.sep)
        for i in range(2, len(parts) + 1):
            prefix = os.sep.join(parts[:i])
            if not _reachable(prefix):
                blocked.setdefault(prefix, []).append(path)
                break
    for top, paths in blocked.items():
        fds = {p: os.open(p, os.O_PATH) for p in paths}
        if libc.mount(b"tmpfs", top.encode(), b"tmpfs", 0, b"mode=0755") != 0:
            return False
        for p, fd in fds.items():
            os.makedirs(p, mode=0o755, exist_ok=True)
            source = f"/proc/self/fd/{fd}".encode()
            if libc.mount(source, p.encode(), None, MS_BIND | MS_REC, None) != 0:
                return False
            os.close(fd)
    return True


def _limit(which: int, value: int | None) -> None:
    import resource  # POSIX only: keep the module importable on Windows for check()

    if value is None:
        return
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value if which != resource.RLIMIT_CPU else value + 5))


def enter_sandbox(config: dict, fd: int) -> dict:
    """Namespaces, limits and the unprivileged user; returns what is in force."""
    import resource

    facts = {"network_namespace": False, "pid_namespace": False, "user": None}
    root = os.geteuid() == 0
    if config.get("namespaces") and not root:
        facts["user_namespace"] = _enter_user_namespace()
    if config.get("namespaces") and (root or facts.get("user_namespace")):
        facts["network_namespace"] = _unshare(CLONE_NEWNET)
        if _unshare(CLONE_NEWPID):
            pid = os.fork()
            if pid:
                os.close(fd)
                _guard(pid)
            facts["pid_namespace"] = True
    _limit(resource.RLIMIT_AS, config.get("memory_bytes"))
    _limit(resource.RLIMIT_CPU, config.get("cpu_seconds"))
    _limit(resource.RLIMIT_FSIZE, config.get("file_bytes"))
    _limit(resource.RLIMIT_CORE, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    mounts = facts["pid_namespace"] and _private_mounts(libc)
    uid, gid = config.get("uid"), config.get("gid")
    dropping = uid is not None and os.geteuid() == 0
    exposed = True
    if dropping:
        mounts = mounts or _private_mounts(libc)
        exposed = bool(mounts) and _expose_python(libc)
    facts["mount_namespace"] = bool(mounts) and exposed
    if facts["pid_namespace"] and mounts:
        facts["read_only_files"] = _read_only_files(libc, config["workdir"])
    if dropping:
        _limit(resource.RLIMIT_NPROC, config.get("max_processes"))
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
        if os.geteuid() != uid or os.getuid() != uid:
            raise RuntimeError("could not drop privileges")
        facts["user"] = uid
    if facts["pid_namespace"]:
        _die_with_parent()  # after setuid, which clears it
    os.chdir(config["workdir"])
    if not facts["network_namespace"]:
        _block_sockets()
    return facts


def _block_sockets() -> None:
    import socket

    class NoNetwork(socket.socket):
        def __init__(self, *args, **kwargs):
            raise PermissionError("the network is disabled while grading")

    socket.socket = NoNetwork  # type: ignore[misc]


def _stub_grading_package(forbidden: list[str]) -> None:
    """``from attention_course.grading import check`` works; the specs stay out of reach."""
    stub = types.ModuleType("attention_course.grading")
    stub.__path__ = []  # a package with no submodules

    def check(*args, **kwargs):
        print("(check skipped: this notebook is being graded)")

    stub.check = check
    sys.modules["attention_course.grading"] = stub

    class Forbidden:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name in forbidden or any(name.startswith(f + ".") for f in forbidden):
                raise ImportError(
                    f"{name} is not available while this exercise is graded: "
                    f"write the code yourself"
                )
            return None

    sys.meta_path.insert(0, Forbidden)


_MAGIC = re.compile(r"^([ \t]*)[%!].*$", re.MULTILINE)


def strip_magics(source: str) -> str:
    """IPython magics and shell escapes become no-ops; cell magics skip the cell."""
    if source.lstrip().startswith("%%"):
        return ""
    return _MAGIC.sub(lambda m: f"{m.group(1)}pass", source)


# --------------------------------------------------------------------------- main
class Channel:
    def __init__(self, fd: int, nonce: str) -> None:
        self.fd, self.nonce = fd, nonce

    def send(self, event: str, **fields) -> None:
        import torch

        buffer = io.BytesIO()
        torch.save({"nonce": self.nonce, "event": event, **fields}, buffer)
        data = buffer.getvalue()
        view = memoryview(HEADER.pack(len(data)) + data)
        while view:
            view = view[os.write(self.fd, view):]


def _read_job() -> tuple[dict, bytes]:
    raw = sys.stdin.buffer.read()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    (size,) = HEADER.unpack(raw[: HEADER.size])
    config = json.loads(raw[HEADER.size : HEADER.size + size].decode())
    return config, raw[HEADER.size + size :]


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    fd = int(sys.argv[1])
    config, payload_bytes = _read_job()
    facts = enter_sandbox(config, fd)
    if config.get("package_root") and config["package_root"] not in sys.path:
        sys.path.append(config["package_root"])

    import torch

    torch.set_num_threads(1)
    payload = torch.load(io.BytesIO(payload_bytes), weights_only=True)
    del payload_bytes
    channel = Channel(fd, config["nonce"])
    channel.send("ready", isolation=facts)
    _stub_grading_package(list(config.get("forbidden", [])))
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    for index, source in enumerate(payload["cells"]):
        channel.send("cell_start", index=index)
        try:
            exec(compile(strip_magics(source), f"<cell {index + 1}>", "exec"), namespace)
        except BaseException as error:  # noqa: B036 - a cell may raise SystemExit; go on
            channel.send("cell_error", index=index, error=describe_error(error))
    channel.send("cells_done")
    for question in payload["questions"]:
        qid = question["id"]
        channel.send("q_start", id=qid)
        target = namespace.get(question["symbol"])
        if target is None:
            channel.send("q_error", id=qid, status="missing", message="")
            continue
        try:
            outputs = [
                to_plain(call_case(target, question["kind"], question["method"], case))
                for case in question["cases"]
            ]
        except NotImplementedError:
            channel.send("q_error", id=qid, status="not_implemented", message="")
            continue
        except BaseException as error:  # noqa: B036 - sys.exit in the learner's code too
            channel.send("q_error", id=qid, status="error", message=describe_error(error))
            continue
        channel.send("q_result", id=qid, outputs=outputs)
    channel.send("done")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
