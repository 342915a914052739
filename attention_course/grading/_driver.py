"""The trusted side of the grading child: a fork server, the sandbox, and the one calling procedure.

The grader's parent starts this file as a script (``python -I -B _driver.py FD``): the
**fork server**. It imports torch once (starting Python and torch is most of the cost of
a fresh process, about 3 s) and then waits on the control socket ``FD``. For every
submission the parent sends three file descriptors (the job to read, the channel for
records, the output) and the server forks a fresh **child** for it. The server never runs
submission code and never reads a job; each child runs exactly one submission and is
never reused.

The child reads its whole job from stdin before any submission code runs: a JSON header
(sandbox settings, the nonce) and a ``torch.save`` payload written by the trusted parent
(the notebook's code cells, the questions' call specs and their inputs). Then it enters
the sandbox (:func:`enter_sandbox`):
new network, IPC, mount and PID namespaces (directly as root, inside a new user namespace
as a normal user where the kernel allows that), a **new root file system** that holds only
what running a notebook needs (the Python runtime and installed packages, the course's
package without its exercise specifications, a small size-limited scratch folder), limits,
and no privileges (the user ``nobody`` when root, no capabilities otherwise). It executes
the notebook's code cells and calls the learner's code on each case. Every event goes to
the parent through file descriptor 3 as a length-prefixed record of plain data
(:mod:`attention_course.grading.wire`: a JSON header and raw tensor bytes).

The submission runs in the child process and could tamper with anything in it: that is
fine, because the parent trusts nothing it receives. It decodes every record as plain
data (never with pickle or ``torch.load``), accepts only plain tensors and numbers, and
compares them with answers it computed itself. This file imports only the standard
library, torch and the package's messages, never the question specs, so no process of the
sandbox holds reference answers.
"""

from __future__ import annotations

import builtins
import ctypes
import io
import json
import os
import platform
import re
import signal
import struct
import sys
import traceback
import types

from attention_course.i18n import _

HEADER = struct.Struct("!I")
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 4096, 8192, 16384, 1 << 18
MOUNT_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": 1024,
               "nodiratime": 2048, "relatime": 1 << 21}
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SYS_PIVOT_ROOT = {"x86_64": 155, "amd64": 155, "aarch64": 41, "arm64": 41, "riscv64": 41,
                  "ppc64le": 203, "ppc64": 203, "s390x": 217, "i686": 217, "armv7l": 218}
MAX_MESSAGE = 500
RECORD_FD = 3
# What a notebook needs from the system besides Python: libraries, configuration, CPU facts.
SYSTEM_PATHS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
                "/sys/devices/system/cpu")
DEVICES = ("null", "zero", "full", "random", "urandom")
SCRATCH = "/tmp"
SHM_BYTES = 16 << 20


