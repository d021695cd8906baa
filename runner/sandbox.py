"""Run a command in a sandboxed child process.

What it enforces:
- its own working directory (also HOME, TMPDIR and the Triton / Inductor caches);
- a new session (``start_new_session``), and a wall-clock timeout that SIGKILLs the whole
  process group and every other process left in the session (grandchildren included);
  the same sweep runs after every normal exit, so nothing generated outlives its run;
- the child is SIGKILLed if the runner thread that started it dies first (PR_SET_PDEATHSIG),
  so a runner killed mid-job leaves no generated code running on its GPU;
- resource limits set in the child before exec: CPU seconds, file size, open files, no core
  files, and on the cpu backend address space (RLIMIT_AS); plus a watchdog that sums the RSS of
  the session's processes from /proc and kills past the same limit. CUDA maps large virtual
  ranges, so on cuda the watchdog is the only memory limit;
- an environment built from an allowlist, so chat tokens, LLM keys and cloud credentials of the
  runner never reach generated code; the runner's one GPU is pinned with CUDA_VISIBLE_DEVICES;
- no network: the child gets network and user namespaces of its own (unshare, before exec), so
  it has no interface but a loopback that is down, and reaches neither other hosts nor the
  runner's. Where the kernel refuses unprivileged namespaces (network_isolation() says so), the
  child runs with the runner's network; KERNELBOT_SANDBOX_NETWORK=host asks for that anyway;
- writes only in its working directory, under /dev (the GPU's device files, /dev/shm) and under
  /proc (CUDA's driver writes there as it starts: on an H200 it fails with error 304 without;
  a process may write there only its own entries and what its user could set anyway): a
  Landlock ruleset (Linux 5.13+) denies creating, changing, renaming or removing files anywhere
  else, so generated code cannot touch the repository, the runner's database or the user's
  files. write_isolation() tries it once per device type (a Triton kernel on a torch tensor, and
  torch.compile where benchmarks time it; a pass is remembered in ~/.cache/kernelbot), and where
  that fails the child may write anywhere the runner may; KERNELBOT_SANDBOX_WRITES=any
  asks for that;
- reads only its working directory, the system's directories (READABLE_SYSTEM_DIRS) and the
  runner's Python and packages, by the same Landlock ruleset: generated code cannot read the
  user's files, the bot's database or the repository and print them into its output, which is
  posted to the chat. read_isolation() probes it the same way; KERNELBOT_SANDBOX_READS=any
  lifts it.

What it does not limit: processes that start a session of their own (setsid), GPU memory (CUDA
out-of-memory surfaces as an exception in the child) and the number of processes.
Generated code also shares the harness's process. runner.guard refuses, before import, the ways
to patch what measures it that can be read off the text (attribute writes, setattr, other
streams); code that mutates torch's state through method calls could still tamper with it. The
sandbox contains mistakes and runaway code, not a determined attacker.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from runner import protocol

GiB = 2**30
# The directory that holds the runner package: on the child's PYTHONPATH so `-m runner.harness` imports.
PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)

PASS_THROUGH = (
    "PATH", "LANG", "LC_ALL", "TZ",
    # Where CUDA and Triton find the driver and toolchain on a GPU host.
    "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "TRITON_LIBCUDA_PATH", "TRITON_PTXAS_PATH",
    # Hosts that share GPUs keep NVLink multicast off; a child must not turn it back on.
    "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
    "KERNELBOT_CPU_COMPILE",
)
# How running out of memory reads in an error message: RLIMIT_AS, torch's CPU and CUDA allocators.
MEMORY_MARKERS = ("MemoryError", "std::bad_alloc", "OutOfMemoryError", "out of memory", "can't allocate memory")
_PR_SET_PDEATHSIG = 1
_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
_PR_SET_NO_NEW_PRIVS = 38
# Landlock system calls (the same numbers on x86-64 and arm64) and its filesystem rights that
# write: WRITE_FILE and REMOVE_DIR .. MAKE_SYM (ABI 1), REFER (ABI 2), TRUNCATE (ABI 3); and that
# read: EXECUTE, READ_FILE, READ_DIR (ABI 1). Device ioctls (CUDA's) stay unrestricted.
_LANDLOCK_CREATE_RULESET, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_RULE_PATH_BENEATH = 1
_LANDLOCK_WRITES = {1: 1 << 1 | sum(1 << bit for bit in range(4, 13)), 2: 1 << 13, 3: 1 << 14}
_LANDLOCK_EXECUTE, _LANDLOCK_READ_FILE, _LANDLOCK_READ_DIR = 1 << 0, 1 << 2, 1 << 3
_LANDLOCK_READS = _LANDLOCK_EXECUTE | _LANDLOCK_READ_FILE | _LANDLOCK_READ_DIR
WRITABLE_SYSTEM_DIRS = ("/dev", "/proc")
# What a child may read besides its own directory and the runner's Python (its prefixes and import
# path): programs, libraries, settings, devices and the kernel's interfaces (CUDA reads /proc and
# /sys). Not /home, /root, /tmp, /var or /srv: users' files, the bot's database, other jobs.
READABLE_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt", "/dev", "/proc", "/sys")
_LIBC = ctypes.CDLL(None, use_errno=True)
SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 600.0
    memory_bytes: int = 16 * GiB     # summed RSS of the session; also RLIMIT_AS on cpu
    file_bytes: int = 1 * GiB        # largest file the child may write
    open_files: int = 4096
    threads: int = 4                 # OMP_NUM_THREADS; also scales the CPU-seconds limit

    @property
    def cpu_s(self) -> int:
        return int(self.timeout_s * max(1, self.threads)) + 30

    @classmethod
    def from_env(cls, timeout_s: float) -> "Limits":
        """Limits for a job; a host sets KERNELBOT_SANDBOX_MEMORY_GB / _THREADS to fit its size."""
        env = os.environ
        return cls(timeout_s=timeout_s,
                   memory_bytes=int(float(env.get("KERNELBOT_SANDBOX_MEMORY_GB", 16)) * GiB),
                   threads=int(env.get("KERNELBOT_SANDBOX_THREADS", 4)))


@dataclass
class Outcome:
    exit_code: int | None            # negative: killed by that signal
    timed_out: bool
    killed_for_memory: bool
    cancelled: bool
    duration_s: float
    peak_rss_bytes: int
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


def mentions_memory(text: str) -> bool:
    return any(m in text for m in MEMORY_MARKERS)


def files_hint(text: str) -> str:
    """For an error that a refused file access explains: what the sandbox allows, and how to lift it."""
    if "PermissionError" not in text and "Permission denied" not in text:
        return ""
    return (" (the sandbox lets jobs write only in their own directory, /dev and /proc, and read only there, in "
            "system directories and in the runner's Python; KERNELBOT_SANDBOX_WRITES=any and "
            "KERNELBOT_SANDBOX_READS=any on the runner lift that)")


def child_env(workdir: Path, backend: str, gpu: int | None, threads: int) -> dict[str, str]:
    """The child's whole environment: allowlisted names only, minus anything that looks secret."""
    env = {k: v for k, v in os.environ.items() if k in PASS_THROUGH and not _looks_secret(k)}
    env.setdefault("PATH", os.defpath)
    env.update(
        HOME=str(workdir), TMPDIR=str(workdir / "tmp"), XDG_CACHE_HOME=str(workdir / ".cache"),
        PYTHONPATH=PACKAGE_PARENT, PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", PYTHONNOUSERSITE="1",
        TRITON_CACHE_DIR=str(workdir / ".triton"), TORCHINDUCTOR_CACHE_DIR=str(workdir / ".inductor"),
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


def run(cmd: list[str], workdir: Path, *, backend: str, gpu: int | None = None, limits: Limits = Limits(),
        on_line: Callable[[str], None] | None = None, cancel: threading.Event | None = None) -> Outcome:
    """Run cmd in workdir under the sandbox; on_line gets each stdout line as it comes.
    Returns once the child and everything it started are gone."""
    workdir = Path(workdir)
    (workdir / "tmp").mkdir(parents=True, exist_ok=True)
    use_rlimit_as = protocol.device_type(backend) == "cpu"
    # Before the clock starts: the first job of a runner also waits for the isolation probes.
    setup = _child_setup(limits, use_rlimit_as, network_isolation(), _file_rules(workdir, backend))
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=workdir, env=child_env(workdir, backend, gpu, limits.threads),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, preexec_fn=setup,
    )
    out, err = _Tail(), _Tail()
    readers = [threading.Thread(target=_pump, args=(proc.stdout, out, on_line), daemon=True),
               threading.Thread(target=_pump, args=(proc.stderr, err, None), daemon=True)]
    for t in readers:
        t.start()
    try:
        stopped_for, peak = _watch(proc, start, limits, cancel)
    finally:
        kill_session(proc.pid)
        proc.wait()
        for t in readers:
            t.join(timeout=5)
    return Outcome(proc.returncode, stopped_for == "timeout", stopped_for == "memory", stopped_for == "cancel",
                   time.monotonic() - start, peak, out.text(), err.text())


