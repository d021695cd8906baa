"""Run a command in a sandboxed child process.

Untrusted commands (generated code, and whatever runs it) run under bubblewrap (bwrap):
- namespaces of their own: pid, mount, ipc, network, uts, cgroup and user (``--unshare-all``,
  no further user namespaces inside where bwrap can forbid them). The pid namespace means no
  signal reaches the runner or any other host process, and nothing outlives the job: the
  namespace dies with its first process, bwrap's init, which dies with bwrap
  (``--die-with-parent``), which dies with the runner thread that started it (PR_SET_PDEATHSIG);
  after every run the runner also kills whatever is left in the namespace and waits until it is
  empty. The network namespace has only a loopback that is down; abstract unix sockets belong
  to it too, and no host directory with sockets in it is mounted, so no socket leads out;
- a root of read-only binds of only what a job needs: /usr, /bin, /sbin, /lib*, /etc (its
  password hashes masked), the runner's Python (prefixes and import path), the runner package
  (PACKAGE_PARENT/runner, not the repository around it), the CUDA and Triton paths its
  environment names, and the job's directory (read-only, at the same path, the cwd). No /home,
  /root, /run, /var, /srv, /mnt or host /tmp. A fresh /proc, and a /dev with the null, zero,
  random and tty devices plus, on a cuda backend, exactly the pinned GPU's nodes and the
  driver's shared ones;
- the only writable places: a tmpfs at /tmp (HOME, TMPDIR and the Triton and Inductor caches)
  of Limits.disk_bytes, and a private /dev/shm of Limits.shm_bytes; tmpfs pages are memory, so
  both also count against Limits.memory_bytes;
- an unprivileged uid: a runner that is root drops to nobody (65534) before bwrap, so root's
  files stay unreadable inside even where bound. The job's directory is made world-readable for
  it, and directories that uid could not reach (a Python under /root, a 0700 temporary
  directory) are first bound, in a mount namespace of the starting process alone, onto a
  staging directory it can reach.
Every command, trusted or not, gets:
- a new session, and a wall-clock timeout that SIGKILLs everything it started;
- resource limits set before exec: CPU seconds, file size, open files, no core files, and on
  the cpu backend address space (RLIMIT_AS); plus a watchdog that sums, every 0.1 s, the RSS of
  every process the command started (all of its pid namespace, setsid or not) and the size of
  its tmpfs, and kills past Limits.memory_bytes. CUDA maps large virtual ranges, so on cuda the
  watchdog is the only memory limit;
- an environment built from an allowlist, so chat tokens, LLM keys and cloud credentials of the
  runner never reach it; the runner's one GPU is pinned with CUDA_VISIBLE_DEVICES.
trusted=True (the runner's own judge process, never generated code) runs without bwrap or a
uid change, in its directory, which it may write. Without bwrap untrusted commands are refused
(SandboxUnavailable) unless the operator sets KERNELBOT_SANDBOX=none, which runs them as
trusted ones: no isolation at all, and isolation() says so.

What it does not limit: GPU memory (CUDA out-of-memory surfaces as an exception in the child),
the number of processes, memory the kernel holds for the job outside processes and files
(SysV shared memory segments, memfd files and pipe or socket buffers no process maps; a cgroup
memory limit would count those), CPU and GPU time shared with other jobs on the host, and what
the kernel itself exposes to a process in namespaces (a kernel bug is an escape).
"""
from __future__ import annotations

import ctypes
import functools
import glob
import json
import os
import resource
import shutil
import signal
import site
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from runner import protocol, workdirs

GiB = 2**30
# The directory that holds the runner package: on the child's PYTHONPATH so `-m runner.harness` imports.
PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)
# The source tree around the runner package, which a job must not see; none for an installed
# kernelbot, whose package sits in the Python's own site-packages (bound whole).
SOURCE_TREE = None if Path(PACKAGE_PARENT).name in ("site-packages", "dist-packages") else PACKAGE_PARENT

