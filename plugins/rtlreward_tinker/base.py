"""What every episode kind of the tinker plugin shares: renderers and engines built once per process, rendering
under the tokenizer's lock, rewards as metrics, group scoring, and the picklable group-builder fields.

The single-shot (`env`), agentic and refinement modules each import this module and `prompts`, never each
other: `env` only picks one of them in its dataset builder, so the plugin has no import circle.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tinker_cookbook.rl.types import EnvGroupBuilder

from rtlreward.model import Candidate, Reward, Task

log = logging.getLogger("rtlreward.tinker")

# -- lazily built, per process ---------------------------------------------------------------------------------
_renderer_cache: dict[tuple[str, str], Any] = {}
_renderer_lock = threading.Lock()


def get_renderer(renderer_name: str, model_name: str) -> Any:
    """The cookbook renderer for a model, built once per process (tokenizers take seconds to load)."""
    key = (renderer_name, model_name)
    with _renderer_lock:
        if key not in _renderer_cache:
            from tinker_cookbook import renderers
            from tinker_cookbook.tokenizer_utils import get_tokenizer

            _renderer_cache[key] = renderers.get_renderer(
                renderer_name, get_tokenizer(model_name), model_name=model_name
            )
        return _renderer_cache[key]


def get_engine(profile: str, executor: str) -> Any:
    from rtlreward.integration import shared_engine

    return shared_engine(profile=profile, executor=executor)


_tokenizer_locks: dict[int, threading.Lock] = {}


def tokenizer_lock(tokenizer: Any) -> threading.Lock:
    """One lock per tokenizer object. transformers 5 sets `encode_special_tokens` on the Rust tokenizer in every
    `encode`, a mutable borrow: two threads encoding at once fail with `RuntimeError: Already borrowed`. The
    cookbook renders multi-turn observations in worker threads, so every render we cause takes this lock."""
    with _renderer_lock:
        return _tokenizer_locks.setdefault(id(tokenizer), threading.Lock())


def render(renderer: Any, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    """`build_generation_prompt` under the tokenizer's lock, without the gpt-oss renderer's warning about a task
    system prompt (Harmony turns it into the developer message, which is what we want)."""
    with tokenizer_lock(renderer.tokenizer), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="use_system_prompt=True but messages already start")
        return renderer.build_generation_prompt(messages, **kwargs)


def message_env_adapter(renderer: Any, message_env: Any, **kwargs: Any) -> Any:
    """The cookbook's `EnvFromMessageEnv`, rendering through `render` (tokenizer lock) in its worker threads."""
    from tinker_cookbook.rl.message_env import EnvFromMessageEnv

    class LockedEnvFromMessageEnv(EnvFromMessageEnv):
        async def _render_in_thread(self, messages: list[Any], **kw: Any) -> Any:
            return await asyncio.to_thread(render, self.renderer, messages, **kw)

    return LockedEnvFromMessageEnv(renderer, message_env, **kwargs)


# -- metrics and scoring ---------------------------------------------------------------------------------------
def reward_metrics(reward: Reward) -> dict[str, float]:
    """Flat numeric metrics of one reward, named as in the original experiments' logs."""
    out: dict[str, float] = {}
    for key, value in reward.metrics.items():
        if isinstance(value, bool) or (isinstance(value, int | float) and math.isfinite(value)):
            out[key] = float(value)
    stages = reward.stages
    fmt, comp, lint, tests = (stages.get(n) for n in ("format", "compile", "lint", "tests"))
    out.setdefault("format_valid", float(bool(fmt and fmt.passed)))
    out.setdefault("syntax_valid", float(bool(comp and comp.passed and (lint is None or lint.passed))))
    if tests is not None:
        out.setdefault("tests_passed", float(tests.metrics.get("tests_passed", 0) or 0))
        out.setdefault("tests_total", float(tests.metrics.get("tests_total", 0) or 0))
    for name, result in stages.items():
        out.setdefault(f"stage/{name}/score", float(result.score))
        out.setdefault(f"stage/{name}/duration", float(result.duration))
    out["reward/total"] = float(reward.total)
    out["reward/max_total"] = float(reward.max_total)
    out["passed"] = float(reward.passed)
    return out


async def score_rewards(
    task: Task, candidates: Sequence[Candidate], profile: str, executor: str
) -> list[Reward] | None:
    """The group's rewards from ONE engine batch (identical candidates evaluated once); None when the
    evaluation itself broke (logged), so the caller can give the group reward 0 instead of failing the run."""
    if not candidates:
        return []
    engine = get_engine(profile, executor)
    try:
        return list(await asyncio.to_thread(engine.score_batch, [(task, c) for c in candidates]))
    except Exception:
        log.exception("rtlreward: scoring task %s failed; the group gets reward 0", task.id)
        return None


async def score_group(
    task: Task, candidates: Sequence[Candidate], profile: str, executor: str
) -> list[tuple[float, dict[str, float]]]:
    """Score a group as ONE engine batch. A broken evaluation costs the group its reward (0, flagged
    `reward/error`), never the training run."""
    rewards = await score_rewards(task, candidates, profile, executor)
    if rewards is None:
        return [(0.0, {"reward/total": 0.0, "reward/error": 1.0}) for _ in candidates]
    return [(float(r.total), reward_metrics(r)) for r in rewards]


# -- group builders --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GroupBuilder(EnvGroupBuilder):
    """`group_size` episodes of one task. Picklable: a task (attrs value) and names only; renderers and engines
    are built lazily in the process that runs the rollout. Subclasses say how an episode runs (`make_envs`) and
    how the group is rewarded (`compute_group_rewards`)."""

    task: Task
    renderer_name: str
    model_name: str
    group_size: int = 4
    profile: str = "seed"
    executor: str = "local"
    max_prompt_tokens: int | None = None
    tags: tuple[str, ...] = ()

    def renderer(self) -> Any:
        return get_renderer(self.renderer_name, self.model_name)

    def logging_tags(self) -> list[str]:
        return list(self.tags) or [self.task.dataset or "rtlreward"]
