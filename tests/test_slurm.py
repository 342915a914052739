"""The page's Slurm job array, run for real on a one-node cluster on this machine.

As root on Debian, the test installs ``slurm-wlm`` and ``munge`` if they are missing,
starts ``munged``, ``slurmctld`` and ``slurmd`` from a generated ``slurm.conf`` (state,
sockets and logs in a temporary folder, free ports on localhost), submits
``scripts/slurm/grade_array.sh`` as an array of four shards over a class of twelve
students and three exercises, then ``scripts/slurm/merge.sh`` depending on it, waits,
and checks that the merged gradebook equals one run of the grader over the whole class.
Every daemon it started is stopped. Elsewhere (not root, no apt-get) it is skipped with
a note; under ``CI=true`` it fails if the packages installed but the cluster did not run.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from grading_helpers import ROOT

pytestmark = pytest.mark.slow

SCRIPTS = ROOT / "scripts" / "slurm"
EXERCISES = ("01_attention_pooling", "02_scoring", "03_masks")
GRADER = Path(sys.executable).with_name("attention-course")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(command: list[str], env: dict, timeout: float = 60) -> str:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): "
                           f"{done.stdout}{done.stderr}")
    return done.stdout


def _installed() -> bool:
    if sys.platform != "linux" or os.geteuid() != 0 or not Path("/etc/debian_version").exists():
        pytest.skip("the Slurm test needs root on Debian (to install and run slurm-wlm and "
                    "munge); it did not run here")
    status = subprocess.run(["bash", str(ROOT / "scripts" / "install_slurm.sh")],
                            capture_output=True, text=True, timeout=900)
    if status.returncode != 0:
        pytest.skip("Slurm could not be installed here: " + (status.stdout + status.stderr)
                    .strip()[-300:])
    return True


def _slurm_conf(folder: Path, host: str) -> str:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    return "\n".join([
        "ClusterName=attention",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={folder}/munge/socket",
        f"StateSaveLocation={folder}/state",
        f"SlurmdSpoolDir={folder}/spool",
        f"SlurmctldPidFile={folder}/slurmctld.pid",
        f"SlurmdPidFile={folder}/slurmd.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log",
        f"SlurmdLogFile={folder}/slurmd.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "ReturnToService=2",
        "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} "
        f"RealMemory={int(memory * 0.8)} State=UNKNOWN",
        f"PartitionName=grading Nodes={host} Default=YES MaxTime=INFINITE State=UP",
    ]) + "\n"


@pytest.fixture(scope="module")
def cluster():
    _installed()
    folder = Path(tempfile.mkdtemp(prefix="slurm-test-"))
    folder.chmod(0o755)
    for name in ("munge", "state", "spool"):
        (folder / name).mkdir(mode=0o755)
    shutil.copy("/etc/munge/munge.key", folder / "munge" / "key")
    (folder / "munge" / "key").chmod(0o600)
    host = socket.gethostname().split(".")[0]
    (folder / "slurm.conf").write_text(_slurm_conf(folder, host))
    env = {**os.environ, "SLURM_CONF": str(folder / "slurm.conf")}
    env.pop("SLURM_JOB_ID", None)
    started: list[str] = []
    try:
        _run(["munged", "--force", f"--socket={folder}/munge/socket",
              f"--key-file={folder}/munge/key", f"--pid-file={folder}/munge/pid",
              f"--log-file={folder}/munge/log", f"--seed-file={folder}/munge/seed"], env)
        started.append("munged")
        _run(["slurmctld", "-i"], env)
        started.append("slurmctld")
        _run(["slurmd", "-N", host], env)
        started.append("slurmd")
        deadline = time.monotonic() + 60
        while "idle" not in _run(["sinfo", "-h", "-o", "%t"], env):
            if time.monotonic() > deadline:
                raise RuntimeError("the node did not come up: "
                                   + (folder / "slurmd.log").read_text()[-2000:])
            time.sleep(0.5)
        yield {"env": env, "folder": folder}
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"a one-node Slurm cluster could not start here: {error}")
    finally:
        if "slurmctld" in started:
            subprocess.run(["scontrol", "shutdown"], env=env, capture_output=True, timeout=60)
        if "munged" in started:
            subprocess.run(["munged", "--stop", f"--socket={folder}/munge/socket"],
                           capture_output=True, timeout=60)
        for pid_file in ("slurmd.pid", "slurmctld.pid", "munge/pid"):  # whatever is left
            try:
                os.kill(int((folder / pid_file).read_text()), 9)
            except (OSError, ValueError):
                pass
        shutil.rmtree(folder, ignore_errors=True)


def _class(top: Path) -> Path:
    """Twelve students, three exercises: solutions, unfinished notebooks, gaps."""
    for i in range(12):
        student = top / f"student{i:02d}"
        student.mkdir(parents=True)
        for j, exercise in enumerate(EXERCISES):
            if (i + j) % 5 == 4:
                continue  # not handed in
            source = ROOT / "exercises" / ("solutions" if (i + j) % 3 else "") / f"{exercise}.ipynb"
            shutil.copy(source, student / f"{exercise}.ipynb")
    return top


def _files(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_array_job_equals_one_run(cluster, tmp_path, capsys):
    env = {**cluster["env"], "ATTENTION_COURSE": str(GRADER)}
    klass = _class(tmp_path / "class")
    grades, logs = tmp_path / "grades", tmp_path / "logs"
    logs.mkdir()
    start = time.monotonic()
    array = _run(["sbatch", "--parsable", "--array=1-4", "--cpus-per-task=1", "--mem=1G",
                  f"--output={logs}/grade-%a.log", str(SCRIPTS / "grade_array.sh"),
                  str(klass), str(grades)], env).strip()
    merge = _run(["sbatch", "--parsable", f"--dependency=afterok:{array}", "--mem=1G",
                  f"--output={logs}/merge.log", str(SCRIPTS / "merge.sh"), str(grades)],
                 env).strip()
    deadline = time.monotonic() + 900
    while _run(["squeue", "-h", "-j", f"{array},{merge}"], env).strip():
        assert time.monotonic() < deadline, "the jobs did not finish in 15 minutes"
        time.sleep(1)
    wall = time.monotonic() - start
    notes = "\n".join(p.read_text() for p in sorted(logs.iterdir()))
    assert (grades / "all" / "gradebook.csv").is_file(), notes[-3000:]
    single = tmp_path / "single"
    status = subprocess.run([str(GRADER), "grade", str(klass), "--out", str(single),
                             "--jobs", "2"], capture_output=True, text=True, timeout=900)
    assert status.returncode == 0, status.stderr[-3000:]
    merged, one = _files(grades / "all"), _files(single)
    assert merged.keys() == one.keys()
    for name in one:
        assert merged[name] == one[name], name
    handed_in = sum(1 for _ in klass.rglob("*.ipynb"))
    with capsys.disabled():
        print(f"\nSlurm: {handed_in} notebooks in 4 array tasks and a merge, "
              f"{wall:.0f} s wall time ({wall / handed_in:.2f} s a notebook)")


def _shards_asked(script: str, envs: list[dict], tmp_path: Path) -> list[str]:
    """The ``--shard`` each run of ``script`` hands the grader (a stand-in that records
    its arguments)."""
    fake = tmp_path / "attention-course"
    fake.write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$RECORD"\n')
    fake.chmod(0o755)
    asked = []
    for i, extra in enumerate(envs):
        record = tmp_path / f"args-{i}"
        env = {"PATH": os.environ["PATH"], "ATTENTION_COURSE": str(fake),
               "RECORD": str(record), **extra}
        subprocess.run(["bash", "-c", script, "job", "class", "grades"], env=env, check=True,
                       timeout=30)
        args = record.read_text().split("\n")
        asked.append(args[args.index("--shard") + 1])
    return asked


def _covers_once(asked: list[str]) -> None:
    from attention_course.grading.cli import Submission, shard

    items = [Submission(Path(f"s{i}.ipynb"), f"s{i}", "01_attention_pooling")
             for i in range(23)]
    seen = [s.student for spec in asked for s in shard(items, spec)]
    assert sorted(seen) == sorted(s.student for s in items)  # each exactly once


@pytest.mark.parametrize("first", [0, 1])
def test_the_slurm_script_shards_the_class_exactly_once(first, tmp_path):
    script = (SCRIPTS / "grade_array.sh").read_text()
    envs = [{"SLURM_ARRAY_TASK_ID": str(first + i), "SLURM_ARRAY_TASK_MIN": str(first),
             "SLURM_ARRAY_TASK_MAX": str(first + 4)} for i in range(5)]
    asked = _shards_asked(script, envs, tmp_path)
    assert asked == [f"{k}/5" for k in range(1, 6)]
    _covers_once(asked)


def test_the_kubernetes_job_shards_the_class_exactly_once(tmp_path):
    import yaml

    job = yaml.safe_load((ROOT / "scripts" / "kubernetes" / "grade-job.yaml").read_text())
    spec = job["spec"]
    assert job["kind"] == "Job" and spec["completionMode"] == "Indexed"
    (container,) = spec["template"]["spec"]["containers"]
    shards = {e["name"]: e["value"] for e in container["env"]}["SHARDS"]
    assert int(shards) == spec["completions"]
    script = container["args"][0].replace("attention-course grade", '"$ATTENTION_COURSE" grade')
    envs = [{"JOB_COMPLETION_INDEX": str(i), "SHARDS": shards}
            for i in range(spec["completions"])]
    asked = _shards_asked(script, envs, tmp_path)
    assert asked == [f"{k}/{shards}" for k in range(1, spec["completions"] + 1)]
    _covers_once(asked)