PASS_THROUGH = (
    "PATH", "LANG", "LC_ALL", "TZ",
    # Where CUDA and Triton find the driver and toolchain on a GPU host.
    "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "TRITON_LIBCUDA_PATH", "TRITON_PTXAS_PATH",
    # Hosts that share GPUs keep NVLink multicast off; a child must not turn it back on.
    "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
    "KERNELBOT_CPU_COMPILE",
)
# What a trusted child (the judge, which starts sandboxed workers itself) also gets: how to sandbox.
TRUSTED_PASS_THROUGH = ("KERNELBOT_SANDBOX", "KERNELBOT_BWRAP", "KERNELBOT_BWRAP_LIBS")
# Of PASS_THROUGH, the ones that name files or directories the child needs: bound read-only.
TOOL_PATHS = ("LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "TRITON_LIBCUDA_PATH", "TRITON_PTXAS_PATH")
# How running out of memory reads in an error message: RLIMIT_AS, torch's CPU and CUDA allocators.
MEMORY_MARKERS = ("MemoryError", "std::bad_alloc", "OutOfMemoryError", "out of memory", "can't allocate memory")
SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
# The system's directories an untrusted child sees (read-only; a symlink stays a symlink).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
SECRET_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
# The driver's nodes every CUDA process needs, besides its GPU's /dev/nvidiaN.
GPU_SHARED_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-caps")
SCRATCH = Path("/tmp")     # inside the sandbox: the writable tmpfs
NOBODY = 65534
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap), or point KERNELBOT_BWRAP at a "
                "bwrap binary (KERNELBOT_BWRAP_LIBS: a directory of the libraries it needs)")
_PR_SET_PDEATHSIG = 1
_CLONE_NEWNS = 0x00020000
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18
_LIBC = ctypes.CDLL(None, use_errno=True)


class SandboxUnavailable(RuntimeError):
    """An untrusted command was to run, and this host cannot isolate it; the message says what is
    missing and how to fix it."""


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 600.0
    memory_bytes: int = 16 * GiB     # summed RSS of everything the job started plus its tmpfs; also RLIMIT_AS on cpu
    file_bytes: int = 1 * GiB        # largest file the child may write
    open_files: int = 4096
    threads: int = 4                 # OMP_NUM_THREADS; also scales the CPU-seconds limit
    disk_bytes: int = 4 * GiB        # the sandbox's /tmp (HOME, TMPDIR, caches): all it may write
    shm_bytes: int = 1 * GiB         # the sandbox's own /dev/shm

    @property
    def cpu_s(self) -> int:
        return int(self.timeout_s * max(1, self.threads)) + 30

    @classmethod
    def from_env(cls, timeout_s: float) -> "Limits":
        """Limits for a job; a host sets KERNELBOT_SANDBOX_MEMORY_GB / _THREADS / _DISK_GB / _SHM_GB to fit its size."""
        env = os.environ

        def gib(name: str, default: float) -> int:
            return int(float(env.get(name, default)) * GiB)
        return cls(timeout_s=timeout_s, memory_bytes=gib("KERNELBOT_SANDBOX_MEMORY_GB", 16),
                   threads=int(env.get("KERNELBOT_SANDBOX_THREADS", 4)),
                   disk_bytes=gib("KERNELBOT_SANDBOX_DISK_GB", 4), shm_bytes=gib("KERNELBOT_SANDBOX_SHM_GB", 1))


@dataclass
class Outcome:
    exit_code: int | None            # negative: killed by that signal
    timed_out: bool
    killed_for_memory: bool
    cancelled: bool                  # the cancel event was set, or Child.kill() was called
    duration_s: float
    peak_rss_bytes: int              # the most the memory watchdog counted: RSS of all processes plus tmpfs
    stdout_tail: str
    stderr_tail: str

    @property
    def signal_name(self) -> str | None:
        if self.exit_code is None or self.exit_code >= 0:
            return None
        try:
            return signal.Signals(-self.exit_code).name
        except ValueError:
            return f"signal {-self.exit_code}"

    @property
    def out_of_memory(self) -> bool:
        """Killed by the RSS watchdog, or an allocation refused under RLIMIT_AS / by CUDA."""
        return self.killed_for_memory or mentions_memory(self.stderr_tail)


@dataclass(frozen=True)
class Isolation:
    """What this host gives untrusted commands: see isolation()."""
    available: bool
    tool: str                        # the bwrap binary ('' where none was found)
    uid: int                         # the uid untrusted commands run as
    isolates: tuple[str, ...]        # what it isolates, in a few words each
    reason: str = ""                 # why it is not available (or that the operator turned it off)

    def summary(self) -> str:
        """One line for the runner's start message."""
        if self.available:
            return f"sandboxed jobs run under {self.tool} as uid {self.uid}: {'; '.join(self.isolates)}"
        if _mode() == "none":
            return f"WARNING: {self.reason}"
        return (f"WARNING: no sandbox: {self.reason}; untrusted jobs are refused until that is fixed "
                f"(KERNELBOT_SANDBOX=none runs them without isolation)")


def require_isolation() -> None:
    """SandboxUnavailable, saying what is missing, where untrusted code would be refused here."""
    if _mode() == "bwrap" and not isolation().available:
        raise SandboxUnavailable(f"untrusted code is not run without a sandbox: {isolation().reason}")


def mentions_memory(text: str) -> bool:
    return any(m in text for m in MEMORY_MARKERS)


