"""The six workflow stages, their artifact file names, and which run on a runner."""
from __future__ import annotations

STAGES: tuple[str, ...] = ("spec", "reference", "reference_test", "kernel", "kernel_test", "benchmark")

FILENAMES: dict[str, str] = {
    "spec": "spec.json",
    "reference": "reference.py",
    "reference_test": "test_reference.py",
    "kernel": "kernel.py",
    "kernel_test": "test_kernel.py",
    "benchmark": "bench_plan.json",
}

TITLES: dict[str, str] = {
    "spec": "Spec",
    "reference": "PyTorch reference",
    "reference_test": "Reference test",
    "kernel": "Triton kernel",
    "kernel_test": "Kernel test",
    "benchmark": "Benchmark",
}

# Stages whose approval sends a job to a runner.
EXECUTION: frozenset[str] = frozenset({"reference_test", "kernel_test", "benchmark"})

# Where a failed execution stage sends the session back to, with the failure attached.
ON_FAILURE: dict[str, str] = {"reference_test": "reference", "kernel_test": "kernel"}

# Artifacts that are code (an edit must parse as Python) vs JSON.
JSON_STAGES: frozenset[str] = frozenset({"spec", "benchmark"})


def index(stage: str) -> int:
    """1-based stage number, as shown to people."""
    return STAGES.index(stage) + 1


def next_stage(stage: str) -> str | None:
    i = STAGES.index(stage)
    return STAGES[i + 1] if i + 1 < len(STAGES) else None


def label(stage: str) -> str:
    return f"{index(stage)}/6 {TITLES[stage]}"
