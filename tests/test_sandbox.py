"""The sandbox: untrusted commands run under bubblewrap, as nobody, in namespaces of their own, with
a read-only root, a bounded tmpfs and no way out; limits hold, nothing outlives a job, secrets stay out.

Each escape test is something generated code could do in the sandbox before bubblewrap."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from runner import sandbox
from runner.sandbox import Limits

REPO = Path(__file__).resolve().parent.parent
MiB = 1 << 20


def run_py(workdir: Path, code: str, *args: str, backend: str = "cpu", **kwargs) -> sandbox.Outcome:
    return sandbox.run([sys.executable, "-c", textwrap.dedent(code), *args], workdir, backend=backend, **kwargs)


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


@pytest.fixture
def marker():
    """A word to put in a sandboxed process's argv, so that the host can look for it afterwards;
    whatever still carries it when the test ends is killed."""
    word = f"kernelbot-marker-{uuid.uuid4().hex}"
    yield word
    for pid in with_marker(word):
        os.kill(pid, signal.SIGKILL)


def with_marker(word: str) -> list[int]:
    """Host pids of running processes with word in their command line."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and word.encode() in Path(f"/proc/{entry}/cmdline").read_bytes() and alive(int(entry)):
                found.append(int(entry))
        except OSError:
            pass
    return found


@pytest.fixture
def fresh_isolation(monkeypatch):
    """isolation() probed again under this test's environment, and again after it."""
    sandbox.isolation.cache_clear()
    yield monkeypatch
    monkeypatch.undo()
    sandbox.isolation.cache_clear()


def test_this_host_has_the_sandbox():
    iso = sandbox.isolation()
    assert iso.available, iso.reason
    assert iso.uid == (65534 if os.getuid() == 0 else os.getuid())
    assert "sandboxed jobs run under" in iso.summary()


# --- the escapes ------------------------------------------------------------------------------

def test_escape_connect_to_a_unix_socket_outside(tmp_path):
    # On a GPU host that is the Docker socket: root on the host. Named and abstract, both open to all.
    outside = tmp_path / "sockets"
    outside.mkdir(mode=0o777)
    path, abstract = outside / "runner.sock", f"\0kernelbot-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX) as named, socket.socket(socket.AF_UNIX) as hidden:
        named.bind(str(path))
        os.chmod(path, 0o777)
        hidden.bind(abstract)
        named.listen()
        hidden.listen()
        code = """
            import socket, sys
            for address in sys.argv[1:]:
                try:
                    socket.socket(socket.AF_UNIX).connect(address.replace("@", "\\0", 1))
                    print("connected", address)
                except OSError as e:
                    print("refused", address, e.errno)
        """
        out = run_py(tmp_path / "job", code, str(path), "@" + abstract[1:])
    assert out.exit_code == 0, out.stderr_tail
    assert "connected" not in out.stdout_tail and out.stdout_tail.count("refused") == 2, out.stdout_tail


def test_escape_signal_the_runner(tmp_path):
    # Its own pid namespace: the runner's pid names nothing (or one of its own processes) in there.
    got = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
    try:
        code = """
            import os, signal, sys
            try:
                os.kill(int(sys.argv[1]), signal.SIGUSR1)
                print("sent")
            except OSError as e:
                print("refused", e.errno)
        """
        run_py(tmp_path, code, str(os.getpid()))
        time.sleep(0.2)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert not got, "a sandboxed child signalled the runner"


def test_escape_setsid_and_double_fork_outlive_the_job(tmp_path, marker):
    code = """
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", sys.argv[1]])
            os._exit(0)
        time.sleep(0.5)
        print("left it running")
    """
    out = run_py(tmp_path, code, marker)
    assert out.exit_code == 0 and "left it running" in out.stdout_tail, out.stderr_tail
    assert not with_marker(marker), "a setsid, double-forked process outlived its job"


def test_escape_memory_in_dev_shm(tmp_path):
    # tmpfs pages are memory: what a job keeps in /dev/shm counts against its limit (and /dev/shm is its own).
    code = """
        import time
        with open("/dev/shm/hoard", "wb") as f:
            for _ in range(12):
                f.write(b"x" * (32 << 20))
                f.flush()
        print("kept", flush=True)
        time.sleep(30)
    """
    out = run_py(tmp_path, code, limits=Limits(timeout_s=20, memory_bytes=192 * MiB, shm_bytes=512 * MiB))
    assert out.killed_for_memory and not out.timed_out and out.exit_code == -9, (out, out.stderr_tail)
    assert out.peak_rss_bytes > 192 * MiB
    assert not Path("/dev/shm/hoard").exists()