def files_hint(text: str) -> str:
    """For an error that a refused file access explains: what the sandbox allows."""
    if "No space left on device" in text:
        return (" (a sandboxed job may write only in /tmp, a tmpfs of KERNELBOT_SANDBOX_DISK_GB, and /dev/shm, "
                "of KERNELBOT_SANDBOX_SHM_GB)")
    if not any(m in text for m in ("PermissionError", "Permission denied", "Read-only file system",
                                   "FileNotFoundError", "No such file or directory")):
        return ""
    return (" (a sandboxed job may write only in /tmp, which is also its HOME and TMPDIR, and /dev/shm: its own "
            "directory is read-only; it sees only that directory, the system's directories, the runner's Python "
            "and the runner package)")


def child_env(workdir: Path, backend: str, gpu: int | None, threads: int, *,
              scratch: Path | None = None) -> dict[str, str]:
    """The child's whole environment: allowlisted names only, minus anything that looks secret.
    HOME, TMPDIR and the caches go in scratch (the sandbox's /tmp), else in workdir."""
    env = {k: v for k, v in os.environ.items() if k in PASS_THROUGH and not _looks_secret(k)}
    env.setdefault("PATH", os.defpath)
    home = Path(scratch or workdir)
    env.update(
        HOME=str(home), TMPDIR=str(home if scratch else workdir / "tmp"), XDG_CACHE_HOME=str(home / ".cache"),
        PYTHONPATH=PACKAGE_PARENT, PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", PYTHONNOUSERSITE="1",
        TRITON_CACHE_DIR=str(home / ".triton"), TORCHINDUCTOR_CACHE_DIR=str(home / ".inductor"),
        MPLBACKEND="Agg", OMP_NUM_THREADS=str(threads),
        # torch.compile's worker pool is one process per core by default, each with torch loaded:
        # on a many-core GPU host their summed RSS outgrows the memory watchdog.
        TORCHINDUCTOR_COMPILE_THREADS=str(threads),
    )
    if protocol.device_type(backend) == "cpu":
        env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    else:
        env["CUDA_VISIBLE_DEVICES"] = pinned_gpu(gpu)
    return env


def _looks_secret(name: str) -> bool:
    upper = name.upper()
    return upper.startswith("AWS_") or any(m in upper for m in SECRET_MARKERS)


def pinned_gpu(gpu: int | None) -> str:
    """The one GPU a child sees: the runner's --gpu, else the first the runner itself may use."""
    if gpu is not None:
        return str(gpu)
    return os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or "0"


def python_cmd(*args: str) -> list[str]:
    """A command line for the runner's own interpreter (same torch, triton, pytest)."""
    return [sys.executable, *args]


# --- running ---------------------------------------------------------------------------------

def run(cmd: list[str], workdir: Path, *, backend: str, gpu: int | None = None, limits: Limits = Limits(),
        on_line: Callable[[str], None] | None = None, cancel: threading.Event | None = None,
        trusted: bool = False, pass_fds: tuple[int, ...] = ()) -> Outcome:
    """Run cmd in workdir, under bwrap unless trusted; on_line gets each stdout line as it comes.
    Returns once the child and everything it started are gone."""
    return _spawn(cmd, workdir, backend, gpu, limits, on_line, cancel, trusted, pass_fds).outcome()


def start(cmd: list[str], workdir: Path, *, backend: str, gpu: int | None = None, limits: Limits = Limits(),
          pass_fds: tuple[int, ...] = (), on_line: Callable[[str], None] | None = None,
          env: dict[str, str] | None = None) -> "Child":
    """Start cmd under bwrap as run() would, and return at once; its limits hold from now on.
    pass_fds: fds it inherits at the same numbers (a socketpair's end, say); env: variables the
    caller sets on top of the sandbox's own. Like run(), the child dies with the thread that
    called this (PR_SET_PDEATHSIG): call it from one that lasts."""
    return _spawn(cmd, workdir, backend, gpu, limits, on_line, None, False, pass_fds, env or {})