def _watch(proc: subprocess.Popen, start: float, limits: Limits,
           cancel: threading.Event | None) -> tuple[str, int]:
    """Poll until the child exits ('') or must be stopped ('timeout', 'memory', 'cancel'); and the peak RSS."""
    peak = 0
    while proc.poll() is None:
        rss = session_rss(proc.pid)
        peak = max(peak, rss)
        if time.monotonic() - start > limits.timeout_s:
            return "timeout", peak
        if rss > limits.memory_bytes:
            return "memory", peak
        if cancel is not None and cancel.is_set():
            return "cancel", peak
        time.sleep(0.1)
    return "", peak


def _child_setup(limits: Limits, address_space: bool, no_network: bool,
                 file_rules: list[tuple[str, int]] | None) -> Callable[[], None]:
    """Runs in the child between fork and exec, where only plain system calls belong:
    everything is computed here in the parent first. file_rules: the Landlock rules the child's
    file access is limited to (see _file_rules), or None for no such limit."""
    wanted = [(resource.RLIMIT_CPU, limits.cpu_s, limits.cpu_s + 5),
              (resource.RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes),
              (resource.RLIMIT_CORE, 0, 0),
              (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files)]
    if address_space:
        wanted.append((resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes))
    plan = [(res, *_clamp(res, soft, hard)) for res, soft, hard in wanted]
    ids = _identity_maps() if no_network else []

    def apply() -> None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        for res, soft, hard in plan:
            resource.setrlimit(res, (soft, hard))
        if no_network:
            _unshare_network(ids)
        if file_rules is not None:
            _restrict_files(file_rules)
    return apply


