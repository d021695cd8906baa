"""An installed kernelbot carries what it reads at run time: the LLM generator's prompt templates."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_wheel_carries_the_prompt_templates(tmp_path):
    # Built from a copy: setuptools writes build/ and *.egg-info next to the sources.
    src = tmp_path / "src"
    for name in ("bot", "runner", "prompts"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path), str(src)], check=True, cwd=tmp_path)
    names = set(zipfile.ZipFile(next(tmp_path.glob("kernelbot-*.whl"))).namelist())
    templates = {f"prompts/{p.name}" for p in (REPO / "prompts").glob("*.md")}
    assert len(templates) >= 8 and templates <= names
    assert {"prompts/__init__.py", "bot/generators/prompts.py", "runner/harness.py"} <= names