class Child:
    """A running sandboxed command; a watchdog thread enforces its limits from the start."""

    def __init__(self, proc: subprocess.Popen, limits: Limits, started: float, init: tuple[int, int] | None,
                 on_line: Callable[[str], None] | None, cancel: threading.Event | None,
                 cleanup: Callable[[], None]) -> None:
        self.pid = proc.pid
        self._proc, self._limits, self._started, self._cancel = proc, limits, started, cancel
        self._init = init              # (host pid, pid-namespace inode) of bwrap's init, when isolated
        self._cleanup = cleanup
        self._stop = threading.Event()
        self._done = threading.Event()
        self._stopped_for, self._peak, self._ended = "", 0, started
        self._out, self._err = _Tail(), _Tail()
        self._readers = [threading.Thread(target=_pump, args=(proc.stdout, self._out, on_line), daemon=True),
                         threading.Thread(target=_pump, args=(proc.stderr, self._err, None), daemon=True)]
        for t in self._readers:
            t.start()
        threading.Thread(target=self._watch, name=f"sandbox-{proc.pid}", daemon=True).start()

    def alive(self) -> bool:
        return not self._done.is_set()

    def kill(self) -> None:
        """Kill everything in it; returns once all of it is gone."""
        self._stop.set()
        self._done.wait()

    def outcome(self, timeout: float | None = None) -> Outcome:
        """Wait until it and everything it started are gone (TimeoutError after timeout seconds)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"sandboxed process {self.pid} still running after {timeout} s")
        code = self._proc.returncode
        # bwrap's init reports a command killed by signal N as exit status 128 + N.
        if self._init is not None and code is not None and 128 < code <= 128 + 64:
            code = 128 - code
        why = self._stopped_for
        return Outcome(code, why == "timeout", why == "memory", why == "cancel", self._ended - self._started,
                       self._peak, self._out.text(), self._err.text())

    def _watch(self) -> None:
        try:
            self._stopped_for = self._poll()
        finally:
            self._kill_all()
            self._proc.wait()
            self._ended = time.monotonic()
            for t in self._readers:
                t.join(timeout=5)
            self._cleanup()
            self._done.set()

    def _exited(self) -> bool:
        """Whether the child has exited; it is not reaped (so its pid names no other process)
        until everything it started is gone."""
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def _poll(self) -> str:
        """Until the child exits (''), or must be stopped ('timeout', 'memory', 'cancel')."""
        while not self._exited():
            used = self._memory()
            self._peak = max(self._peak, used)
            if time.monotonic() - self._started > self._limits.timeout_s:
                return "timeout"
            if used > self._limits.memory_bytes:
                return "memory"
            if self._stop.is_set() or (self._cancel is not None and self._cancel.is_set()):
                return "cancel"
            self._stop.wait(0.1)
        return ""

    def _memory(self) -> int:
        """RSS of every process it started, plus what its tmpfs mounts hold."""
        table = _recent_processes()
        members = _tree(table, self.pid) | {p for p, (_, sid, _) in table.items() if sid == self.pid}
        used = sum(table[p][2] for p in members if p in table)    # the root may have just gone
        if self._init is not None:
            # Through a process the init started: its root is the sandbox's (the init's own is the
            # host's until bwrap has set the sandbox up).
            inner = next((p for p, (ppid, _, _) in table.items() if ppid == self._init[0]), None)
            if inner is not None:
                used += sum(_tmpfs_used(f"/proc/{inner}/root{mount}") for mount in ("/tmp", "/dev/shm"))
        return used

    def _kill_all(self) -> None:
        """SIGKILL the whole pid namespace (its init first: the kernel then kills the rest), the
        process group and session, and anything descended from the child; then wait until every
        one of them is gone."""
        for _ in range(100):
            table = _processes()
            doomed = _tree(table, self.pid) | {p for p, (_, sid, _) in table.items() if sid == self.pid}
            if self._init is not None:
                doomed |= _in_namespace(table, self._init[1])
            doomed.discard(os.getpid())
            live = {p for p in doomed if p != self.pid and _running(p)}
            if self._exited() and not live:
                return
            if self._init is not None and self._init[0] in live:
                _kill(self._init[0])
            for pid in live:
                _kill(pid)
            if not self._exited():
                try:
                    os.killpg(self.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    _kill(self.pid)
            time.sleep(0.05)


def _spawn(cmd: list[str], workdir: Path, backend: str, gpu: int | None, limits: Limits,
           on_line: Callable[[str], None] | None, cancel: threading.Event | None, trusted: bool,
           pass_fds: tuple[int, ...], extra_env: dict[str, str] | None = None) -> Child:
    workdir = Path(workdir).absolute()
    isolated = not trusted and _mode() == "bwrap"
    if isolated:
        require_isolation()
        workdir.mkdir(parents=True, exist_ok=True)
        plan = _Wrapper(cmd, workdir, backend, gpu, limits)
        plan.env.update(extra_env or {})
        info_read, info_write = os.pipe()
        argv, env, cwd, fds = plan.argv(info_write), plan.bwrap_env(), "/", (*pass_fds, info_write)
        setup = _child_setup(limits, protocol.device_type(backend) == "cpu", plan.staged, plan.uid)
    else:
        (workdir / "tmp").mkdir(parents=True, exist_ok=True)
        plan, info_read, info_write = None, -1, -1
        env = child_env(workdir, backend, gpu, limits.threads)
        if trusted:
            env.update({k: v for k, v in os.environ.items() if k in TRUSTED_PASS_THROUGH})
        env.update(extra_env or {})
        argv, cwd, fds = cmd, workdir, tuple(pass_fds)
        setup = _child_setup(limits, protocol.device_type(backend) == "cpu", [], None)
    started = time.monotonic()
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, preexec_fn=setup, pass_fds=fds)
    except BaseException:
        if plan is not None:
            os.close(info_read)
            plan.cleanup()
        raise
    finally:
        if plan is not None:
            os.close(info_write)
    init = _read_info(info_read) if plan is not None else None
    return Child(proc, limits, started, init, on_line, cancel, plan.cleanup if plan is not None else lambda: None)


def _read_info(fd: int) -> tuple[int, int] | None:
    """(host pid, pid-namespace inode) of bwrap's init, from bwrap's --info-fd; None if bwrap
    failed before starting it."""
    data = b""
    try:
        while b"}" not in data:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    try:
        info = json.loads(data)
        return int(info["child-pid"]), int(info["pid-namespace"])
    except (ValueError, KeyError, TypeError):
        return None


def _child_setup(limits: Limits, address_space: bool, staged: list[tuple[str, str]],
                 uid: int | None) -> Callable[[], None]:
    """Runs in the child between fork and exec, where only plain system calls belong: everything
    is computed here in the parent first. staged: (source, staging dir) pairs to bind, in a
    mount namespace of this child alone, before it drops to uid (None: keep the runner's)."""
    wanted = [(resource.RLIMIT_CPU, limits.cpu_s, limits.cpu_s + 5),
              (resource.RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes),
              (resource.RLIMIT_CORE, 0, 0),
              (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files)]
    if address_space:
        wanted.append((resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes))
    plan = [(res, *_clamp(res, soft, hard)) for res, soft, hard in wanted]
    binds = [(os.fsencode(src), os.fsencode(dst)) for src, dst in staged]

    def apply() -> None:
        if binds:
            _bind_privately(binds)
        if uid is not None and uid != os.getuid():
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        # After the uid change, which clears it.
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        for res, soft, hard in plan:
            resource.setrlimit(res, (soft, hard))
    return apply


def _bind_privately(binds: list[tuple[bytes, bytes]]) -> None:
    """In a new mount namespace of the calling process (root's), bind each source on its target."""
    if _LIBC.unshare(_CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS) to stage the sandbox's binds")
    if _LIBC.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "making / private to stage the sandbox's binds")
    for src, dst in binds:
        if _LIBC.mount(src, dst, None, _MS_BIND | _MS_REC, None) != 0:
            raise OSError(ctypes.get_errno(), f"binding {src.decode()} to stage it for the sandbox")


