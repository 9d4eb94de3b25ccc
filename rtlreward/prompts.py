"""The chat a model is sampled on, as its benchmark builds it, and the prompts file every sampler reads.

Prompts belong to the datasets: a loader fills `Task.prompt` and `Task.system_prompt`, and a dataset that can
build its chat in other styles (CVDP: `copilot` or the `agentic` layout prompt) offers `messages(task, style)`.
Every command that needs the chat (`rtlreward prompts`, `rtlreward sample`, `rtlreward cvdp prompts`) asks here,
so a prompt exported for an external sampler is the same chat `rtlreward sample` sends.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from rtlreward.integration import task_messages
from rtlreward.model import Task

__all__ = ["chat_for", "export_prompts", "load_selection", "prompt_row", "write_prompts"]


def _dataset_of(task: Task) -> Any:
    """The registered dataset a task came from, or None (inline tasks; a registry that cannot load)."""
    if not task.dataset:
        return None
    try:
        from rtlreward.plugins import get_registry

        return get_registry().datasets().get(task.dataset)
    except Exception:  # a broken third-party plugin must not stop us using the task's own prompt
        return None


def chat_for(task: Task, style: str = "auto", dataset: Any = None) -> list[dict[str, str]]:
    """The task's chat: `dataset.messages(task, style)` when the dataset offers one (the task's own dataset
    when `dataset` is None), else its system prompt and prompt (`integration.task_messages`). `style` is the
    dataset's prompt style; `auto` means the style the task was loaded with."""
    ds = dataset if dataset is not None else _dataset_of(task)
    messages_of = getattr(ds, "messages", None)
    if callable(messages_of):
        return [{"role": str(m["role"]), "content": str(m["content"])} for m in messages_of(task, style)]
    return task_messages(task)


def prompt_row(task: Task, style: str = "auto", dataset: Any = None) -> dict[str, Any]:
    """One line of a prompts file: `{"id", "messages", "expected_files"}` (the answer files a sampler's reply
    must provide; CVDP's agentic prompts name them too)."""
    return {
        "id": task.id,
        "messages": chat_for(task, style, dataset),
        "expected_files": list(task.expected_files),
    }


def write_prompts(tasks: Iterable[Task], fh: IO[str], style: str = "auto", dataset: Any = None) -> int:
    """Write a prompts line per task to an open text file; returns how many."""
    n = 0
    for task in tasks:
        fh.write(json.dumps(prompt_row(task, style, dataset), ensure_ascii=False) + "\n")
        n += 1
    return n


def load_selection(
    dataset: str, source: str | None = None, filters: dict[str, Any] | None = None, limit: int | None = None
) -> tuple[Any, list[Task]]:
    """(dataset plugin, its tasks) for a registered name or a path a plugin recognises; `limit` keeps the first
    tasks whatever filters the dataset understands. ValueError says what to change."""
    from rtlreward.integration import resolve_dataset

    _name, ds, detected = resolve_dataset(dataset)
    tasks = list(ds.load(source or detected, **(filters or {})))
    if limit is not None:
        if limit < 0:
            raise ValueError(f"--limit must be 0 or more, not {limit}")
        tasks = tasks[:limit]
    return ds, tasks


def export_prompts(
    dataset: str,
    out: str | Path | None = None,
    *,
    source: str | None = None,
    filters: dict[str, Any] | None = None,
    style: str = "auto",
    limit: int | None = None,
) -> int:
    """Write the prompts of a dataset selection to `out` (None or '-': standard output); returns how many."""
    ds, tasks = load_selection(dataset, source, filters, limit)
    if out is None or str(out) == "-":
        return write_prompts(tasks, sys.stdout, style, ds)
    path = Path(out)
    if path.is_dir():
        raise ValueError(f"--out {path} is a folder: give a file name, e.g. {path / 'prompts.jsonl'}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        return write_prompts(tasks, fh, style, ds)