def test_dev_shm_is_private_and_bounded(tmp_path):
    code = """
        try:
            with open("/dev/shm/big", "wb") as f:
                f.write(b"x" * (16 << 20))
        except OSError as e:
            print(e)
    """
    out = run_py(tmp_path, code, limits=Limits(timeout_s=20, shm_bytes=8 * MiB))
    assert "No space left on device" in out.stdout_tail, (out.stdout_tail, out.stderr_tail)
    assert not Path("/dev/shm/big").exists()


def test_escape_memory_in_setsid_children(tmp_path):
    # A child that starts a session of its own is still counted: the watchdog sums the whole pid namespace.
    code = """
        import os, time
        if os.fork() == 0:
            os.setsid()
            hoard = [b"x" * (32 << 20) for _ in range(10)]
            time.sleep(30)
            os._exit(0)
        time.sleep(30)
    """
    # cuda: no RLIMIT_AS, so the watchdog is the only limit (as on a GPU host).
    out = run_py(tmp_path, code, backend="cuda", limits=Limits(timeout_s=20, memory_bytes=192 * MiB))
    assert out.killed_for_memory and not out.timed_out, out


def test_escape_disk_in_two_files_under_the_file_limit(tmp_path):
    code = """
        import os
        names = [os.path.join(os.environ["TMPDIR"], name) for name in ("a", "b")]
        for name in names:
            try:
                with open(name, "wb") as f:
                    f.write(b"x" * (20 << 20))
                print("wrote", os.path.basename(name))
            except OSError as e:
                print(name, e)
        print("total", sum(os.path.getsize(n) for n in names if os.path.exists(n)))
    """
    out = run_py(tmp_path, code, limits=Limits(timeout_s=20, file_bytes=24 * MiB, disk_bytes=32 * MiB))
    assert "wrote a" in out.stdout_tail and "No space left on device" in out.stdout_tail, out.stdout_tail
    assert int(out.stdout_tail.split("total")[1]) <= 32 * MiB
    assert "KERNELBOT_SANDBOX_DISK_GB" in sandbox.files_hint(out.stdout_tail)


READ_PROBE = """
    import sys
    for path in sys.argv[1:]:
        try:
            print("read", path, repr(open(path).read()[:40]))
        except OSError as e:
            print("refused", path, type(e).__name__)
"""


def test_escape_read_etc_shadow(tmp_path):
    out = run_py(tmp_path, READ_PROBE, "/etc/shadow", "/etc/gshadow", "/etc/passwd")
    assert "refused /etc/shadow" in out.stdout_tail and "root:" not in out.stdout_tail.split("/etc/passwd")[0]
    assert "read /etc/passwd" in out.stdout_tail, out.stdout_tail


def test_escape_read_files_of_the_home_and_the_repository(tmp_path):
    secret = Path.home() / f".kernelbot-test-{uuid.uuid4().hex}"
    secret.write_text("the runner's")
    os.chmod(secret, 0o644)
    other_job = tmp_path / "other-job.txt"
    other_job.write_text("another job's")
    try:
        package_file, repo_file = REPO / "runner" / "protocol.py", REPO / "pyproject.toml"
        out = run_py(tmp_path / "job", READ_PROBE, str(secret), str(other_job), str(repo_file), str(package_file),
                     "/root/.bash_history", "/etc/hostname")
    finally:
        secret.unlink()
    text = out.stdout_tail
    assert f"refused {secret}" in text and f"refused {other_job}" in text and f"refused {repo_file}" in text, text
    assert f"read {package_file}" in text and "the runner's" not in text and "another job's" not in text, text