# --------------------------------------------------------------------------- calling
def clone_inputs(value, device: str | None = None):
    """A fresh copy of plain inputs (on ``device`` if given), so one call cannot change
    the next call's inputs."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.clone() if device is None else value.to(device, copy=True)
    if isinstance(value, (list, tuple)):
        return type(value)(clone_inputs(v, device) for v in value)
    if isinstance(value, dict):
        return {k: clone_inputs(v, device) for k, v in value.items()}
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
                _("{cls} has no parameter or buffer named {name}").format(
                    cls=type(obj).__name__, name=repr(name))
            ) from None
    if tuple(target.shape) != tuple(value.shape):
        raise ValueError(
            _("parameter {name} of {cls} has shape {shape}, but the exercise asks for shape "
              "{wanted}").format(name=repr(name), cls=type(obj).__name__,
                                 shape=tuple(target.shape), wanted=tuple(value.shape))
        )
    with torch.no_grad():
        target.copy_(value)


class NoGradient(RuntimeError):
    """The output of a question that asks for gradients does not carry them."""


def _float_leaves(value) -> list:
    import torch

    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _float_leaves(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _float_leaves(v)]
    return []


def _with_gradients(output, inputs: list) -> dict:
    """``{"output", "gradients"}``: the gradients of a fixed random projection of the
    (first) output with respect to every floating-point input."""
    import torch

    first = output[0] if isinstance(output, (tuple, list)) and output else output
    if not isinstance(first, torch.Tensor) or not first.requires_grad:
        raise NoGradient(_(
            "the output does not carry gradients back to the inputs: was a tensor turned "
            "into a Python number (.item(), float(...)), detached, computed under no_grad, "
            "or rebuilt from numbers?"))
    projection = torch.randn(first.shape, generator=torch.Generator().manual_seed(0),
                             dtype=torch.float64).to(first.device, first.dtype)
    grads = torch.autograd.grad((first * projection).sum(), inputs, allow_unused=True)
    return {"output": output,
            "gradients": [torch.zeros_like(x) if g is None else g
                          for g, x in zip(grads, inputs, strict=True)]}


def call_case(target, call: str, method: str, case: dict, device: str | None = None,
              grad: bool = False):
    """Call ``target`` (a function, or a class for ``call == "module"``) on one case; with
    ``device``, the inputs (and a module) are moved there first; with ``grad``, the
    floating-point inputs require gradients and the answer holds them (see
    :func:`_with_gradients`)."""
    case = clone_inputs(case, device)
    inputs = _float_leaves([case["args"], case["kwargs"]]) if grad else []
    for tensor in inputs:
        tensor.requires_grad_(True)
    if call == "function":
        output = target(*case["args"], **case["kwargs"])
    else:
        obj = target(*case["init_args"], **case["init_kwargs"])
        if device is not None and hasattr(obj, "to"):
            obj = obj.to(device)
        for name, value in case["params"].items():
            _load_param(obj, name, value)
        fn = obj if method == "forward" else getattr(obj, method)
        output = fn(*case["args"], **case["kwargs"])
    return _with_gradients(output, inputs) if grad else output


def to_plain(value, depth: int = 0):
    """The learner's output as plain data: detached CPU tensors, numbers, containers."""
    import torch

    if depth > 8:
        raise TypeError(_("the output is nested more than 8 levels deep"))
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
        _("returned a {type}; return tensors or numbers (or tuples/lists/dicts of them)"
          ).format(type=type(value).__name__)
    )


RAISED = "__raised__"  # a case whose call raised: {RAISED: "ValueError: ..."}


def call_all(target, question: dict, device: str | None = None) -> list:
    """``target``'s plain outputs on every case of a call spec. A case that raises gives
    ``{RAISED: description}`` and the others still run (so that feedback can name a
    mistake a working case shows); ``NotImplementedError`` anywhere propagates."""
    outputs = []
    for case in question["cases"]:
        try:
            outputs.append(to_plain(call_case(target, question["call"], question["method"],
                                              case, device, question.get("grad", False))))
        except NotImplementedError:
            raise
        except BaseException as error:  # noqa: B036 - sys.exit in the learner's code too
            outputs.append({RAISED: describe_error(error)})
    return outputs


def describe_error(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip().rstrip(":")
    text = re.sub(r"0x[0-9a-fA-F]{6,}", "0x...", text)
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


# --------------------------------------------------------------------------- sandbox
def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _unshare(flags: int) -> bool:
    try:
        return _libc().unshare(flags) == 0
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
    """As a normal user: a user namespace, so that the other namespaces are allowed.

    Probed in a throwaway child first, because a half-made user namespace cannot be left.
    """
    uid, gid = os.getuid(), os.getgid()
    probe = os.fork()
    if probe == 0:
        os._exit(0 if _map_self(uid, gid) else 1)
    _pid, status = os.waitpid(probe, 0)
    return status == 0 and _map_self(uid, gid)


def _die_with_parent() -> None:
    try:
        _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _guard(pid: int) -> None:
    """The outer process: wait for the namespace's first process; SIGTERM kills it."""

    def stop(signum, frame):
        os.kill(pid, signal.SIGKILL)

    signal.signal(signal.SIGTERM, stop)
    while True:
        try:
            _pid, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            os._exit(1)
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _mount(source: str | None, target: str, fstype: str | None = None, flags: int = 0,
           data: str | None = None) -> None:
    """``mount(2)``; raises OSError naming the target."""
    enc = (lambda s: None if s is None else s.encode())
    if _libc().mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {fstype or 'bind'} on {target}: {os.strerror(errno)}")


def _unescape(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def runtime_paths(package_dir: str | None) -> dict[str, str]:
    """What the child must see, as ``{path as Python names it: real path}``.

    The interpreter's prefixes and every existing entry of ``sys.path`` (the standard
    library, site-packages), plus the course's package folder when it lives outside them
    (an editable install or a source checkout: only the package folder, never the
    repository around it, which holds the reference solutions).
    """
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    named = [sys.prefix, sys.base_prefix, sys.exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable))]
    for entry in sys.path:
        real = os.path.realpath(entry) if entry else ""
        if real and os.path.exists(real) and any(
            real == p or real.startswith(p + os.sep) for p in prefixes
        ):
            named.append(entry)
    if package_dir:
        named.append(package_dir)
    paths = {}
    for path in named:
        path = os.path.abspath(path)
        if os.path.exists(path):
            paths[path] = os.path.realpath(path)
            paths[os.path.realpath(path)] = os.path.realpath(path)
    return paths