def _clamp(res: int, soft: int, hard: int) -> tuple[int, int]:
    """An unprivileged process cannot raise its hard limit: stay within the runner's own."""
    _, current_hard = resource.getrlimit(res)
    if current_hard != resource.RLIM_INFINITY:
        hard = min(hard, current_hard)
    return min(soft, hard), hard


# --- the bwrap command line ------------------------------------------------------------------

class _Wrapper:
    """The bwrap command line of one untrusted command, and what it needs set up around it."""

    def __init__(self, cmd: list[str], workdir: Path, backend: str, gpu: int | None, limits: Limits,
                 tool: str | None = None) -> None:
        self.cmd, self.workdir, self.limits = cmd, workdir, limits
        self.tool = tool or isolation().tool
        self.uid = NOBODY if os.getuid() == 0 else os.getuid()
        self.env = child_env(workdir, backend, gpu, limits.threads, scratch=SCRATCH)
        self.gpu_nodes: list[str] = []
        if protocol.device_type(backend) != "cpu":
            self.gpu_nodes, visible = _gpu_nodes(pinned_gpu(gpu))
            self.env["CUDA_VISIBLE_DEVICES"] = visible
        if self.uid != os.getuid():
            _share(workdir)
        self.staging: str | None = None
        self.staged: list[tuple[str, str]] = []
        self.binds = [(src, src) for src in (*_python_dirs(), *_tool_paths(self.env))] + [(str(workdir), str(workdir))]
        if self.uid != os.getuid():
            self.binds = [(self._stage(src) if not _reachable(src, self.uid) else src, dst) for src, dst in self.binds]

    def _stage(self, src: str) -> str:
        """A directory uid can reach on which the child (root, before it drops) binds src."""
        if self.staging is None:
            self.staging = workdirs.staging_dir()
            os.chmod(self.staging, 0o755)
        target = os.path.join(self.staging, str(len(self.staged)))
        if os.path.isdir(src):
            os.mkdir(target, 0o755)
        else:
            Path(target).touch(0o644)
        self.staged.append((src, target))
        return target

    def argv(self, info_fd: int | None = None) -> list[str]:
        """info_fd: where bwrap writes its init's pid and namespaces."""
        args = [self.tool, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
                "--hostname", "sandbox"]
        if "--disable-userns" in _help(self.tool):
            args.append("--disable-userns")     # no nested user namespace: no capabilities regained inside
        if info_fd is not None:
            args += ["--info-fd", str(info_fd)]
        for path in SYSTEM_DIRS:
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        args += [a for path in SECRET_FILES if os.path.exists(path) for a in ("--ro-bind", "/dev/null", path)]
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += [a for node in self.gpu_nodes for a in ("--dev-bind", node, node)]
        args += ["--size", str(self.limits.shm_bytes), "--tmpfs", "/dev/shm",
                 "--size", str(self.limits.disk_bytes), "--tmpfs", str(SCRATCH)]
        # After /tmp's tmpfs: a job directory under /tmp is bound inside it.
        args += [a for src, dst in self.binds for a in ("--ro-bind", src, dst)]
        args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", str(self.workdir), "--clearenv"]
        args += [a for name, value in self.env.items() for a in ("--setenv", name, value)]
        return [*args, "--", *self.cmd]

    def bwrap_env(self) -> dict[str, str]:
        """bwrap's own environment (the child's is set with --setenv): KERNELBOT_BWRAP_LIBS for its libraries."""
        env = {"PATH": os.environ.get("PATH", os.defpath)}
        libs = os.environ.get("KERNELBOT_BWRAP_LIBS")
        if libs:
            env["LD_LIBRARY_PATH"] = libs
        return env

    def cleanup(self) -> None:
        """Remove the staging directory (never recursively: runner.workdirs.remove_staging)."""
        if self.staging is not None:
            workdirs.remove_staging(self.staging, [target for _, target in self.staged])