def test_escape_write_outside_tmp(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    (job / "mine.txt").write_text("mine")
    targets = [str(job / "new.txt"), str(job / "mine.txt"), "/new.txt", "/dev/new", "/etc/new", "/usr/new",
               str(REPO / "runner" / "new.py"), str(Path.home() / "kernelbot-new.txt"), "/var/tmp/new", "/tmp/ok",
               "/dev/shm/ok"]
    code = """
        import sys
        for path in sys.argv[1:]:
            try:
                with open(path, "a") as f:
                    f.write("x")
                print("wrote", path)
            except OSError as e:
                print("refused", path, type(e).__name__)
    """
    out = run_py(job, code, *targets)
    assert out.exit_code == 0, out.stderr_tail
    wrote = [line.split()[1] for line in out.stdout_tail.splitlines() if line.startswith("wrote")]
    assert wrote == ["/tmp/ok", "/dev/shm/ok"], out.stdout_tail
    assert (job / "mine.txt").read_text() == "mine" and not (job / "new.txt").exists()
    assert not (REPO / "runner" / "new.py").exists() and not (Path.home() / "kernelbot-new.txt").exists()


def test_escape_network_to_the_runners_loopback(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as server:
        code = """
            import os, socket, sys
            print("interfaces", sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]))
            try:
                socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5).close()
                print("connected")
            except OSError as e:
                print("refused", e.errno)
        """
        out = run_py(tmp_path, code, str(server.getsockname()[1]))
    assert "interfaces ['lo']" in out.stdout_tail and "refused" in out.stdout_tail, out.stdout_tail


HONEST_JOB = """
import os
import torch
import triton
import triton.language as tl


@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


x = torch.arange(10, dtype=torch.float32)
add_one[(1,)](x, 10, BLOCK=16)
assert x.tolist() == [float(i + 1) for i in range(10)], x
with open(os.path.join(os.environ["TMPDIR"], "scratch"), "w") as f:
    f.write(open("spec.json").read())
print("ok", os.environ["HOME"], os.environ["TRITON_INTERPRET"])
"""


def test_an_honest_python_job_runs(tmp_path):
    (tmp_path / "job.py").write_text(HONEST_JOB)     # a file: Triton reads a kernel's source
    (tmp_path / "spec.json").write_text("{}")
    out = sandbox.run([sys.executable, "job.py"], tmp_path, backend="cpu", limits=Limits(timeout_s=120))
    assert out.exit_code == 0, out.stderr_tail
    assert "ok /tmp 1" in out.stdout_tail


# --- limits, lifetimes, environment -------------------------------------------------------------

def test_timeout_kills_a_child_that_sleeps_forever(tmp_path):
    out = run_py(tmp_path, "import time; print('started', flush=True); time.sleep(1000)", limits=Limits(timeout_s=1.5))
    assert out.timed_out and out.exit_code == -9 and out.signal_name == "SIGKILL"
    assert 1.4 < out.duration_s < 10
    assert "started" in out.stdout_tail


def test_timeout_kills_the_grandchildren_too(tmp_path, marker):
    code = """
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)", sys.argv[1]])
        time.sleep(1000)
    """
    out = run_py(tmp_path, code, marker, limits=Limits(timeout_s=2))
    assert out.timed_out
    assert not with_marker(marker), "the grandchild survived the timeout"


def test_leftover_processes_are_killed_after_a_normal_exit(tmp_path, marker):
    code = """
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)", sys.argv[1]])
        time.sleep(0.3)
    """
    out = run_py(tmp_path, code, marker)
    assert out.exit_code == 0 and not out.timed_out
    assert not with_marker(marker)


def test_child_dies_with_the_runner(tmp_path, marker):
    """A runner killed with SIGKILL mid-job must not leave generated code running."""
    script = f"""
        import sys; sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from runner import sandbox
        sandbox.run([sys.executable, "-c", "import time; time.sleep(1000)", {marker!r}],
                    Path({str(tmp_path)!r}), backend="cpu")
    """
    runner = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)])
    try:
        assert wait_until(lambda: len(with_marker(marker)) >= 1, timeout_s=20)
    finally:
        runner.kill()
        runner.wait()
    assert wait_until(lambda: not with_marker(marker)), "the sandboxed child outlived its runner"


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
    assert seen["cwd"] == str(tmp_path) and env["HOME"] == env["TMPDIR"] == "/tmp"
    assert env["PYTHONPATH"] == str(REPO)
    assert all(env[k].startswith("/tmp/") for k in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME"))


def test_cuda_backend_pins_one_gpu_and_uses_no_interpreter(tmp_path):
    env = sandbox.child_env(tmp_path, "cuda-h200", 3, threads=2)
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    assert "TRITON_INTERPRET" not in env
    assert env["OMP_NUM_THREADS"] == "2"


def test_a_cuda_job_gets_only_its_gpus_device_files(tmp_path, monkeypatch):
    # Whatever this host has: the pinned GPU's node and the driver's shared ones, never another GPU's.
    nodes, _ = sandbox._gpu_nodes("0")
    out = run_py(tmp_path, "import os; print(sorted(n for n in os.listdir('/dev') if n.startswith('nvidia')))",
                 backend="cuda", gpu=0)
    assert out.stdout_tail.strip() == str(sorted(os.path.basename(n) for n in nodes)), out.stderr_tail
    cpu = run_py(tmp_path, "import os; print(sorted(n for n in os.listdir('/dev') if n.startswith('nvidia')))")
    assert cpu.stdout_tail.strip() == "[]"


def test_file_size_limit(tmp_path):
    code = "open('/tmp/big.bin', 'wb').write(b'x' * (4 << 20))"
    out = run_py(tmp_path, code, limits=Limits(timeout_s=20, file_bytes=1 << 20))
    assert out.exit_code != 0
    assert "File too large" in out.stderr_tail


def test_address_space_limit_on_cpu(tmp_path):
    out = run_py(tmp_path, "x = bytearray(4 << 30)", limits=Limits(timeout_s=20, memory_bytes=512 << 20))
    assert out.exit_code == 1 and out.out_of_memory
    assert "MemoryError" in out.stderr_tail


def test_rss_watchdog_on_cuda_kills_a_memory_hungry_child(tmp_path):
    """CUDA needs a large address space, so on cuda the limit is the RSS of the whole sandbox."""
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


def test_the_job_reads_files_the_runner_wrote_for_itself_alone(tmp_path):
    (tmp_path / "sub").mkdir(mode=0o700)
    (tmp_path / "sub" / "kernel.py").write_text("ok")
    os.chmod(tmp_path / "sub" / "kernel.py", 0o600)
    out = run_py(tmp_path, "print(open('sub/kernel.py').read())")
    assert out.stdout_tail.strip() == "ok", out.stderr_tail


# --- trusted, start(), the setting ----------------------------------------------------------------

def test_a_trusted_command_runs_as_the_runner_and_writes_its_directory(tmp_path):
    code = "import os; open('result.json', 'w').write('{}'); print(os.getuid(), os.environ['HOME'])"
    out = run_py(tmp_path, code, trusted=True)
    assert out.exit_code == 0, out.stderr_tail
    assert out.stdout_tail.split() == [str(os.getuid()), str(tmp_path)] and (tmp_path / "result.json").exists()


def test_start_talks_over_a_socketpair_and_kill_ends_it(tmp_path, marker):
    mine, theirs = socket.socketpair()
    code = """
        import socket, sys, time
        s = socket.socket(fileno=int(sys.argv[1]))
        s.sendall(s.recv(100).upper())
        time.sleep(1000)
    """
    with mine:
        child = sandbox.start([sys.executable, "-c", textwrap.dedent(code), str(theirs.fileno()), marker], tmp_path,
                              backend="cpu", pass_fds=(theirs.fileno(),), limits=Limits(timeout_s=60))
        theirs.close()
        mine.settimeout(20)
        mine.sendall(b"inputs")
        assert mine.recv(100) == b"INPUTS"
        assert child.alive() and child.pid > 0
        with pytest.raises(TimeoutError):
            child.outcome(timeout=0.2)
        child.kill()
    assert not child.alive() and not with_marker(marker)
    out = child.outcome()
    assert out.cancelled and not out.timed_out and out.exit_code == -9


def test_start_enforces_the_time_limit_without_anyone_waiting(tmp_path, marker):
    child = sandbox.start([sys.executable, "-c", "import time; time.sleep(1000)", marker], tmp_path, backend="cpu",
                          limits=Limits(timeout_s=1))
    assert wait_until(lambda: not child.alive(), timeout_s=10) and not with_marker(marker)
    assert child.outcome().timed_out


def test_without_bwrap_untrusted_jobs_are_refused(tmp_path, fresh_isolation):
    fresh_isolation.setenv("KERNELBOT_BWRAP", str(tmp_path / "no-bwrap"))
    iso = sandbox.isolation()
    assert not iso.available and "apt-get install bubblewrap" in iso.reason and "refused" in iso.summary()
    with pytest.raises(sandbox.SandboxUnavailable, match="apt-get install bubblewrap"):
        run_py(tmp_path, "print('ran')")
    assert run_py(tmp_path, "print('ran')", trusted=True).stdout_tail == "ran\n"


def test_the_opt_out_runs_untrusted_jobs_unisolated_and_says_so(tmp_path, fresh_isolation):
    fresh_isolation.setenv("KERNELBOT_SANDBOX", "none")
    iso = sandbox.isolation()
    assert not iso.available and "WITHOUT ANY ISOLATION" in iso.reason and iso.summary().startswith("WARNING")
    out = run_py(tmp_path, "import os; print(os.getuid())")
    assert out.stdout_tail.strip() == str(os.getuid())


def test_an_unknown_sandbox_setting_is_refused_by_name(fresh_isolation):
    fresh_isolation.setenv("KERNELBOT_SANDBOX", "off")
    with pytest.raises(ValueError, match="KERNELBOT_SANDBOX is 'off'; use 'bwrap'"):
        sandbox.isolation()


def test_limits_from_the_environment(monkeypatch):
    monkeypatch.setenv("KERNELBOT_SANDBOX_DISK_GB", "0.5")
    monkeypatch.setenv("KERNELBOT_SANDBOX_SHM_GB", "2")
    limits = Limits.from_env(30)
    assert limits.disk_bytes == 512 * MiB and limits.shm_bytes == 2 << 30 and limits.timeout_s == 30
    assert Limits().disk_bytes == 4 << 30 and Limits().shm_bytes == 1 << 30


def test_files_hint_says_what_the_sandbox_allows():
    assert "/tmp" in sandbox.files_hint("PermissionError: [Errno 13] Permission denied: 'x'")
    assert "read-only" in sandbox.files_hint("OSError: [Errno 30] Read-only file system: 'out.bin'")
    assert sandbox.files_hint("AssertionError: mismatch") == ""