def _bind(new_root: str, path: str, source: str) -> None:
    """Bind ``source`` at ``path`` inside ``new_root`` (directories and plain files)."""
    target = new_root + path
    if os.path.isdir(source):
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        if not os.path.exists(target):
            with open(target, "w"):
                pass
    _mount(source, target, None, MS_BIND | MS_REC)


def _covered(path: str, bound: list[str]) -> bool:
    return any(path == b or path.startswith(b.rstrip("/") + "/") for b in bound)


def _read_only(new_root: str, keep_writable: tuple[str, ...],
               keep_writable_mounts: tuple[str, ...] = ()) -> bool:
    """Remount every mount under ``new_root`` read-only and nosuid, except the trees
    ``keep_writable`` and the mounts ``keep_writable_mounts`` themselves (not what is
    bound inside them: the runtime under a scratch ``/tmp`` stays read-only).

    Flags the kernel locks in a user namespace (nodev, noexec, atime) are kept.
    """
    ok = True
    with open("/proc/self/mountinfo") as f:
        lines = f.read().splitlines()
    for line in lines:
        fields = line.split()
        point, options = _unescape(fields[4]), fields[5].split(",")
        if not _covered(point, [new_root]):
            continue
        inside = point[len(new_root):] or "/"
        if any(inside == k or inside.startswith(k + "/") for k in keep_writable):
            continue
        if inside in keep_writable_mounts:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID
        for option in options:
            flags |= MOUNT_FLAGS.get(option, 0)
        try:
            _mount(None, point, None, flags)
        except OSError:
            ok = False
    return ok


def _pivot(new_root: str) -> None:
    """Make ``new_root`` the root of this mount namespace and drop the old one entirely."""
    os.chdir(new_root)
    number = SYS_PIVOT_ROOT.get(platform.machine())
    if number is not None and _libc().syscall(number, b".", b".") == 0:
        if _libc().umount2(b".", MNT_DETACH) != 0:
            raise OSError(ctypes.get_errno(), "could not detach the old root")
    else:  # an architecture without a known syscall number: move the mount onto / instead
        _mount(new_root, "/", None, MS_MOVE)
        os.chroot(".")
    os.chdir("/")


