"""The judge's runtime defences against the attack corpus in tests/judge_attacks: each attack is
run through the real runner with the static check off, so what stops it is the process split,
the sandbox, ghost replay, the in-place refill or the judge's clock. cuda attacks run on a GPU."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from runner import worker

HERE = Path(__file__).parent
ATTACKS = sorted((HERE / "judge_attacks").glob("*.py"))
ADD = HERE / "fixtures" / "runner" / "add"


def header(path: Path) -> dict[str, str]:
    found = dict(re.findall(r"^# (expect|file|job|backend): (.+)$", path.read_text(), re.M))
    return {"file": "kernel.py", "job": "verify", "backend": "cpu", **found}


def files_for(path: Path, how: dict[str, str]) -> dict[str, str]:
    files = {n: (ADD / n).read_text()
             for n in ("spec.json", "reference.py", "kernel.py", "bench_plan.json", "test_reference.py")}
    files[how["file"]] = path.read_text()
    if how["job"] == "benchmark":
        spec = json.loads(files["spec.json"])
        for inp in spec["inputs"]:
            inp["shapes"], inp["dtypes"] = [[4096, 4096]], ["float32"]
        spec.pop("outputs", None)
        files["spec.json"] = json.dumps(spec)
        plan = json.loads(files["bench_plan.json"])
        files["bench_plan.json"] = json.dumps({**plan, "versions": ["torch", "kernel"]})
    return files


def params() -> list:
    return [pytest.param(path, header(path), id=path.stem,
                         marks=[pytest.mark.gpu, pytest.mark.timing] if header(path)["backend"] == "cuda" else [])
            for path in ATTACKS]


@pytest.mark.parametrize("path, how", params())
def test_attack_is_stopped_at_run_time(path, how):
    job = {"job_id": f"attack-{path.stem}", "kind": how["job"], "backend": how["backend"], "attempt": 1,
           "timeout_s": 300, "files": files_for(path, how)}
    result = worker.execute_job(job, lambda line: None, static_check=False)
    assert result["status"] == "fail", result["summary"]
    assert how["expect"] in result["summary"], result["summary"]


def test_every_attack_says_what_must_happen():
    assert ATTACKS and all("expect" in header(p) for p in ATTACKS)
