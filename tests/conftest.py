"""Shared test setup: Triton's interpreter without a GPU, the `gpu` marker, and queue_url (each
queue kind a test runs against)."""
from __future__ import annotations

import os
import shutil

import pytest

HAS_GPU = shutil.which("nvidia-smi") is not None and os.environ.get("KERNELBOT_FORCE_CPU") != "1"

# Triton reads this at import time, so it must be set before any test imports triton.
if not HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        _skip_timing_beside_other_workers(items)
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _skip_timing_beside_other_workers(items) -> None:
    """The judge checks a worker's GPU times against its own wall clock: other test processes on the
    same GPU (pytest -n) put their work inside that clock, so such tests run only in a serial run."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    skip = pytest.mark.skip(reason="times versions through the judge, which needs the GPU to itself: run "
                                   "`pytest -m timing` without -n")
    for item in items:
        if "timing" in item.keywords:
            item.add_marker(skip)


def pytest_collection_finish(session):
    """Long background work of a selected test module starts now, beside the tests before it."""
    for module in {getattr(item, "module", None) for item in session.items}:
        if hasattr(module, "start_compiling"):
            module.start_compiling()


@pytest.fixture(params=["sqlite", "redis"])
def queue_url(request, tmp_path):
    """A fresh queue: a SQLite file, or a redis-server of the test's own on a free loopback port."""
    if request.param == "sqlite":
        yield f"sqlite://{tmp_path}/queue.db"
        return
    from fakes.real_runner import redis_server
    with redis_server(tmp_path) as url:
        yield url
