"""Reward functions for TRL's `GRPOTrainer`.

TRL calls every function in `reward_funcs` with the same batch and logs each under its `__name__`, then sums them
with `GRPOConfig.reward_weights`. We hand it the profile's total (weight 1) and one function per stage (weight
0: logged, never double-counted), and score each batch once through the engine: the first function to see a
batch scores it, the others read the memo.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

from rtlreward.integration import TaskIndex, completion_text, shared_engine, task_messages
from rtlreward.model import Candidate, Reward, Task

DEFAULT_STAGES = ("format", "safety", "interface", "lint", "compile", "tests")


class _RewardFunc:
    """A named callable TRL can log; TRL reads `__name__` for the column name."""

    def __init__(self, owner: RTLRewardFunctions, name: str, pick: Any, *, logs: bool = False) -> None:
        self._owner = owner
        self._pick = pick
        self._logs = logs
        self.__name__ = name

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        rewards = self._owner.score(completions, kwargs)
        log_metric = kwargs.get("log_metric")
        if self._logs and callable(log_metric) and rewards:
            for key in ("tests_passed", "tests_total", "format_valid", "syntax_valid"):
                log_metric(
                    f"rtlreward/{key}", sum(float(r.metrics.get(key, 0) or 0) for r in rewards) / len(rewards)
                )
        return [float(self._pick(r)) for r in rewards]


class RTLRewardFunctions:
    """Builds TRL reward functions over a set of tasks.

    The trainer's dataset needs a column (`task_id` by default) naming each row's task; `dataset_rows()` builds
    such rows. `funcs()` and `weights()` go straight into `GRPOTrainer(reward_funcs=...)` and
    `GRPOConfig(reward_weights=...)`.
    """

    def __init__(
        self,
        tasks: Iterable[Task],
        *,
        profile: str = "shaped",
        executor: str = "local",
        stages: Sequence[str] = DEFAULT_STAGES,
        task_column: str = "task_id",
        engine: Any = None,
        memo_size: int = 4096,
        eval_tasks: Iterable[Task] = (),
    ) -> None:
        # Held-out tasks (a corpus's test split) are scored too, but only eval_dataset_rows() lists them.
        self.train_tasks = list(tasks)
        self.eval_tasks = list(eval_tasks)
        overlap = {t.id for t in self.train_tasks} & {t.id for t in self.eval_tasks}
        if overlap:
            raise ValueError(f"eval tasks also in the training tasks: {', '.join(sorted(overlap)[:5])}")
        self.tasks = TaskIndex([*self.train_tasks, *self.eval_tasks])
        self.profile = profile
        self.executor = executor
        self.stages = tuple(stages)
        self.task_column = task_column
        self._engine = engine
        self._memo: OrderedDict[tuple[str, str], Reward] = OrderedDict()
        self._memo_size = memo_size
        self._lock = threading.Lock()

    @property
    def engine(self) -> Any:
        if self._engine is None:
            self._engine = shared_engine(self.profile, self.executor)
        return self._engine

    def funcs(self) -> list[_RewardFunc]:
        out = [_RewardFunc(self, "rtlreward_total", lambda r: r.total, logs=True)]
        for stage in self.stages:
            out.append(
                _RewardFunc(
                    self, f"rtlreward_{stage}", lambda r, s=stage: r.stages[s].score if s in r.stages else 0.0
                )
            )
        out.append(_RewardFunc(self, "rtlreward_passed", lambda r: 1.0 if r.passed else 0.0))
        return out

    def weights(self) -> list[float]:
        """The total counts once; per-stage scores and the verdict are logged only."""
        return [1.0] + [0.0] * (len(self.stages) + 1)

    def dataset_rows(self) -> list[dict[str, Any]]:
        """Rows for a `datasets.Dataset`: a conversational `prompt` and the task id column (training tasks)."""
        return [{"prompt": task_messages(t), self.task_column: t.id} for t in self.train_tasks]

    def eval_dataset_rows(self) -> list[dict[str, Any]]:
        """The held-out tasks' rows, for `GRPOTrainer(eval_dataset=...)` with `GRPOConfig(eval_strategy="steps",
        eval_steps=N)`: the split evaluated every N steps."""
        return [{"prompt": task_messages(t), self.task_column: t.id} for t in self.eval_tasks]

    def score(self, completions: Sequence[Any], kwargs: dict[str, Any]) -> list[Reward]:
        ids = kwargs.get(self.task_column)
        if ids is None:
            raise KeyError(
                f"the trainer's dataset has no {self.task_column!r} column: build it with dataset_rows() or pass "
                f"task_column= naming the column that holds task ids"
            )
        texts = [completion_text(c) for c in completions]
        keys = [(str(i), t) for i, t in zip(ids, texts, strict=True)]
        with self._lock:
            todo = [k for k in dict.fromkeys(keys) if k not in self._memo]
        if todo:
            pairs = [(self.tasks.get(tid), Candidate(text=text)) for tid, text in todo]
            rewards = self.engine.score_batch(pairs)
            with self._lock:
                for k, r in zip(todo, rewards, strict=True):
                    self._memo[k] = r
                while len(self._memo) > self._memo_size:
                    self._memo.popitem(last=False)
        with self._lock:
            return [self._memo[k] for k in keys]


def make_reward_funcs(tasks: Iterable[Task], **kwargs: Any) -> tuple[list[_RewardFunc], list[float]]:
    """`reward_funcs, reward_weights = make_reward_funcs(tasks)`: the two things GRPO needs."""
    rf = RTLRewardFunctions(tasks, **kwargs)
    return rf.funcs(), rf.weights()
