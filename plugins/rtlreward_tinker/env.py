"""Single-shot RL over any rtlreward dataset, as tinker-cookbook `Env`s.

One problem becomes one `EnvGroupBuilder` holding `group_size` single-turn envs. The replies of a whole group are
scored in ONE `Engine.score_batch` call in `compute_group_rewards`, so identical replies are evaluated once and
the engine's concurrency is used; the reward is the profile's total and every stage shows up in the metrics
under the names of the original experiments (`format_valid`, `syntax_valid`, `tests_passed`, `reward/total`, ...).

Builders hold only names and plain values (task, renderer name, model name, profile): renderers, tokenizers and
engines are built lazily in the process that runs the rollout, so builders pickle to remote rollout workers.
What all episode kinds share is in `base` and `prompts`; the dataset builder here picks the agentic or
refinement builder by mode, and those modules never import this one (no import circle).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import chz
from tinker_cookbook.rl.types import Env, EnvGroupBuilder, RLDataset, RLDatasetBuilder, StepResult

from rtlreward.model import Candidate, Task
from rtlreward_tinker.base import GroupBuilder, render, score_group
from rtlreward_tinker.prompts import prompt_for

DIFFICULTY_ORDER = {"easy": 0, "medium": 1, "hard": 2}


# -- single-shot env -------------------------------------------------------------------------------------------
class SingleShotEnv(Env):
    """One reply per episode. The step reward is 0: the reward comes from the group's batch scoring."""

    def __init__(self, renderer: Any, messages: list[dict[str, str]], truncated_chars: int = 0) -> None:
        self.renderer = renderer
        self.messages = messages
        self.truncated_chars = truncated_chars
        self.reply: str | None = None

    async def initial_observation(self) -> tuple[Any, Any]:
        return render(self.renderer, self.messages), self.renderer.get_stop_sequences()

    async def step(self, action: list[int], *, extra: dict | None = None) -> StepResult:
        import tinker
        from tinker_cookbook.renderers import get_text_content

        message, termination = self.renderer.parse_response(action)
        self.reply = get_text_content(message)
        length_cut = (extra or {}).get("stop_reason") == "length" or not termination.is_clean
        return StepResult(
            reward=0.0,
            episode_done=True,
            next_observation=tinker.ModelInput.empty(),
            next_stop_condition=self.renderer.get_stop_sequences(),
            metrics={
                "reply_truncated": float(length_cut),
                "prompt_truncated": float(self.truncated_chars > 0),
            },
            logs={"reply": self.reply[:4000]},
        )


@dataclass(frozen=True)
class TaskGroupBuilder(GroupBuilder):
    """`group_size` single-shot samples of one task, scored as one batch."""

    async def make_envs(self) -> Sequence[Env]:
        renderer = self.renderer()
        messages, cut = prompt_for(self.task, renderer, self.max_prompt_tokens)
        return [SingleShotEnv(renderer, messages, cut) for _ in range(self.group_size)]

    async def compute_group_rewards(
        self, trajectory_group: list[Any], env_group: Sequence[Env]
    ) -> list[tuple[float, dict[str, float]]]:
        candidates = [
            Candidate(text=getattr(env, "reply", None) or "", sample=i) for i, env in enumerate(env_group)
        ]
        return await score_group(self.task, candidates, self.profile, self.executor)


# -- datasets --------------------------------------------------------------------------------------------------
class TaskDataset(RLDataset):
    """Fixed batches of group builders (the order is decided once, by the dataset builder)."""

    def __init__(self, builders: Sequence[EnvGroupBuilder], batch_size: int) -> None:
        self.builders = list(builders)
        self.batch_size = max(1, batch_size)

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        return self.builders[index * self.batch_size : (index + 1) * self.batch_size]

    def __len__(self) -> int:
        return math.ceil(len(self.builders) / self.batch_size)


def _stable_key(seed: int, task_id: str) -> str:
    return hashlib.sha256(f"{seed}:{task_id}".encode()).hexdigest()


def split_tasks(
    tasks: Sequence[Task], test_fraction: float = 0.0, test_size: int = 0, seed: int = 0
) -> tuple[list[Task], list[Task]]:
    """A deterministic train/test split by hashed task id: the same tasks are held out on every run and machine,
    whatever order the dataset lists them in."""
    n_test = test_size or round(len(tasks) * max(0.0, min(1.0, test_fraction)))
    n_test = min(n_test, max(0, len(tasks) - 1)) if tasks else 0
    ranked = sorted(tasks, key=lambda t: _stable_key(seed, t.id))
    test_ids = {t.id for t in ranked[:n_test]}
    return [t for t in tasks if t.id not in test_ids], [t for t in tasks if t.id in test_ids]


def order_tasks(tasks: Sequence[Task], *, curriculum: bool, seed: int, epoch: int = 0) -> list[Task]:
    """Shuffled (seeded, per epoch); with `curriculum`, easy before medium before hard (unknown last),
    shuffled within each level."""
    out = list(tasks)
    random.Random(f"{seed}:{epoch}").shuffle(out)
    if curriculum:
        out.sort(key=lambda t: DIFFICULTY_ORDER.get(t.difficulty.lower(), len(DIFFICULTY_ORDER)))
    return out