def _share(workdir: Path) -> None:
    """Make the job's directory readable to others (the sandbox's uid): dirs +rx, files +r."""
    for root, dirs, files in os.walk(workdir):
        for name in [root, *(os.path.join(root, d) for d in dirs), *(os.path.join(root, f) for f in files)]:
            st = os.lstat(name)
            if stat.S_ISLNK(st.st_mode):
                continue
            extra = 0o055 if stat.S_ISDIR(st.st_mode) or st.st_mode & 0o100 else 0o044
            if st.st_mode & extra != extra:
                os.chmod(name, stat.S_IMODE(st.st_mode) | extra)


def _reachable(path: str, uid: int) -> bool:
    """Whether uid (gid the same, no other groups) may look path up: every directory above it searchable."""
    for parent in Path(path).parents:
        st = os.stat(parent)
        bit = stat.S_IXUSR if st.st_uid == uid else stat.S_IXGRP if st.st_gid == uid else stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def _covered(path: str, dirs: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def _exposes(path: str) -> bool:
    """Whether binding path would show the repository around the runner package or a home directory."""
    kept = [p for p in (SOURCE_TREE, os.path.expanduser("~")) if p]
    return path == "/" or any(k == path or k.startswith(path.rstrip("/") + "/") for k in kept)


def _minimal(paths: list[str]) -> list[str]:
    """Existing, distinct paths not under the system directories or each other, none that exposes too much."""
    found: list[str] = []
    for path in sorted({os.path.abspath(p) for p in paths if p and os.path.isabs(p) and os.path.exists(p)}):
        if not _exposes(path) and not _covered(path, [*SYSTEM_DIRS, *found]):
            found.append(path)
    return found


@functools.cache
def _python_dirs() -> list[str]:
    """What the runner's Python needs: its prefixes, standard library and site-packages, the import
    path entries inside those, its executable's directory and the runner package (PACKAGE_PARENT/
    runner alone: `-m runner.harness` imports it). Other import path entries are not bound: '' or
    a script's directory would be the current directory (a home, /tmp, the whole repository)."""
    prefixes = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    installed = [*prefixes, *sysconfig.get_paths().values(), *site.getsitepackages()]
    found = [p for p in sys.path if p and (_covered(os.path.abspath(p), installed)
                                           or os.path.basename(p) in ("site-packages", "dist-packages"))]
    python = [*installed, *found, os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))]
    # Of the repository, only a virtual environment in it.
    python = [p for p in python if os.path.isdir(p) and (SOURCE_TREE is None
                                                         or not _covered(os.path.abspath(p), [SOURCE_TREE])
                                                         or _covered(os.path.abspath(p), prefixes))]
    return _minimal(python + [os.path.join(PACKAGE_PARENT, "runner")])


def _tool_paths(env: dict[str, str]) -> list[str]:
    """The files and directories the child's environment names for CUDA and Triton."""
    return _minimal([p for name in TOOL_PATHS for p in env.get(name, "").split(os.pathsep)])


