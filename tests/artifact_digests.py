"""sha256 of every file the offline generator writes for each catalog entry (at its big and its
small sizes) and for a few requests beside the catalog: `python tests/artifact_digests.py > A.json`.
Two runs compare a refactor that must not change what is generated (`diff A.json B.json`)."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot import catalog  # noqa: E402
from bot.generators.interface import GenerationError, GenRequest  # noqa: E402
from bot.generators.offline import OfflineGenerator  # noqa: E402
from bot.workflow import stages  # noqa: E402

BESIDE_THE_CATALOG = (
    "relu(x + y) for fp32 1024x1024",
    "softmax over the last dim of a 4096x4096 fp16 tensor",
    "layernorm with eps 1e-5 on 512x1000 in bf16",
    "gelu(x) * sigmoid(y) + 1 on 64x128 and 3x5x7, fp16 and fp32",
    "argmax over dim 0 of 300x200 fp32",
)


def digests(request: str) -> dict[str, str]:
    """Each stage's artifact, generated in order with the earlier ones approved; a stage the
    generator refuses records its message instead."""
    generator, approved, out = OfflineGenerator(), {}, {}
    for stage in stages.STAGES:
        try:
            content = generator.generate(GenRequest(stage=stage, request=request, approved=dict(approved))).content
        except GenerationError as e:
            out[stage] = f"refused: {e}"
            break
        approved[stage] = content
        out[stage] = hashlib.sha256(content.encode()).hexdigest()
    return out


def main() -> None:
    requests = {f"{e.name}/{size}": e.request(size) for e in catalog.ENTRIES for size in ("big", "small")}
    requests.update({f"extra/{i}": words for i, words in enumerate(BESIDE_THE_CATALOG)})
    print(json.dumps({key: digests(words) for key, words in requests.items()}, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