def load_task_list(
    dataset: str,
    source: str | None = None,
    task_ids: str | None = None,
    limit: int | None = None,
    health: str | None = None,
    keep_broken: bool = False,
) -> list[Task]:
    """Tasks from a registered dataset or a path a dataset plugin recognises; `tasks:FILE.jsonl` reads rows of
    `Task.to_dict()` (exported task sets). With a task health report (`rtlreward tasks check --out`), tasks whose
    reference fails are left out unless `keep_broken` (one line each on stderr: a policy cannot earn their reward),
    and every task gets its calibrated time limits."""
    if dataset.startswith("tasks:"):
        path = Path(dataset[len("tasks:") :])
        tasks = [Task.from_dict(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
    else:
        from rtlreward.integration import load_tasks

        tasks = load_tasks(dataset, source)
    if task_ids:
        wanted = [x.strip() for x in task_ids.split(",") if x.strip()]
        by_id = {t.id: t for t in tasks}
        missing = [x for x in wanted if x not in by_id]
        if missing:
            raise ValueError(f"task ids not in {dataset!r}: {', '.join(missing)}")
        tasks = [by_id[x] for x in wanted]
    if health:
        from rtlreward.health import load_report

        report = load_report(health)
        if not keep_broken:
            tasks, skipped = report.select(tasks)
            for task, why in skipped:
                print(f"skipped {task.id}: {why}", file=sys.stderr)
        tasks = report.calibrate(tasks)
    if limit:
        tasks = tasks[:limit]
    if not tasks:
        raise ValueError(f"dataset {dataset!r} gave no tasks: check the name/path and the filters")
    return tasks


@chz.chz
class RtlRewardDatasetBuilder(RLDatasetBuilder):
    """Everything needed to build the train/test datasets, as plain values (a chz config the CLI fills)."""

    dataset: str
    model_name: str
    renderer_name: str
    source: str | None = None
    task_ids: str | None = None
    limit: int | None = None
    health: str | None = None  # a task health report: skip broken tasks, calibrated limits
    keep_broken: bool = False
    batch_size: int = 8
    group_size: int = 4
    profile: str = "seed"
    executor: str = "local"
    max_prompt_tokens: int | None = 16384
    test_fraction: float = 0.0
    test_size: int = 0
    # A held-out dataset evaluated every `eval_every` steps instead of a fraction of `dataset` (a corpus's test
    # split: `rtlreward corpus split`); its task ids are never trained on.
    eval_dataset: str | None = None
    curriculum: bool = False
    keep_order: bool = False  # train in the dataset's own order (a `rtlreward corpus curriculum` schedule)
    seed: int = 0
    num_epochs: int = 1
    mode: str = "single"  # "single" | "agentic" | "refine"
    # agentic
    max_turns: int = 50
    command_timeout: float = 60.0
    output_budget: int = 8000
    sandbox: str = "auto"  # "auto" | "docker" | "local"
    sandbox_image: str | None = None
    max_trajectory_tokens: int | None = None  # a whole episode's context budget (None: the service's limit)
    # refine
    refine_turns: int = 3
    refine_reward: str = "final"  # "final" | "best" | "improvement"

    def make_builder(self, task: Task) -> EnvGroupBuilder:
        common: dict[str, Any] = dict(
            task=task,
            renderer_name=self.renderer_name,
            model_name=self.model_name,
            group_size=self.group_size,
            profile=self.profile,
            executor=self.executor,
            max_prompt_tokens=self.max_prompt_tokens,
            tags=(task.dataset or "rtlreward", self.mode),
        )
        if self.mode == "single":
            return TaskGroupBuilder(**common)
        if self.mode == "agentic":
            from rtlreward_tinker.agentic import AgenticGroupBuilder

            return AgenticGroupBuilder(
                **common,
                max_turns=self.max_turns,
                command_timeout=self.command_timeout,
                output_budget=self.output_budget,
                sandbox=self.sandbox,
                sandbox_image=self.sandbox_image,
                max_trajectory_tokens=self.max_trajectory_tokens,
            )
        if self.mode == "refine":
            from rtlreward_tinker.refine import RefineGroupBuilder

            return RefineGroupBuilder(**common, max_turns=self.refine_turns, reward_mode=self.refine_reward)
        raise ValueError(f"unknown mode {self.mode!r}: use single, agentic or refine")

    def tasks(self) -> tuple[list[Task], list[Task]]:
        tasks = load_task_list(
            self.dataset,
            self.source,
            self.task_ids,
            self.limit,
            health=self.health,
            keep_broken=self.keep_broken,
        )
        if self.eval_dataset:
            held_out = load_task_list(self.eval_dataset, health=self.health, keep_broken=self.keep_broken)
            ids = {t.id for t in held_out}
            train = [t for t in tasks if t.id not in ids]
            if not train:
                raise ValueError(
                    f"every task of {self.dataset!r} is in the eval dataset {self.eval_dataset!r}"
                )
            return train, held_out
        return split_tasks(tasks, self.test_fraction, self.test_size, self.seed)

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        train, test = await asyncio.to_thread(self.tasks)
        ordered: list[Task] = []
        for epoch in range(max(1, self.num_epochs)):
            if self.keep_order:
                ordered += train
            else:
                ordered += order_tasks(train, curriculum=self.curriculum, seed=self.seed, epoch=epoch)
        train_ds = TaskDataset([self.make_builder(t) for t in ordered], self.batch_size)
        test_ds = TaskDataset([self.make_builder(t) for t in test], self.batch_size) if test else None
        return train_ds, test_ds
