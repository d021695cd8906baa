"""The judge's timing check on a GPU host, through the real runner (bubblewrap, judge, workers):
honest add kernels and the torch baseline at several sizes must pass it, and the patched-clock
and side-stream attacks of tests/judge_attacks must be rejected. Prints one row per version;
docs/BENCHMARKS.md records a run.

    python3 tests/judge_clock_check.py      # from the repository root, on a GPU host
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner import sandbox, worker  # noqa: E402

ADD = ROOT / "tests" / "fixtures" / "runner" / "add"
ATTACKS = ROOT / "tests" / "judge_attacks"


def files(kernel: Path | None, shapes: list[list[int]], dtypes: list[str], versions: list[str]) -> dict[str, str]:
    out = {n: (ADD / n).read_text() for n in ("spec.json", "reference.py", "kernel.py", "bench_plan.json")}
    if kernel:
        out["kernel.py"] = kernel.read_text()
    spec = json.loads(out["spec.json"])
    spec.pop("outputs")
    for inp in spec["inputs"]:
        inp["shapes"], inp["dtypes"] = shapes, dtypes
    out["spec.json"] = json.dumps(spec)
    out["bench_plan.json"] = json.dumps({**json.loads(out["bench_plan.json"]), "versions": versions})
    return out


def run(name: str, job_files: dict[str, str], static_check: bool = True) -> None:
    start = time.time()
    job = {"job_id": name, "kind": "benchmark", "backend": "cuda", "timeout_s": 900, "files": job_files}
    result = worker.execute_job(job, lambda line: None, static_check=static_check)
    print(f"== {name} ({time.time() - start:.0f} s) {result['status']}: {result['summary'][:200]}")
    us = lambda v: "-" if v is None else f"{v * 1e3:.1f}"  # noqa: E731
    for b in result["bench"]:
        print(f"{b['case']:>10} {b['dtype']:>8} {b['version']:>7}  worker GPU {us(b.get('gpu_ms')):>7} us  "
              f"judge {us(b.get('judge_gpu_ms')):>7} us  {'ok' if b['ok'] else b['error'][:90]}")


def main() -> None:
    print(sandbox.isolation().summary())
    shapes = [[64, 64], [333, 77], [1024, 1024], [3000, 7001], [8192, 8192]]
    run("honest", files(None, shapes, ["float32", "float16"], ["torch", "kernel"]))
    for attack in ("patches_the_clock", "works_on_a_side_stream"):   # past the static check on purpose
        run(attack, files(ATTACKS / f"{attack}.py", [[1024, 1024], [8192, 8192]], ["float32"], ["torch", "kernel"]),
            static_check=False)


if __name__ == "__main__":
    main()
