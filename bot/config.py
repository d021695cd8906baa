"""Configuration from the environment, with the embedded defaults: SQLite store and
queue under KERNELBOT_HOME, the offline generator, the local backend."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from bot.generators.llm_client import LLMSettings
from bot.workflow.engine import Policy


def detect_backend() -> str:
    """'cuda' where an NVIDIA driver is visible, else 'cpu' (Triton's interpreter)."""
    return "cuda" if shutil.which("nvidia-smi") else "cpu"


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        return float(raw) if raw else default
    except ValueError:
        raise SystemExit(f"{name}={raw!r} is not a number") from None


@dataclass
class Config:
    home: Path
    db_path: Path
    queue_url: str
    backend: str
    generator: str = "offline"
    heartbeat_s: float = 5.0
    stale_s: float = 30.0
    max_attempts: int = 3
    job_timeout_s: float = 1800.0
    approvers: frozenset[str] = field(default_factory=frozenset)
    four_eyes: bool = False
    llm: LLMSettings | None = None       # set when KERNELBOT_LLM_BASE_URL is

    @classmethod
    def from_env(cls, **overrides) -> "Config":
        env = os.environ
        home = Path(env.get("KERNELBOT_HOME") or Path.home() / ".kernelbot").expanduser()
        backend = env.get("KERNELBOT_BACKEND") or detect_backend()
        llm = _llm_settings()
        cfg = cls(
            home=home,
            db_path=Path(env.get("KERNELBOT_DB") or home / "kernelbot.db"),
            queue_url=env.get("KERNELBOT_QUEUE_URL") or f"sqlite:///{home / 'queue.db'}",
            backend=backend,
            generator=env.get("KERNELBOT_GENERATOR") or ("hybrid" if llm else "offline"),
            heartbeat_s=_float("KERNELBOT_HEARTBEAT_S", 5.0),
            stale_s=_float("KERNELBOT_STALE_S", 30.0),
            max_attempts=int(_float("KERNELBOT_MAX_ATTEMPTS", 3)),
            job_timeout_s=_float("KERNELBOT_JOB_TIMEOUT_S", 1800.0),
            approvers=frozenset(u.strip() for u in env.get("KERNELBOT_APPROVERS", "").split(",") if u.strip()),
            four_eyes=env.get("KERNELBOT_FOUR_EYES", "") in ("1", "true", "yes"),
            llm=llm,
        )
        for key, value in overrides.items():
            if value is not None:
                setattr(cfg, key, value)
        return cfg

    @property
    def policy(self) -> Policy:
        return Policy(approvers=self.approvers, four_eyes=self.four_eyes, max_attempts=self.max_attempts)


def _llm_settings() -> LLMSettings | None:
    """The OpenAI-compatible endpoint, or None when KERNELBOT_LLM_BASE_URL is not set."""
    env = os.environ
    base_url = env.get("KERNELBOT_LLM_BASE_URL", "").strip()
    if not base_url:
        return None
    model = env.get("KERNELBOT_LLM_MODEL", "").strip()
    if not model:
        raise SystemExit("KERNELBOT_LLM_BASE_URL is set but KERNELBOT_LLM_MODEL is not: name the model the "
                         "endpoint serves, e.g. gpt-4.1, deepseek-chat, or the one vLLM/SGLang/Ollama loaded")
    max_tokens = int(_float("KERNELBOT_LLM_MAX_TOKENS", 0))
    return LLMSettings(base_url=base_url, model=model, api_key=env.get("KERNELBOT_LLM_API_KEY", ""),
                       timeout_s=_float("KERNELBOT_LLM_TIMEOUT_S", 180.0),
                       retries=int(_float("KERNELBOT_LLM_RETRIES", 4)),
                       rounds=int(_float("KERNELBOT_LLM_ROUNDS", 5)),
                       max_tokens=max_tokens or None,
                       verify_timeout_s=_float("KERNELBOT_LLM_VERIFY_TIMEOUT_S", 600.0))