def build_root(config: dict, runtime: dict[str, str], package_dir: str | None) -> dict:
    """Mount the child's whole view of the file system on ``config["root_dir"]`` and enter it.

    A small tmpfs holds the skeleton; the system paths and the Python runtime are bound
    read-only (with no setuid); ``/dev`` gets only the harmless character devices; ``/proc``
    is a fresh one of the new PID namespace; ``/tmp`` (also ``$HOME``) is a private tmpfs
    of ``scratch_bytes``. The exercise specifications inside the package are covered by an
    empty folder. Returns facts about what is in force.
    """
    new_root = os.path.realpath(config["root_dir"])
    _mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=0755")
    # the scratch folder first: a checkout or a virtualenv may live under /tmp (any
    # `mktemp -d`), and its paths are bound inside the scratch tmpfs, read-only
    os.makedirs(new_root + SCRATCH, mode=0o755, exist_ok=True)
    _mount("tmpfs", new_root + SCRATCH, "tmpfs", MS_NOSUID | MS_NODEV,
           f"size={config['scratch_bytes']},mode=1777")
    system = SYSTEM_PATHS + (("/sys",) if config.get("devices") else ())
    wanted = {p: p for p in system if os.path.lexists(p)}
    wanted.update(runtime)
    bound: list[str] = []
    for path in sorted(wanted, key=lambda p: (p.count("/"), p)):
        if _covered(path, bound):
            continue
        source = wanted[path]
        if os.path.islink(path) and path in system:  # /bin -> usr/bin on merged /usr
            os.symlink(os.readlink(path), new_root + path)
            continue
        _bind(new_root, path, source)
        bound.append(path)
    os.makedirs(new_root + "/dev", mode=0o755)
    _mount("tmpfs", new_root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755")
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            _bind(new_root, f"/dev/{name}", f"/dev/{name}")
    for path in config.get("devices", []):  # a GPU's device files, when grading on one
        if os.path.exists(path):
            _bind(new_root, path, path)
    os.makedirs(new_root + "/dev/shm", mode=0o755, exist_ok=True)
    _mount("tmpfs", new_root + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
           f"size={SHM_BYTES},mode=1777")
    os.makedirs(new_root + "/proc", mode=0o755)
    try:
        _mount("proc", new_root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        proc = True
    except OSError:  # some containers forbid a new /proc: run without one
        proc = False
    if package_dir:
        specs = new_root + os.path.join(os.path.realpath(package_dir), "grading", "exercises")
        if os.path.isdir(specs):
            _mount("tmpfs", specs, "tmpfs", MS_NOSUID | MS_NODEV, "size=4k,mode=0755")
    read_only = _read_only(new_root, ("/dev", "/proc"), (SCRATCH,))
    _pivot(new_root)
    return {"file_system_hidden": True, "read_only_files": read_only, "proc": proc}


def _limit(which: int, value: int | None) -> None:
    import resource  # POSIX only: keep the module importable on Windows for check()

    if value is None:
        return
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value if which != resource.RLIMIT_CPU else value + 5))