def _landlock_writes() -> int:
    """The write rights this kernel's Landlock knows (0 where it has none)."""
    abi = _LIBC.syscall(_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return sum(bits for version, bits in _LANDLOCK_WRITES.items() if abi >= version)


def _restrict_files(rules: list[tuple[str, int]]) -> None:
    """Limit the calling process (and what it starts) to rules: (directory, rights beneath it).
    The first rule's rights are every right the ruleset handles; rights it does not handle stay
    unrestricted everywhere."""
    handled_rights = rules[0][1]
    if not handled_rights:
        raise OSError("Landlock is not available in this kernel (file isolation)")
    handled = ctypes.c_uint64(handled_rights)
    ruleset = _LIBC.syscall(_LANDLOCK_CREATE_RULESET, ctypes.byref(handled), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset (file isolation)")
    for path, rights in rules:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        # struct landlock_path_beneath_attr is packed: a u64 of rights, then the s32 fd.
        rule = ctypes.create_string_buffer(rights.to_bytes(8, sys.byteorder) + fd.to_bytes(4, sys.byteorder, signed=True))
        added = _LIBC.syscall(_LANDLOCK_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH, rule, ctypes.c_uint32(0))
        os.close(fd)
        if added != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule {path} (file isolation)")
    # An unprivileged process may restrict itself only once it can gain no privileges by exec.
    if _LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or _LIBC.syscall(_LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self (file isolation)")
    os.close(ruleset)


def _file_rules(workdir: Path, backend: str) -> list[tuple[str, int]] | None:
    """The Landlock rules of a job's child on this backend, or None where files are not isolated."""
    return _rules(str(workdir.resolve()), write_isolation(backend), read_isolation(backend))


def _rules(workdir: str, writes: bool, reads: bool) -> list[tuple[str, int]] | None:
    """(directory, rights beneath it) for a child in workdir: all rights there, writes also under
    WRITABLE_SYSTEM_DIRS, reads also under _readable(), and the runner package's parent listed
    (not read: `-m runner.harness` scans it for the package). None when neither is limited."""
    if not (writes or reads):
        return None
    handled = (_landlock_writes() if writes else 0) | (_LANDLOCK_READS if reads else 0)
    rules = [(workdir, handled)]
    if writes:
        rules += [(path, handled) for path in WRITABLE_SYSTEM_DIRS]
    if reads:
        rules += [(path, _LANDLOCK_READS) for path in _readable()] + [(PACKAGE_PARENT, _LANDLOCK_READ_DIR)]
    return rules


@functools.cache
def _readable() -> list[str]:
    """The directories a child may read beneath besides its own: READABLE_SYSTEM_DIRS, the runner's
    Python (prefixes, import path) and the runner package. No directory that holds the runner
    package's parent or the user's home: the repository and the user's files stay unread."""
    kept = (Path(PACKAGE_PARENT), Path(os.path.expanduser("~")))    # '~' itself where no home is known
    python = {sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path}
    dirs = [Path(p).resolve() for p in python if p and Path(p).is_dir()]
    dirs = [d for d in dirs if not any(k == d or d in k.parents for k in kept)]
    return sorted({*map(str, dirs), os.path.join(PACKAGE_PARENT, "runner"),
                   *(d for d in READABLE_SYSTEM_DIRS if os.path.isdir(d))})


# What the file-isolation probes run (argv[1]: cpu or cuda): what every job does, a Triton kernel
# compiled (on cpu: interpreted) and launched on a torch tensor, and where benchmarks time it
# (argv[2] 'compile') torch.compile, so that a driver or compiler that must write or read elsewhere
# turns the isolation off instead of failing every job.
_FILES_PROBE = """import sys
import torch
import triton
import triton.language as tl


@triton.jit
def _probe(x_ptr):
    tl.store(x_ptr, tl.load(x_ptr) + 1)


x = torch.zeros(1, device=sys.argv[1])
_probe[(1,)](x)
assert x.item() == 1
if sys.argv[2:] == ["compile"]:
    # What a benchmark adds: torch.compile in the harness's mode (Inductor's codegen and caches).
    compiled = torch.compile(lambda t: t * 2 + 1, mode="max-autotune-no-cudagraphs", dynamic=False)
    assert compiled(x).item() == 3
"""


def write_isolation(backend: str) -> bool:
    """Whether children on this backend may write only in their directory, /dev and /proc:
    KERNELBOT_SANDBOX_WRITES is not 'any' and a probe job runs so restricted."""
    mode = _mode("KERNELBOT_SANDBOX_WRITES",
                 {"workdir": "the default: jobs write only in their own directory, /dev and /proc",
                  "any": "jobs write wherever the runner may"})
    device = protocol.device_type(backend)
    return mode == "workdir" and _files_probe(device, True, False, protocol.benchmarks_compile(device))


def read_isolation(backend: str) -> bool:
    """Whether children on this backend may read only their directory, the system's directories
    and the runner's Python: KERNELBOT_SANDBOX_READS is not 'any' and a probe job runs so
    restricted (with writes restricted too, where they are)."""
    mode = _mode("KERNELBOT_SANDBOX_READS",
                 {"system": "the default: jobs read only their own directory, system directories and Python's",
                  "any": "jobs read whatever the runner may"})
    device = protocol.device_type(backend)
    writes = write_isolation(backend)
    return mode == "system" and _files_probe(device, writes, True, protocol.benchmarks_compile(device))


@functools.cache
def _files_probe(device_type: str, writes: bool, reads: bool, compile: bool) -> bool:
    """Whether the probe passes under these rules. A pass is remembered on disk for this Python,
    kernel, torch and Triton: with torch.compile the probe takes 15-20 s, and every `kernelbot run`
    starts a runner of its own."""
    key = _probe_key(device_type, writes, reads, compile)
    if key in _passed_probes():
        return True
    passed = _run_files_probe(device_type, writes, reads, compile)
    if passed:
        _remember_probe(key)
    return passed


def _probe_key(*flags) -> str:
    versions = [_version(name) for name in ("torch", "triton")]
    what = [sys.executable, platform.release(), *versions, _FILES_PROBE, *_readable(), *WRITABLE_SYSTEM_DIRS, *flags]
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:     # a source build: no installed metadata
        return ""


def _probes_file() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path(os.path.expanduser("~")) / ".cache") / "kernelbot" / \
        "sandbox-probes.json"


def _passed_probes() -> list[str]:
    try:
        return json.loads(_probes_file().read_text())
    except (OSError, ValueError):
        return []


def _remember_probe(key: str) -> None:
    """Add key to the file, replaced whole (a runner killed mid-write leaves the old one)."""
    path = _probes_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staged = path.with_suffix(f".{os.getpid()}.tmp")
        staged.write_text(json.dumps(sorted({*_passed_probes(), key})))
        staged.replace(path)
    except OSError:
        pass        # only a cache: the next runner probes again


def _run_files_probe(device_type: str, writes: bool, reads: bool, compile: bool) -> bool:
    with tempfile.TemporaryDirectory(prefix="kernelbot-probe-") as tmp:
        (Path(tmp) / "tmp").mkdir()
        (Path(tmp) / "probe.py").write_text(_FILES_PROBE)      # a file: Triton reads a kernel's source
        rules = _rules(tmp, writes, reads)
        return _runs([sys.executable, "probe.py", device_type, *(["compile"] if compile else [])],
                     lambda: _restrict_files(rules), cwd=tmp,
                     env=child_env(Path(tmp), device_type, None, 1), capture_output=True, timeout=300)


def _identity_maps() -> list[tuple[str, bytes]]:
    """What a new user namespace needs written so the child keeps its own uid and gid in it
    (setgroups must be denied before an unprivileged process may map its gid)."""
    uid, gid = os.getuid(), os.getgid()
    return [("/proc/self/setgroups", b"deny"), ("/proc/self/uid_map", f"{uid} {uid} 1".encode()),
            ("/proc/self/gid_map", f"{gid} {gid} 1".encode())]


def _unshare_network(ids: list[tuple[str, bytes]]) -> None:
    """New user and network namespaces for the calling process (a user namespace is what lets an
    unprivileged process own a network namespace); its uid and gid mapped to themselves."""
    if _LIBC.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare (network isolation): {os.strerror(err)}")
    for path, text in ids:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, text)
        finally:
            os.close(fd)


@functools.cache
def network_isolation() -> bool:
    """Whether children get no network: KERNELBOT_SANDBOX_NETWORK is not 'host' and this kernel
    lets an unprivileged process unshare user and network namespaces (tried once, on a child that
    does nothing else)."""
    mode = _mode("KERNELBOT_SANDBOX_NETWORK", {"none": "the default: jobs get no network",
                                               "host": "jobs share the runner's network"})
    if mode == "host":
        return False
    ids = _identity_maps()
    return _runs([sys.executable, "-c", ""], lambda: _unshare_network(ids), timeout=60)


def _mode(variable: str, choices: dict[str, str]) -> str:
    """The value of a sandbox setting: one of choices (value -> what it means; the first is the
    default). Any other value is refused by name, with the choices."""
    mode = os.environ.get(variable, next(iter(choices)))
    if mode not in choices:
        options = " or ".join(f"{value!r} ({meaning})" for value, meaning in choices.items())
        raise ValueError(f"{variable} is {mode!r}; use {options}")
    return mode


def _runs(cmd: list[str], setup: Callable[[], None], **kwargs) -> bool:
    """Whether a probe child exits 0 with setup applied before exec (a setup the kernel refuses is a no)."""
    try:
        return subprocess.run(cmd, preexec_fn=setup, **kwargs).returncode == 0
    except (subprocess.SubprocessError, OSError):
        return False


def _clamp(res: int, soft: int, hard: int) -> tuple[int, int]:
    """An unprivileged process cannot raise its hard limit: stay within the runner's own."""
    _, current_hard = resource.getrlimit(res)
    if current_hard != resource.RLIM_INFINITY:
        hard = min(hard, current_hard)
    return min(soft, hard), hard


def _session_members(sid: int) -> list[tuple[int, int]]:
    """(pid, rss bytes) of every process whose session id is sid, read from /proc."""
    page = os.sysconf("SC_PAGE_SIZE")
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue   # the process exited while we looked
        # fields[0] is field 3 of proc(5): state; session is field 6, rss (pages) field 24.
        if int(fields[3]) == sid:
            members.append((int(entry), int(fields[21]) * page))
    return members


def session_rss(sid: int) -> int:
    return sum(rss for _, rss in _session_members(sid))


def kill_session(sid: int) -> None:
    """SIGKILL the process group, then any process that left the group but not the session."""
    try:
        os.killpg(sid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid, _ in _session_members(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
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


def python_cmd(*args: str) -> list[str]:
    """A command line for the runner's own interpreter (same torch, triton, pytest)."""
    return [sys.executable, *args]
