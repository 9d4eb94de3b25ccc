"""The output of a bulk evaluation: a results JSONL file, one scored completion a line.

The first line is a header with the run's settings (`rtlreward.evaluate.settings`); every other line is one
sample's log (docs/schema.md, docs/evaluate.md "Results file"):

    {"id", "sample", "reward", "passed", "max_total", "profile", "category", "difficulty", "task_hash", "seconds",
     "stages": {name: {"status", "score", "seconds", "cached", "metrics", "diagnostics": [...], "feedback"}},
     "metrics", "diagnostics", "feedback", "reply" / "files" (with --keep-replies)}

Each diagnostic is `{"code", "severity", "message", "file", "line", "fields"}` with a stable, namespaced code
(`rtlreward.codes`). Rows are appended and flushed as each result arrives, so a killed run loses nothing and a
rerun into the same file scores only what is missing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rtlreward.evaluate.completions import Problem
from rtlreward.evaluate.settings import header_line, is_header
from rtlreward.model import Candidate, Task
from rtlreward.schema import reward_record


def result_row(task: Task, sample: int, reward: Any, candidate: Candidate | None = None) -> dict[str, Any]:
    """The JSONL line for one scored completion: the reward as `rtlreward.schema.reward_record` spells it (the
    same shape as `score --json` and the server), plus what a bulk run knows: the task's category, difficulty and
    hash, and (when `candidate` is given: `--keep-replies`) the reply."""
    record = reward_record(reward, sample=sample, digits=6)
    row: dict[str, Any] = {
        "id": task.id,
        "sample": sample,
        **{k: v for k, v in record.items() if k not in ("id", "sample", "stages", "metrics")},
        "category": task.category,
        "difficulty": task.difficulty,
        # what the verdict was checked against (harness, interface, context: not the prompt or metadata), so a
        # resume redoes a row whose task changed and keeps one reached under another spelling of the dataset
        "task_hash": task.stimulus_fingerprint()[:16],
        "stages": record["stages"],
        "metrics": record["metrics"],
    }
    if candidate is not None:
        if candidate.text is not None:
            row["reply"] = candidate.text
        if candidate.files is not None:
            row["files"] = dict(candidate.files)
    return row


def read_header(path: str | Path) -> dict[str, Any] | None:
    """The settings recorded in a results file's header line, or None (no file, or written before headers)."""
    p = Path(path)
    if not p.is_file():
        return None
    with p.open(encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except ValueError:
                return None
            return dict(obj.get("settings") or {}) if is_header(obj) else None
    return None


def read_results(path: str | Path) -> tuple[list[dict[str, Any]], list[Problem]]:
    """Rows of a results file. A line that is not a result (typically the last one of a killed run) is a Problem,
    not an error: resuming simply scores that completion again."""
    rows: list[dict[str, Any]] = []
    problems: list[Problem] = []
    p = Path(path)
    if not p.exists():
        return rows, problems
    with p.open(encoding="utf-8", errors="replace") as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
                if is_header(obj):
                    continue
                if not isinstance(obj, dict) or "id" not in obj or "sample" not in obj or "passed" not in obj:
                    raise ValueError("not a result row")
            except ValueError:
                problems.append(Problem(n, f"{p.name}: unreadable result line (will be scored again)"))
                continue
            rows.append(obj)
    return rows, problems


class ResultAppender:
    """Appends rows to the results file, one flushed line each, from any thread."""

    def __init__(self, path: Path | None, settings: Mapping[str, Any] | None = None) -> None:
        """`settings`: written as the header line when the file is new or empty (`rtlreward.evaluate.settings`)."""
        self.path = path
        self._lock = threading.Lock()
        self._fh = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            fresh = not path.exists() or path.stat().st_size == 0
            needs_newline = not fresh and not path.read_bytes().endswith(b"\n")
            # A reply (--keep-replies) or a diagnostic may hold a lone surrogate, which UTF-8 cannot encode:
            # written as the six characters `\ud83d`, which inside a JSON string is that same escape, so the row
            # reads back exactly as it was (and valid UTF-8 throughout).
            self._fh = path.open("a", encoding="utf-8", errors="backslashreplace")
            if needs_newline:  # a killed run left half a line: start ours on a fresh one
                self._fh.write("\n")
                self._fh.flush()
            if fresh and settings is not None:
                self.write(header_line(settings))

    def write(self, row: Mapping[str, Any]) -> None:
        if self._fh is None:
            return
        line = json.dumps(row, separators=(",", ":"), ensure_ascii=False, default=str) + "\n"
        with self._lock:
            self._fh.write(line)
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