def _vm_data() -> int:
    """Bytes of writable private memory this process holds (``VmData``), 0 if unknown."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) << 10
    except OSError:
        pass
    return 0


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _drop_capabilities() -> bool:
    """Give up every capability (those a user namespace grants too), for good."""
    libc = _libc()
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    return libc.capset(ctypes.byref(header), data) == 0


# Kernel keyrings and file locks outlive a process and reach past its namespaces: a key
# added to the user keyring of ``nobody`` is there for the next submission (minutes later,
# another batch), and a lock on a file every child can open (Python itself) is a signal
# between two submissions graded at once. A seccomp filter makes those calls fail.
_SECCOMP = {  # machine: (audit arch, fcntl, flock, add_key, request_key, keyctl)
    "x86_64": (0xC000003E, 72, 73, 248, 249, 250),
    "aarch64": (0xC00000B7, 25, 32, 217, 218, 219),
}
_LOCK_COMMANDS = (5, 6, 7, 36, 37, 38, 1024, 1025)  # F_GETLK..F_SETLKW, F_OFD_*, leases
_ENOLCK, _EPERM = 37, 1


def _install_filter() -> bool:
    """Refuse ``add_key``, ``request_key`` and ``keyctl`` (EPERM) and file locks and leases
    (``flock``, ``fcntl`` with a lock command: ENOLCK) for this process and everything it
    starts. Needs ``no_new_privs``; returns whether the filter is in force."""
    machine = platform.machine().lower().replace("amd64", "x86_64").replace("arm64",
                                                                            "aarch64")
    if machine not in _SECCOMP:
        return False
    arch, fcntl_nr, flock_nr, *key_calls = _SECCOMP[machine]
    ld, jeq, ret = 0x20, 0x15, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_RET|K
    allow, errno = 0x7FFF0000, 0x00050000
    code: list[tuple[int, int, int, int]] = [
        (ld, 0, 0, 4),  # seccomp_data.arch
        (jeq, 1, 0, arch),
        (ret, 0, 0, allow),  # another ABI: not ours to judge
        (ld, 0, 0, 0),  # seccomp_data.nr
    ]
    for nr in key_calls:
        code += [(jeq, 0, 1, nr), (ret, 0, 0, errno | _EPERM)]
    code += [(jeq, 0, 1, flock_nr), (ret, 0, 0, errno | _ENOLCK)]
    code += [(jeq, 1, 0, fcntl_nr), (ret, 0, 0, allow),
             (ld, 0, 0, 24)]  # seccomp_data.args[1], its low 32 bits (little-endian)
    for command in _LOCK_COMMANDS:
        code += [(jeq, 0, 1, command), (ret, 0, 0, errno | _ENOLCK)]
    code.append((ret, 0, 0, allow))

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte),
                    ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(code))(*[Filter(*c) for c in code])
    program = Program(len(code), filters)
    pr_set_seccomp, seccomp_mode_filter = 22, 2
    return _libc().prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(program),
                         0, 0) == 0


def enter_sandbox(config: dict, runtime: dict[str, str], package_dir: str | None) -> dict:
    """Namespaces, the new root, limits and no privileges; returns what is in force."""
    import resource

    facts: dict = {"network_namespace": False, "pid_namespace": False,
                   "mount_namespace": False, "file_system_hidden": False,
                   "read_only_files": False, "user": None}
    root = os.geteuid() == 0
    data_in_use = _vm_data()
    if config.get("namespaces") and not root:
        facts["user_namespace"] = _enter_user_namespace()
    if config.get("namespaces") and (root or facts.get("user_namespace")):
        facts["network_namespace"] = _unshare(CLONE_NEWNET)
        _unshare(CLONE_NEWIPC)
        facts["mount_namespace"] = _unshare(CLONE_NEWNS) and _libc().mount(
            b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0
        if _unshare(CLONE_NEWPID):
            pid = os.fork()
            if pid:
                os.close(RECORD_FD)
                _guard(pid)
            facts["pid_namespace"] = True
        if facts["mount_namespace"] and facts["pid_namespace"]:
            facts.update(build_root(config, runtime, package_dir))
    scratch = SCRATCH if facts["file_system_hidden"] else config["workdir"]
    os.environ.update(config.get("env", {}))
    os.environ.update(HOME=scratch, TMPDIR=scratch, MPLCONFIGDIR=f"{scratch}/.matplotlib")
    if config.get("data_bytes"):  # on top of what Python and torch already hold
        _limit(resource.RLIMIT_DATA, data_in_use + config["data_bytes"])
    _limit(resource.RLIMIT_CPU, config.get("cpu_seconds"))
    _limit(resource.RLIMIT_FSIZE, config.get("file_bytes"))
    _limit(resource.RLIMIT_CORE, 0)
    uid, gid = config.get("uid"), config.get("gid")
    if uid is not None and root:
        _limit(resource.RLIMIT_NPROC, config.get("max_processes"))
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
        if os.geteuid() != uid or os.getuid() != uid:
            raise RuntimeError("could not drop privileges")
        facts["user"] = uid
    elif facts.get("user_namespace"):
        facts["capabilities_dropped"] = _drop_capabilities()
    _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    facts["no_keyrings_or_locks"] = _install_filter()
    if facts["pid_namespace"]:
        _die_with_parent()  # after every change of credentials, which clears it
    os.chdir(scratch)
    if not facts["network_namespace"]:
        _block_sockets()
    return facts


def _block_sockets() -> None:
    import socket

    class NoNetwork(socket.socket):
        def __init__(self, *args, **kwargs):
            raise PermissionError(_("the network is disabled while grading"))

    socket.socket = NoNetwork  # type: ignore[misc]


def _stub_grading_package(forbidden: list[str]) -> None:
    """``from attention_course.grading import check`` works; the specs stay out of reach."""
    for name in list(sys.modules):
        if name in forbidden or any(name.startswith(f + ".") for f in forbidden):
            del sys.modules[name]
    stub = types.ModuleType("attention_course.grading")
    stub.__path__ = []  # a package with no submodules

    def check(*args, **kwargs):
        print(_("(check skipped: this notebook is being graded)"))

    stub.check = check
    sys.modules["attention_course.grading"] = stub

    class Forbidden:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name in forbidden or any(name.startswith(f + ".") for f in forbidden):
                raise ImportError(
                    _("{module} is not available while this exercise is graded: write the "
                      "code yourself").format(module=name)
                )
            return None

    sys.meta_path.insert(0, Forbidden)


_TIMEIT_OPTIONS = re.compile(r"^\s*(?:-[nrp]\s*\S+\s*|-[tcqo]\s+)*")


class Shell:
    """``get_ipython()`` for a graded notebook, whose cells the parent has already put
    through IPython's own input transformation (``%%time`` became
    ``get_ipython().run_cell_magic('time', '', ...)``): magics that run code run it once
    in the notebook's namespace, as Jupyter would; the others (plots inline, extensions,
    help, cell magics of other languages) do nothing, and shell escapes run no shell
    (there is none in the sandbox)."""

    RUNS = ("time", "timeit", "prun", "capture")

    def __init__(self, namespace: dict) -> None:
        self.namespace = namespace
        self.user_ns = namespace

    def _run(self, source: str) -> None:
        exec(compile(source, "<magic>", "exec"), self.namespace)

    def run_line_magic(self, name: str, line: str, *args, **kwargs):
        if name in self.RUNS:
            self._run(_TIMEIT_OPTIONS.sub("", line) if name == "timeit" else line)
        return None

    def run_cell_magic(self, name: str, line: str, cell: str):
        if name in self.RUNS:
            self._run(cell)
        elif name == "writefile" and line.split():
            mode = "a" if "-a" in line.split()[:-1] else "w"
            with open(line.split()[-1], mode, encoding="utf-8") as f:
                f.write(cell)
        return None

    def system(self, command: str) -> None:
        return None

    def getoutput(self, command: str) -> list[str]:
        return []


# --------------------------------------------------------------------------- one child
_WIRE: types.ModuleType | None = None


def _wire() -> types.ModuleType:
    """``wire.py`` from this folder, loaded by path: importing it as
    ``attention_course.grading.wire`` would import the grading package, and with it the
    exercise specifications, into the server (and every child's memory)."""
    global _WIRE
    if _WIRE is None:
        import importlib.util

        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wire.py")
        spec = importlib.util.spec_from_file_location("_attention_course_wire", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _WIRE = module
    return _WIRE


class Channel:
    def __init__(self, fd: int, nonce: str) -> None:
        self.fd, self.nonce = fd, nonce

    def send(self, event: str, **fields) -> None:
        data = _wire().encode({"nonce": self.nonce, "event": event, **fields})
        view = memoryview(HEADER.pack(len(data)) + data)
        while view:
            view = view[os.write(self.fd, view):]


def _read_job() -> tuple[dict, bytes]:
    with os.fdopen(0, "rb", closefd=True) as stdin:
        raw = stdin.read()
    devnull = os.open(os.devnull, os.O_RDONLY)
    if devnull != 0:
        os.dup2(devnull, 0)
        os.close(devnull)
    (size,) = HEADER.unpack(raw[: HEADER.size])
    config = json.loads(raw[HEADER.size : HEADER.size + size].decode())
    return config, raw[HEADER.size + size :]


def check_environment(runtime: dict[str, str]) -> str | None:
    """Whether the sandbox can run a notebook: Python's files are readable, torch
    computes, the package imports.

    A failure here is the grader's (a limit too small, files out of reach), never the
    submission's: none of its code has run yet.
    """
    import torch

    unreadable = [p for p in runtime if not os.access(p, os.R_OK | os.X_OK)]
    if unreadable:
        return (f"the sandbox user (uid {os.getuid()}) cannot read {unreadable[0]}: put Python "
                f"and the course where every user can read them (not under a private "
                f"folder such as /root), or run the grader as a normal user")

    try:
        matrix = torch.ones(2048, 2048)  # 16 MB
        (matrix @ matrix[:, :8]).sum().item()
    except Exception as error:  # noqa: BLE001 - report whatever broke
        if isinstance(error, MemoryError) or "alloc" in str(error).lower():
            return "torch cannot compute under the memory limit (raise --memory)"
        return f"torch cannot compute in the sandbox: {describe_error(error)}"
    try:
        import attention_course  # noqa: F401
    except Exception as error:  # noqa: BLE001
        return f"the package attention_course cannot be imported in the sandbox: " \
               f"{describe_error(error)}"
    return None


def run_job(package_dir: str | None) -> None:
    """The child: read the job, enter the sandbox, run the cells, answer the questions."""
    config, payload_bytes = _read_job()
    runtime = runtime_paths(package_dir)  # while every path is still in sight
    facts = enter_sandbox(config, runtime, package_dir)

    import torch

    torch.set_num_threads(1)
    channel = Channel(RECORD_FD, config["nonce"])
    problem = check_environment(runtime)
    if problem:
        channel.send("environment_error", message=problem)
        os._exit(0)
    payload = torch.load(io.BytesIO(payload_bytes), weights_only=True)
    del payload_bytes
    channel.send("ready", isolation=facts)
    sys.argv = ["<notebook>"]
    _stub_grading_package(list(config.get("forbidden", [])))
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    shell = Shell(namespace)
    namespace["get_ipython"] = lambda: shell
    for index, source in enumerate(payload["cells"]):
        channel.send("cell_start", index=index)
        try:
            exec(compile(source, f"<cell {index + 1}>", "exec"), namespace)
        except BaseException as error:  # noqa: B036 - a cell may raise SystemExit; go on
            channel.send("cell_error", index=index, error=describe_error(error))
    channel.send("cells_done")
    device = None if config.get("device", "cpu") == "cpu" else config["device"]
    if device is not None and device.startswith("cuda"):  # full float32, as the references
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    for question in payload["questions"]:
        qid = question["id"]
        channel.send("q_start", id=qid)
        target = namespace.get(question["symbol"])
        if target is None:
            channel.send("q_error", id=qid, status="missing", message="")
            continue
        torch.manual_seed(0)  # as the learner's check seeds it
        try:
            outputs = call_all(target, question, device)
        except NotImplementedError:
            channel.send("q_error", id=qid, status="not_implemented", message="")
            continue
        try:
            channel.send("q_result", id=qid, outputs=outputs)
        except ValueError as error:  # the wire's WireError: too many items, ...
            channel.send("q_error", id=qid, status="error",
                         message=f"returned {describe_error(error).split(': ', 1)[-1]}")
    sys.stdout.flush()  # before "done": the parent stops listening once it has it
    sys.stderr.flush()
    channel.send("done")
    os._exit(0)


def _child(fds: list[int], package_dir: str | None) -> None:
    """Right after the fork: own session, the three descriptors in place, nothing else open."""
    try:
        os.setsid()
        _die_with_parent()
        job, record, output = fds
        os.dup2(job, 0)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.dup2(record, RECORD_FD)
        os.closerange(RECORD_FD + 1, os.sysconf("SC_OPEN_MAX"))
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        run_job(package_dir)
    except BaseException:  # noqa: B036 - report and leave; the parent sees the exit status
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(70)
    os._exit(0)


# --------------------------------------------------------------------------- the server
def _send(sock, message: dict) -> None:
    try:
        sock.send(json.dumps(message).encode())
    except OSError:
        pass


def _exit_code(status: int) -> int:
    """Like ``Popen.returncode``: the exit status, or minus the signal that ended it."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


def serve(control_fd: int) -> None:
    """The fork server: import torch once, then fork one fresh child per request."""
    import importlib.util
    import select
    import socket
    import warnings

    warnings.filterwarnings("ignore", message=".*fork.*")  # the one fork we mean
    _die_with_parent()
    import numpy  # noqa: F401 - imported once here instead of in every child
    import torch

    # torch.load imports what it needs on first use: do it here, where every file is in
    # sight, not in a sandboxed child that may not be able to read it
    buffer = io.BytesIO()
    torch.save({"warm": torch.zeros(1)}, buffer)
    buffer.seek(0)
    torch.load(buffer, weights_only=True)
    _wire()  # the records' encoder, loaded while its file is in sight

    spec = importlib.util.find_spec("attention_course")
    package_dir = None
    if spec is not None and spec.submodule_search_locations:
        package_dir = list(spec.submodule_search_locations)[0]
    sock = socket.socket(fileno=control_fd)
    _send(sock, {"op": "ready", "pid": os.getpid(), "package_dir": package_dir})
    children: dict[int, int] = {}
    while True:
        readable, _w, _x = select.select([sock], [], [], 0.05)
        if readable:
            try:
                data, fds, _flags, _addr = socket.recv_fds(sock, 65536, 3)
            except OSError:
                data, fds = b"", []
            if not data:
                break
            request = json.loads(data)
            if request.get("op") == "spawn" and len(fds) == 3:
                if request.get("package_root") and not package_dir:
                    package_dir = os.path.join(request["package_root"], "attention_course")
                pid = os.fork()
                if pid == 0:
                    sock.close()
                    _child(fds, package_dir)
                children[pid] = request["id"]
                _send(sock, {"op": "spawned", "id": request["id"], "pid": pid})
            for fd in fds:
                os.close(fd)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in children:
                _send(sock, {"op": "exit", "id": children.pop(pid), "status": _exit_code(status)})
    for pid in children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(0)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