@functools.cache
def _gpu_nodes(pinned: str) -> tuple[list[str], str]:
    """The device files a cuda child gets (the pinned GPU's /dev/nvidiaN and the driver's shared
    nodes), and what its CUDA_VISIBLE_DEVICES becomes: the GPU's UUID where nvidia-smi tells it,
    which picks the same GPU whether CUDA counts every GPU or only those whose node it sees.
    Where the pinned GPU's node cannot be told, every GPU's node is bound (said once on stderr)."""
    uuids = _gpu_uuids()
    uuid = uuids.get(pinned, pinned if pinned.startswith("GPU-") else "")
    minors = _gpu_minors()
    index = next((i for i, u in uuids.items() if u == uuid), pinned)
    minor = minors.get(uuid, index)
    own = f"/dev/nvidia{minor}"
    if minor.isdigit() and os.path.exists(own):
        nodes = [own]
    else:
        nodes = sorted(glob.glob("/dev/nvidia[0-9]*"))
        if nodes:
            print(f"sandbox: cannot tell the device file of GPU {pinned}: sandboxed jobs get every GPU's "
                  f"({', '.join(nodes)}); CUDA_VISIBLE_DEVICES still pins one", file=sys.stderr, flush=True)
    return nodes + [n for n in GPU_SHARED_NODES if os.path.exists(n)], uuid or pinned


def _gpu_uuids() -> dict[str, str]:
    """nvidia-smi's index -> UUID of each GPU ({} without nvidia-smi)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    rows = [line.split(",") for line in out.splitlines() if line.count(",") == 1]
    return {index.strip(): uuid.strip() for index, uuid in rows}


def _gpu_minors() -> dict[str, str]:
    """UUID -> the minor number of its /dev/nvidiaN, from the driver's /proc/driver/nvidia/gpus."""
    minors = {}
    for path in glob.glob("/proc/driver/nvidia/gpus/*/information"):
        try:
            fields = dict(line.split(":", 1) for line in Path(path).read_text().splitlines() if ":" in line)
        except OSError:
            continue
        uuid, minor = fields.get("GPU UUID", "").strip(), fields.get("Device Minor", "").strip()
        if uuid and minor:
            minors[uuid] = minor
    return minors


# --- is there a sandbox ------------------------------------------------------------------------

def _mode() -> str:
    """KERNELBOT_SANDBOX: 'bwrap' (the default: untrusted commands run under bwrap, or not at
    all) or 'none' (the operator's opt-out: they run unisolated). Any other value is refused."""
    mode = os.environ.get("KERNELBOT_SANDBOX", "bwrap")
    if mode not in ("bwrap", "none"):
        raise ValueError(f"KERNELBOT_SANDBOX is {mode!r}; use 'bwrap' (the default: untrusted jobs run under "
                         f"bubblewrap, or are refused) or 'none' (they run without isolation)")
    return mode


def _bwrap() -> tuple[str, str]:
    """(the bwrap binary, '') or ('', why there is none)."""
    configured = os.environ.get("KERNELBOT_BWRAP")
    if configured:
        if os.path.isfile(configured) and os.access(configured, os.X_OK):
            return os.path.abspath(configured), ""
        return "", f"KERNELBOT_BWRAP={configured} is not an executable file"
    found = shutil.which("bwrap")
    return (found, "") if found else ("", "bwrap (bubblewrap) is not on PATH")


@functools.cache
def _help(tool: str) -> str:
    try:
        env = {"LD_LIBRARY_PATH": os.environ["KERNELBOT_BWRAP_LIBS"]} if os.environ.get("KERNELBOT_BWRAP_LIBS") else {}
        return subprocess.run([tool, "--help"], capture_output=True, text=True, timeout=30, env=env).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


@functools.cache
def isolation() -> Isolation:
    """What untrusted commands get here, probed once per process: the whole wrapper run around
    the runner's Python importing the runner package."""
    uid = NOBODY if os.getuid() == 0 else os.getuid()
    if _mode() == "none":
        return Isolation(False, "", os.getuid(), (), "KERNELBOT_SANDBOX=none: untrusted jobs run WITHOUT ANY "
                         f"ISOLATION, as uid {os.getuid()}, with this host's files, network and processes "
                         "(only the environment allowlist, resource limits and the timeout apply)")
    tool, missing = _bwrap()
    if not tool:
        return Isolation(False, "", uid, (), f"{missing}: {INSTALL_HINT}")
    if "--size" not in _help(tool):
        return Isolation(False, tool, uid, (), f"{tool} is too old (no --size for its tmpfs; 0.7 or later needed): "
                         f"{INSTALL_HINT}")
    reason = _probe(tool, uid)
    if reason:
        return Isolation(False, tool, uid, (), reason)
    return Isolation(True, tool, uid, (
        "own pid, mount, ipc, network, uts, cgroup and user namespaces", f"uid {uid}",
        "read-only system, Python and job directory", "writable only a size-limited /tmp and /dev/shm",
        "no network or sockets out", "only the pinned GPU's device files"))


