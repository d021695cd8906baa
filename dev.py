#!/usr/bin/env python3
"""Bootstrap for a fresh clone: builds .venv with everything kernelbot needs (once,
and again when pyproject.toml changes), then runs a command inside it.

    python3 dev.py kernelbot run "relu(x + y) for fp32 1024x1024" --yes --out out/demo
    python3 dev.py test [pytest args]     (pytest-xdist workers: one a core and one more, up to 4; -n 0: none)

KERNELBOT_TORCH picks the torch requirement (default torch==2.13.0, which is a CPU
build where only that is on offer, and a CUDA build from PyPI on a GPU host).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PY = VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
STAMP = VENV / ".kernelbot-installed"
TORCH = os.environ.get("KERNELBOT_TORCH", "torch==2.13.0")


def _wanted_stamp() -> str:
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + TORCH.encode()).hexdigest()


PIP_PROGRESS = ("Collecting", "Downloading", "Installing collected", "Successfully installed", "Building")


def _pip(step: str, *args: str) -> None:
    """pip install, showing what it is fetching and installing as it goes (each line with the time
    so far), and everything it said when it fails."""
    print(step, flush=True)
    start, said = time.monotonic(), []
    with subprocess.Popen([str(PY), "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off",
                           *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as pip:
        for line in pip.stdout:
            said.append(line)
            if line.lstrip().startswith(PIP_PROGRESS):
                print(f"  [{time.monotonic() - start:5.0f} s] {line.strip()[:150]}", flush=True)
    if pip.returncode:
        sys.stderr.write("".join(said[-60:]))
        sys.exit(f"pip install {' '.join(args)} failed (exit {pip.returncode}); its output is above")


def ensure_venv() -> None:
    if sys.version_info < (3, 11):
        sys.exit(f"kernelbot needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    if STAMP.exists() and STAMP.read_text() == _wanted_stamp():
        return
    if not PY.exists():
        print(f"[1/3] creating {VENV} ...", flush=True)
        venv.create(VENV, with_pip=True)
    print(f"installing kernelbot into {VENV} (first run only; a few minutes)", flush=True)
    # torch first and pinned: an unpinned resolve would pull a multi-GB build.
    _pip(f"[2/3] {TORCH}, the largest part ...", TORCH)
    _pip("[3/3] kernelbot with every extra (triton, slack-bolt, discord.py, huey, matplotlib, pytest) ...",
         "-e", f"{ROOT}[all,test]")
    STAMP.write_text(_wanted_stamp())


def ensure_bubblewrap() -> None:
    """The runner runs generated code only under bubblewrap (docs/INTEGRITY.md). As root on
    Debian or Ubuntu it is installed here, as .ci/run does; elsewhere this says how."""
    if shutil.which("bwrap") or os.environ.get("KERNELBOT_BWRAP") or os.environ.get("KERNELBOT_SANDBOX") == "none":
        return
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        print("installing bubblewrap (the runner's sandbox) with apt-get ...", flush=True)
        for cmd in (["apt-get", "install", "-y", "-q", "bubblewrap"], ["apt-get", "update", "-q"],
                    ["apt-get", "install", "-y", "-q", "bubblewrap"]):
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if shutil.which("bwrap"):
                return
    print("kernelbot's runner runs generated code only under bubblewrap, which is not installed here: "
          "install it (apt-get install bubblewrap, dnf install bubblewrap, pacman -S bubblewrap), or name a "
          "bwrap binary with KERNELBOT_BWRAP; KERNELBOT_SANDBOX=none runs generated code with no isolation "
          "at all.", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("kernelbot", "test"):
        print(__doc__)
        return 2
    ensure_venv()
    ensure_bubblewrap()
    if argv[0] == "test":
        # The suite's processes are independent: one worker a core and one more (up to 4) unless -n is
        # given; the end-to-end tests wait on processes they start, and the extra worker fills that time.
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        n = min(cores + 1, 4)
        workers = [] if any(a.startswith(("-n", "--numprocesses")) for a in argv[1:]) else ["-n", str(n)]
        cmd = [str(PY), "-m", "pytest", *workers, *argv[1:]]
    else:
        cmd = [str(PY), "-m", "bot.cli", *argv[1:]]
    return subprocess.call(cmd, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
