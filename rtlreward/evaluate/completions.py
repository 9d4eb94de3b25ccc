"""The input of a bulk evaluation: completions, from a JSONL file or made up from the tasks.

One completion a line: `{"id": ..., "completion": "<reply text>"}` (several lines per id are samples 0, 1, 2, ...
in file order; an explicit `"sample": n` wins) or `{"id": ..., "files": {path: text}}` (an agent's output). A line
that cannot be used is a `Problem` with its line number, not an error: the rest of the file still runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from rtlreward.model import Candidate, Task


@attrs.frozen(slots=True)
class Completion:
    """One model output for one task. `sample` None means "next sample of this id, in input order"."""

    id: str
    text: str | None = None
    files: dict[str, str] | None = None
    sample: int | None = None
    line: int = 0  # where it came from in the completions file (0: not from a file)

    def candidate(self, sample: int) -> Candidate:
        return Candidate(text=self.text, files=self.files, sample=sample)


@attrs.frozen(slots=True)
class Problem:
    """An input line that could not be used, and why."""

    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


def _completion_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping):  # {"role": "assistant", "content": ...}
        return str(value.get("content", ""))
    if isinstance(value, list):  # a chat: keep what the model said
        parts = [
            str(m.get("content", "")) for m in value if isinstance(m, Mapping) and m.get("role") != "user"
        ]
        return "\n".join(p for p in parts if p)
    return None


def parse_completion(obj: Any, line: int = 0) -> Completion:
    """A decoded JSON line as a Completion; ValueError says what is wrong with it."""
    if not isinstance(obj, Mapping):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    tid = obj.get("id", obj.get("task_id"))
    if tid is None or tid == "":
        raise ValueError('no "id"')
    sample = obj.get("sample")
    if sample is not None and (not isinstance(sample, int) or isinstance(sample, bool) or sample < 0):
        raise ValueError(f'"sample" must be a non-negative integer, got {sample!r}')
    files = obj.get("files")
    if files is not None:
        if not isinstance(files, Mapping) or not all(isinstance(v, str) for v in files.values()):
            raise ValueError('"files" must be an object {path: text}')
        return Completion(id=str(tid), files={str(k): v for k, v in files.items()}, sample=sample, line=line)
    for key in ("completion", "response", "text", "output"):
        if key in obj:
            text = _completion_text(obj[key])
            if text is None:
                raise ValueError(f'"{key}" must be a string or a list of chat messages')
            return Completion(id=str(tid), text=text, sample=sample, line=line)
    raise ValueError('neither "completion" (the reply text) nor "files" ({path: text})')


def read_completions(path: str | Path) -> tuple[list[Completion], list[Problem]]:
    """Every usable line of a completions JSONL file, and a Problem (with its line number) for each other one."""
    completions: list[Completion] = []
    problems: list[Problem] = []
    with Path(path).open(encoding="utf-8", errors="replace") as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as exc:
                problems.append(Problem(n, f"not valid JSON ({exc.msg} at column {exc.colno}); skipped"))
                continue
            try:
                completions.append(parse_completion(obj, n))
            except ValueError as exc:
                problems.append(Problem(n, f"{exc}; skipped"))
    return completions, problems


def producer(path: str | Path) -> dict[str, Any]:
    """Who produced a completions file, as `rtlreward sample` records it on every line: `model` (the one model,
    or a list when the file mixes several) and `sampler` (the settings: backend, temperature, max_tokens, style,
    seed, ...; a list when they differ). {} for a file without them (written by hand or another tool)."""
    models: list[Any] = []
    samplers: list[Any] = []
    try:
        with Path(path).open(encoding="utf-8", errors="replace") as fh:
            for raw in fh:
                try:
                    obj = json.loads(raw)
                except ValueError:
                    continue
                if not isinstance(obj, Mapping):
                    continue
                model, sampler = obj.get("model"), obj.get("sampler")
                if isinstance(sampler, Mapping) and model is None:
                    model = sampler.get("model")
                if model is not None and model not in models:
                    models.append(model)
                if isinstance(sampler, Mapping) and dict(sampler) not in samplers:
                    samplers.append(dict(sampler))
    except OSError:
        return {}
    out: dict[str, Any] = {}
    if models:
        out["model"] = models[0] if len(models) == 1 else models
    if samplers:
        out["sampler"] = samplers[0] if len(samplers) == 1 else samplers
    return out


def reference_completions(tasks: Iterable[Task]) -> tuple[list[Completion], list[Problem]]:
    """Each task's own reference solution as a completion (sanity: these should pass)."""
    out, missing = [], []
    for t in tasks:
        if t.reference:
            out.append(Completion(id=t.id, files=dict(t.reference), sample=0))
        else:
            missing.append(t.id)
    problems = []
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        problems.append(
            Problem(0, f"{len(missing)} task(s) have no reference solution and are not scored: {shown}")
        )
    return out, problems


def empty_completions(tasks: Iterable[Task]) -> list[Completion]:
    """An empty reply per task (sanity: these should fail, and cheaply)."""
    return [Completion(id=t.id, text="", sample=0) for t in tasks]
