"""verl integration: `compute_score` for verl's reward managers. See docs/trainers/verl.md.

Point verl at it with `custom_reward_function.path=<this file's path> custom_reward_function.name=compute_score`
(or `compute_score_batch` with the batch reward manager). The task travels in the row's
`reward_model.ground_truth` as JSON (`make_rows` builds such rows), so reward workers need no dataset on disk.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rtlreward import hookimpl

__version__ = "0.1.0"

STAGES = ("format", "safety", "interface", "lint", "compile", "tests")
# verl appends every key of the returned dict to per-sample lists, so the key set must never vary.
SCORE_KEYS = (
    "score",
    "passed",
    "format_valid",
    "syntax_valid",
    "interface_score",
    "tests_passed",
    "tests_total",
    *(f"stage_{s}" for s in STAGES),
)


class VerlTrainer:
    name = "verl"
    description = "verl compute_score / compute_score_batch (rtlreward_verl)"


@hookimpl
def rtlreward_register_trainers(register):
    register("verl", VerlTrainer())


def make_rows(tasks: Iterable[Any], data_source: str = "rtlreward", profile: str | None = None) -> list[dict]:
    """verl dataset rows (write them to parquet with pandas/pyarrow): the chat prompt and the task as ground truth."""
    from rtlreward.integration import task_messages

    rows = []
    for t in tasks:
        extra = {"task_id": t.id, "dataset": t.dataset}
        if profile:
            extra["rtlreward_profile"] = profile
        rows.append(
            {
                "data_source": data_source,
                "prompt": task_messages(t),
                "ability": "hdl",
                "reward_model": {"style": "rule", "ground_truth": json.dumps(t.to_dict())},
                "extra_info": extra,
            }
        )
    return rows


def write_split(
    train: Iterable[Any],
    held_out: Iterable[Any],
    folder: str | os.PathLike,
    *,
    profile: str | None = None,
    eval_every: int = 20,
    data_source: str = "rtlreward",
) -> dict[str, Any]:
    """`train.parquet` and `val.parquet` (make_rows, each row's `extra_info.split` set) in `folder`, for training
    on one split and evaluating the held-out one: returns verl's overrides, `data.train_files`, `data.val_files`
    and `trainer.test_freq` (= eval_every steps). Needs pyarrow."""
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, tasks in (("train", train), ("val", held_out)):
        rows = make_rows(tasks, data_source=data_source, profile=profile)
        if not rows:
            raise ValueError(f"the {name} split has no tasks")
        for r in rows:
            r["extra_info"]["split"] = name
        paths[name] = out / f"{name}.parquet"
        pq.write_table(pa.Table.from_pylist(rows), paths[name])
    return {
        "data.train_files": str(paths["train"]),
        "data.val_files": str(paths["val"]),
        "trainer.test_freq": int(eval_every),
    }


def _task(ground_truth: Any):
    from rtlreward.model import Task

    if isinstance(ground_truth, (str, bytes)):
        try:
            ground_truth = json.loads(ground_truth)
        except json.JSONDecodeError as exc:
            raise ValueError(
                "ground_truth is not an rtlreward task: build verl rows with rtlreward_verl.make_rows()"
            ) from exc
    if not isinstance(ground_truth, Mapping) or "id" not in ground_truth:
        raise ValueError(
            "ground_truth is not an rtlreward task: build verl rows with rtlreward_verl.make_rows()"
        )
    return Task.from_dict(ground_truth)


def _engine(extra_info: Mapping | None) -> Any:
    """The process-wide engine for the row's profile (else $RTLREWARD_PROFILE, else `shaped`) and
    $RTLREWARD_EXECUTOR (else `local`)."""
    from rtlreward.integration import shared_engine

    if extra_info and extra_info.get("rtlreward_profile"):
        profile = str(extra_info["rtlreward_profile"])
    else:
        profile = os.environ.get("RTLREWARD_PROFILE", "shaped")
    return shared_engine(profile, os.environ.get("RTLREWARD_EXECUTOR", "local"))


def _score_dict(reward: Any) -> dict[str, float]:
    m = reward.metrics
    out = {
        "score": float(reward.total),
        "passed": 1.0 if reward.passed else 0.0,
        "format_valid": float(m.get("format_valid", 0) or 0),
        "syntax_valid": float(m.get("syntax_valid", 0) or 0),
        "interface_score": float(m.get("interface_score", 0) or 0),
        "tests_passed": float(m.get("tests_passed", 0) or 0),
        "tests_total": float(m.get("tests_total", 0) or 0),
    }
    for s in STAGES:
        r = reward.stages.get(s)
        out[f"stage_{s}"] = float(r.score) if r is not None else 0.0
    return out


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping | None = None, **kwargs: Any
) -> dict[str, float]:
    """verl's per-sample reward function: the profile's total as `score`, every component beside it."""
    from rtlreward.model import Candidate

    return _score_dict(_engine(extra_info).score(_task(ground_truth), Candidate(text=solution_str or "")))


def compute_score_batch(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping | None] | None = None,
    **kwargs: Any,
) -> list[dict]:
    """verl's BatchRewardManager form: the whole batch scored concurrently, identical answers once."""
    from rtlreward.model import Candidate

    extra_infos = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    engine = _engine(extra_infos[0] if extra_infos else None)
    pairs = [(_task(gt), Candidate(text=s or "")) for s, gt in zip(solution_strs, ground_truths, strict=True)]
    return [_score_dict(r) for r in engine.score_batch(pairs)]