def _probe(tool: str, uid: int) -> str:
    """'' if the wrapper runs the runner's Python here, else why not."""
    with tempfile.TemporaryDirectory(prefix="kernelbot-probe-") as tmp:
        limits = Limits(timeout_s=60, memory_bytes=4 * GiB, disk_bytes=16 << 20, shm_bytes=1 << 20)
        code = "import runner; open('/tmp/probe', 'w').write('ok')"
        plan = _Wrapper([sys.executable, "-c", code], Path(tmp), "cpu", None, limits, tool=tool)
        try:
            proc = subprocess.run(plan.argv(), cwd="/", env=plan.bwrap_env(), capture_output=True, text=True,
                                  timeout=120, preexec_fn=_child_setup(limits, False, plan.staged, plan.uid))
        except (OSError, subprocess.SubprocessError) as e:
            return f"{tool} could not be started here as uid {uid} ({e}): {INSTALL_HINT}"
        finally:
            plan.cleanup()
    if proc.returncode == 0:
        return ""
    said = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
    unreadable = [p for p in _python_dirs() if not _readable_by(p, uid)]
    hint = (f"; the runner's Python is not readable by uid {uid}: {', '.join(unreadable)} (make it world-readable, "
            f"or run the runner as a user that owns it)" if unreadable else "")
    return (f"{tool} could not run the runner's Python ({sys.executable}) in a sandbox as uid {uid}: {said}{hint}; "
            f"unprivileged user namespaces may be turned off here (sysctl kernel.unprivileged_userns_clone, "
            f"user.max_user_namespaces, or AppArmor's kernel.apparmor_restrict_unprivileged_userns)")


def _readable_by(path: str, uid: int) -> bool:
    st = os.stat(path)
    shift = 6 if st.st_uid == uid else 3 if st.st_gid == uid else 0
    need = 0o5 if stat.S_ISDIR(st.st_mode) else 0o4
    return (st.st_mode >> shift) & need == need


# --- processes and memory ----------------------------------------------------------------------

_last_scan: tuple[float, dict[int, tuple[int, int, int]]] = (0.0, {})
_scan_lock = threading.Lock()


def _recent_processes(max_age_s: float = 0.05) -> dict[int, tuple[int, int, int]]:
    """_processes(), shared by the watchdogs of every sandbox this process runs (a judge runs several)."""
    global _last_scan
    with _scan_lock:
        if time.monotonic() - _last_scan[0] > max_age_s:
            _last_scan = (time.monotonic(), _processes())
        return _last_scan[1]


def _processes() -> dict[int, tuple[int, int, int]]:
    """pid -> (ppid, session id, rss bytes) of every process, read from /proc."""
    page = os.sysconf("SC_PAGE_SIZE")
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue   # the process exited while we looked
        # fields[0] is field 3 of proc(5): state; ppid is field 4, session 6, rss (pages) 24.
        table[int(entry)] = (int(fields[1]), int(fields[3]), int(fields[21]) * page)
    return table


def _tree(table: dict[int, tuple[int, int, int]], root: int) -> set[int]:
    """root and every process descended from it."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def _in_namespace(table: dict[int, tuple[int, int, int]], inode: int) -> set[int]:
    found = set()
    for pid in table:
        try:
            if os.stat(f"/proc/{pid}/ns/pid").st_ino == inode:
                found.add(pid)
        except OSError:
            pass
    return found


def _tmpfs_used(path: str) -> int:
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def _running(pid: int) -> bool:
    """Running, as opposed to gone or a zombie nobody has reaped yet."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _Tail:
    """The last max_chars of a stream, kept as whole lines."""

    def __init__(self, max_chars: int = 20000) -> None:
        self.lines: deque[str] = deque()
        self.size = 0
        self.max_chars = max_chars
        self.lock = threading.Lock()

    def add(self, line: str) -> None:
        with self.lock:
            self.lines.append(line)
            self.size += len(line)
            while self.size > self.max_chars and len(self.lines) > 1:
                self.size -= len(self.lines.popleft())

    def text(self) -> str:
        with self.lock:
            return "".join(self.lines)[-self.max_chars:]


def _pump(stream, tail: _Tail, on_line: Callable[[str], None] | None) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace")
        tail.add(line)
        if on_line is not None:
            on_line(line.rstrip("\n"))
    stream.close()
