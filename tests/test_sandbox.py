"""The sandbox: timeouts kill whole process groups, secrets stay out, limits hold, crashes are reported."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from runner import sandbox
from runner.sandbox import Limits

REPO = Path(__file__).resolve().parent.parent


def run_py(tmp_path: Path, code: str, backend: str = "cpu", **kwargs) -> sandbox.Outcome:
    return sandbox.run([sys.executable, "-c", textwrap.dedent(code)], tmp_path, backend=backend, **kwargs)


def alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie nobody has reaped yet."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_until(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_timeout_kills_a_child_that_sleeps_forever(tmp_path):
    out = run_py(tmp_path, "import time; print('started', flush=True); time.sleep(1000)", limits=Limits(timeout_s=1.5))
    assert out.timed_out and out.exit_code == -9 and out.signal_name == "SIGKILL"
    assert 1.4 < out.duration_s < 10
    assert "started" in out.stdout_tail


def test_timeout_kills_the_grandchildren_too(tmp_path):
    code = """
        import subprocess, time
        child = subprocess.Popen(["sleep", "1000"])
        open("grandchild.pid", "w").write(str(child.pid))
        time.sleep(1000)
    """
    out = run_py(tmp_path, code, limits=Limits(timeout_s=2))
    assert out.timed_out
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    assert wait_until(lambda: not alive(grandchild)), "the grandchild survived the timeout"


def test_leftover_processes_are_killed_after_a_normal_exit(tmp_path):
    code = """
        import subprocess
        child = subprocess.Popen(["sleep", "1000"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        open("grandchild.pid", "w").write(str(child.pid))
    """
    out = run_py(tmp_path, code)
    assert out.exit_code == 0 and not out.timed_out
    assert wait_until(lambda: not alive(int((tmp_path / "grandchild.pid").read_text())))


def test_child_dies_with_the_runner(tmp_path):
    """A runner killed with SIGKILL mid-job must not leave generated code running."""
    script = f"""
        import sys; sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from runner import sandbox
        sandbox.run([sys.executable, "-c", "import os, time; open('child.pid', 'w').write(str(os.getpid())); "
                     "time.sleep(1000)"], Path({str(tmp_path)!r}), backend="cpu")
    """
    runner = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)])
    pid_file = tmp_path / "child.pid"
    assert wait_until(lambda: pid_file.exists() and pid_file.read_text(), timeout_s=20)
    child = int(pid_file.read_text())
    assert alive(child)
    runner.kill()
    runner.wait()
    assert wait_until(lambda: not alive(child)), "the sandboxed child outlived its runner"


def test_environment_is_scrubbed_of_secrets(tmp_path, monkeypatch):
    secrets = {"SLACK_BOT_TOKEN": "xoxb-1", "DISCORD_TOKEN": "d", "KERNELBOT_LLM_API_KEY": "sk-1",
               "AWS_SECRET_ACCESS_KEY": "aws", "AWS_REGION": "eu-west-1", "MY_TOKEN": "t", "DB_PASSWORD": "p"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    out = run_py(tmp_path, "import json, os; print(json.dumps({'env': dict(os.environ), 'cwd': os.getcwd()}))")
    seen = json.loads(out.stdout_tail)
    assert not set(secrets) & set(seen["env"])
    assert not any(v in secrets.values() for v in seen["env"].values())
    env = seen["env"]
    assert env["TRITON_INTERPRET"] == "1" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["HOME"] == str(tmp_path) == seen["cwd"]
    assert env["PYTHONPATH"] == str(REPO)
    assert all(env[k].startswith(str(tmp_path)) for k in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TMPDIR"))


def test_cuda_backend_pins_one_gpu_and_uses_no_interpreter(tmp_path):
    env = sandbox.child_env(tmp_path, "cuda-h200", 3, threads=2)
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    assert "TRITON_INTERPRET" not in env
    assert env["OMP_NUM_THREADS"] == "2"


def test_file_size_limit(tmp_path):
    code = "open('big.bin', 'wb').write(b'x' * (4 << 20))"
    out = run_py(tmp_path, code, limits=Limits(timeout_s=20, file_bytes=1 << 20))
    assert out.exit_code != 0
    assert "File too large" in out.stderr_tail
    assert (tmp_path / "big.bin").stat().st_size <= 1 << 20


def test_address_space_limit_on_cpu(tmp_path):
    out = run_py(tmp_path, "x = bytearray(4 << 30)", limits=Limits(timeout_s=20, memory_bytes=512 << 20))
    assert out.exit_code == 1 and out.out_of_memory
    assert "MemoryError" in out.stderr_tail


def test_rss_watchdog_on_cuda_kills_a_memory_hungry_child(tmp_path):
    """CUDA needs a large address space, so on cuda the limit is the RSS of the whole session."""
    code = """
        import time
        hoard = []
        for _ in range(100):
            hoard.append(b"x" * (32 << 20))   # touched, so resident
            time.sleep(0.02)
    """
    out = run_py(tmp_path, code, backend="cuda", limits=Limits(timeout_s=30, memory_bytes=256 << 20))
    assert out.killed_for_memory and out.out_of_memory and out.exit_code == -9
    assert out.peak_rss_bytes > 256 << 20


@pytest.mark.parametrize("code, signal_name", [
    ("import ctypes; ctypes.string_at(0)", "SIGSEGV"),
    ("import os; os.abort()", "SIGABRT"),
])
def test_a_crashing_child_is_reported(tmp_path, code, signal_name):
    out = run_py(tmp_path, code)
    assert out.signal_name == signal_name and not out.timed_out
    assert not list(tmp_path.glob("core*")), "RLIMIT_CORE=0 means no core files"


def test_stdout_lines_stream_while_the_child_runs(tmp_path):
    lines: list[str] = []
    out = run_py(tmp_path, "for i in range(3): print(f'PROGRESS step {i}/3')", on_line=lines.append)
    assert lines == ["PROGRESS step 0/3", "PROGRESS step 1/3", "PROGRESS step 2/3"]
    assert out.exit_code == 0


def test_cancel_stops_the_child(tmp_path):
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    out = run_py(tmp_path, "import time; time.sleep(1000)", cancel=cancel, limits=Limits(timeout_s=30))
    assert out.cancelled and not out.timed_out and out.duration_s < 10


NETWORK_PROBE = """
    import os, socket, sys
    print("uid", os.getuid(), "interfaces", sorted(line.split(":")[0].strip()
                                                    for line in open("/proc/net/dev").readlines()[2:]))
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5).close()
        print("connected")
    except OSError as e:
        print("refused", e.errno)
"""


def run_probe(tmp_path: Path, port: int) -> str:
    cmd = [sys.executable, "-c", textwrap.dedent(NETWORK_PROBE), str(port)]
    outcome = sandbox.run(cmd, tmp_path, backend="cpu")
    assert outcome.exit_code == 0, outcome.stderr_tail
    return outcome.stdout_tail


@pytest.mark.skipif(not sandbox.network_isolation(), reason="this kernel refuses unprivileged user and network "
                    "namespaces, so the sandbox cannot take the child's network away here")
def test_child_has_no_network_but_keeps_its_uid(tmp_path, monkeypatch):
    # A server the runner can reach on loopback: the sandboxed child cannot, and sees no interface
    # but lo. With KERNELBOT_SANDBOX_NETWORK=host the same child connects (the probe can tell).
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        out = run_probe(tmp_path, port)
        assert f"uid {os.getuid()} interfaces ['lo']" in out and "refused" in out and "connected" not in out
        monkeypatch.setenv("KERNELBOT_SANDBOX_NETWORK", "host")
        sandbox.network_isolation.cache_clear()
        try:
            assert "connected" in run_probe(tmp_path, port)
        finally:
            monkeypatch.undo()
            sandbox.network_isolation.cache_clear()


def test_an_unknown_network_mode_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("KERNELBOT_SANDBOX_NETWORK", "hots")
    sandbox.network_isolation.cache_clear()
    try:
        with pytest.raises(ValueError, match="KERNELBOT_SANDBOX_NETWORK is 'hots'; use 'none'"):
            sandbox.network_isolation()
    finally:
        monkeypatch.undo()
        sandbox.network_isolation.cache_clear()


WRITE_PROBE = """
import os, sys
for path in sys.argv[1:]:
    try:
        if path.startswith("rm:"):
            os.remove(path[3:])
        else:
            with open(path, "w") as f:
                f.write("x")
        print("done", path)
    except PermissionError:
        print("denied", path)
"""


def on_each_backend_with_landlock(test):
    """The test on cpu, and on cuda where there is a GPU; skipped where this kernel has no Landlock."""
    backends = pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
    return pytest.mark.skipif(not sandbox._landlock_writes(), reason="this kernel has no Landlock, so the sandbox "
                              "cannot limit the child's files here")(backends(test))


@on_each_backend_with_landlock
def test_child_writes_only_in_its_directory_and_dev(backend, tmp_path, monkeypatch):
    # The child may write in its directory (TMPDIR is inside it) and to devices, but may neither
    # create nor delete a file anywhere else. With KERNELBOT_SANDBOX_WRITES=any it may. The probe
    # (a Triton kernel, interpreted on cpu, so restricted) must pass wherever Landlock is there:
    # on a GPU, CUDA's start must fit the rules too (it writes under /proc).
    assert sandbox.write_isolation(backend)
    job, outside, kept = tmp_path / "job", tmp_path / "outside.txt", tmp_path / "kept.txt"
    kept.write_text("the runner's")
    cmd = [sys.executable, "-c", textwrap.dedent(WRITE_PROBE), "inside.txt", "tmp/scratch", "/dev/null", str(outside),
           f"rm:{kept}"]
    out = sandbox.run(cmd, job, backend=backend).stdout_tail
    assert "done inside.txt" in out and "done tmp/scratch" in out and "done /dev/null" in out, out
    assert f"denied {outside}" in out and f"denied rm:{kept}" in out, out
    assert not outside.exists() and kept.read_text() == "the runner's"
    monkeypatch.setenv("KERNELBOT_SANDBOX_WRITES", "any")
    out = sandbox.run(cmd, job, backend=backend).stdout_tail
    assert f"done {outside}" in out and f"done rm:{kept}" in out and not kept.exists(), out


READ_PROBE = """
import sys
from pathlib import Path
import torch   # the runner's Python and its packages stay readable
for path in sys.argv[1:]:
    try:
        print("read", path, len(Path(path).read_text()))
    except PermissionError:
        print("denied", path)
"""


@on_each_backend_with_landlock
def test_child_reads_only_its_directory_and_the_system(backend, tmp_path, monkeypatch):
    # The child reads its own files, the system's and Python's, but neither another directory's
    # (another job's, the user's) nor the repository's (its database and settings may live there);
    # the runner package it imports stays readable. With KERNELBOT_SANDBOX_READS=any it reads all.
    assert sandbox.read_isolation(backend)
    job, secret = tmp_path / "job", tmp_path / "secret.txt"
    job.mkdir()
    (job / "mine.txt").write_text("mine")
    secret.write_text("the runner's")
    repo_file, package_file = REPO / "pyproject.toml", REPO / "runner" / "protocol.py"
    cmd = [sys.executable, "-c", textwrap.dedent(READ_PROBE), "mine.txt", "/etc/passwd", str(package_file),
           str(secret), str(repo_file)]
    out = sandbox.run(cmd, job, backend=backend).stdout_tail
    assert "read mine.txt 4" in out and "read /etc/passwd" in out and f"read {package_file}" in out, out
    assert f"denied {secret}" in out and f"denied {repo_file}" in out, out
    monkeypatch.setenv("KERNELBOT_SANDBOX_READS", "any")
    out = sandbox.run(cmd, job, backend=backend).stdout_tail
    assert f"read {secret} 12" in out and f"read {repo_file}" in out, out


def test_torch_compile_runs_under_the_file_rules_where_benchmarks_time_it():
    # On a GPU (and on cpu with KERNELBOT_CPU_COMPILE=1) the probes also run torch.compile, as the
    # benchmark does: Inductor's codegen, compiler and caches must fit the rules, or they stay off.
    if not sandbox._landlock_writes():
        pytest.skip("this kernel has no Landlock")
    assert sandbox._run_files_probe("cpu", True, True, True)


def test_a_passed_probe_is_remembered_on_disk_and_a_failed_one_is_not(tmp_path, monkeypatch):
    # Each `kernelbot run` starts its own runner; with torch.compile the probe takes 15-20 s.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    ran = []
    monkeypatch.setattr(sandbox, "_run_files_probe", lambda *flags: ran.append(flags) or flags[3])
    for _ in range(2):
        sandbox._files_probe.cache_clear()      # as a new runner process would start
        assert sandbox._files_probe("cpu", True, True, True) and not sandbox._files_probe("cpu", True, True, False)
    assert ran == [("cpu", True, True, True), ("cpu", True, True, False), ("cpu", True, True, False)]
    assert len(json.loads((tmp_path / "kernelbot" / "sandbox-probes.json").read_text())) == 1
    sandbox._files_probe.cache_clear()


def test_an_unknown_read_mode_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("KERNELBOT_SANDBOX_READS", "everything")
    with pytest.raises(ValueError, match="KERNELBOT_SANDBOX_READS is 'everything'; use 'system'"):
        sandbox.read_isolation("cpu")


def test_an_unknown_write_mode_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("KERNELBOT_SANDBOX_WRITES", "anywhere")
    with pytest.raises(ValueError, match="KERNELBOT_SANDBOX_WRITES is 'anywhere'; use 'workdir'"):
        sandbox.write_isolation("cpu")
