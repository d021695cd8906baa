# expect: cases fail
import json
import os
import threading
import time

import torch
import triton
import triton.language as tl


@triton.jit
def _noop(out_ptr):
    pass


def _forge():
    fake = {"done": True, "load_error": "", "harness_error": "", "correctness": [], "ghost": [], "bench": [],
            "report_rows": [], "tuning": [], "copy_gbps": None, "timing_note": "", "warnings": []}
    for _ in range(200):
        for root in ("..", "../..", os.environ.get("HOME", "."), "/tmp"):
            try:
                with open(os.path.join(root, "harness_result.json"), "w") as f:
                    json.dump(fake, f)
            except OSError:
                pass
        time.sleep(0.05)


threading.Thread(target=_forge, daemon=True).start()


def add(x, y):
    out = torch.zeros_like(x)
    _noop[(1,)](out)
    return out
