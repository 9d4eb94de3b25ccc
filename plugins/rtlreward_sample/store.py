"""The completions file `rtlreward sample` writes and `rtlreward eval` reads: one JSON line per (task, sample).

A line is `{"id", "sample", "completion", "model", "finish_reason", "sampler"}`; `rtlreward eval` reads `id`,
`sample` and `completion` and ignores the rest. Lines are appended one whole `write` at a time and flushed, so
a killed run leaves complete lines and at most one cut-off last line. Resuming drops that cut-off tail (it is
the only thing a kill can leave), keeps every complete line, and skips the (id, sample) pairs they hold.
`sampler` records the settings the samples were taken with: resuming with other settings would mix two
experiments in one file, so it is refused.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import attrs

__all__ = ["CompletionsFile", "ResumeMismatch"]


class ResumeMismatch(ValueError):
    """The file holds samples taken with other settings; `diff` is {setting: (the file's, this run's)}."""

    def __init__(self, message: str, diff: dict[str, tuple[Any, Any]] | None = None) -> None:
        super().__init__(message)
        self.diff = dict(diff or {})


@attrs.frozen(slots=True)
class Existing:
    """What a completions file already holds."""

    done: frozenset[tuple[str, int]]
    samplers: tuple[dict[str, Any], ...]  # the distinct `sampler` records found
    dropped_tail: int  # bytes of a cut-off last line removed


# sampler setting -> the `rtlreward sample` option that sets it
_FLAGS = {
    "backend": "--backend",
    "model": "--model",
    "temperature": "--temperature",
    "max_tokens": "--max-tokens",
    "style": "--style",
    "seed": "--seed",
    "extra_body": "--extra-body",
}


def _flag(key: str, value: Any) -> str:
    if value is None:
        return f"no {_FLAGS[key]}"
    if isinstance(value, dict):
        value = json.dumps(value)
    elif isinstance(value, float):
        value = f"{value:g}"
    return f"{_FLAGS[key]} {shlex.quote(str(value))}"


def _describe(diff: dict[str, tuple[Any, Any]]) -> str:
    return ", ".join(f"{k}={old!r} (this run: {new!r})" for k, (old, new) in sorted(diff.items()))


class CompletionsFile:
    """Append-only writer with resume. Not thread-safe: `rtlreward sample` writes from its one event loop."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fh: Any = None

    def scan(self, repair: bool = True) -> Existing:
        """Read what is there. `repair`: remove a cut-off last line (bytes after the last newline that do not
        parse) and end a whole last record with its newline, so appending starts on a line of its own."""
        if not self.path.exists():
            return Existing(frozenset(), (), 0)
        if self.path.is_dir():
            raise ValueError(
                f"--out {self.path} is a folder: give a file name, e.g. {self.path / 'completions.jsonl'}"
            )
        data = self.path.read_bytes()
        dropped = 0
        cut = data.rfind(b"\n") + 1
        tail = data[cut:]
        if tail.strip():
            try:
                json.loads(tail)
            except ValueError:  # a line cut by a kill: drop it, its pair is sampled again
                if repair:
                    with self.path.open("r+b") as fh:
                        fh.truncate(cut)
                dropped = len(tail)
                data = data[:cut]
            else:  # a whole record whose newline never got written
                if repair:
                    with self.path.open("ab") as fh:
                        fh.write(b"\n")
        done: set[tuple[str, int]] = set()
        samplers: list[dict[str, Any]] = []
        for raw in data.splitlines():
            try:
                obj = json.loads(raw)
            except ValueError:
                continue  # not ours (eval reports it); never rewritten
            if not isinstance(obj, dict) or "id" not in obj:
                continue
            sample = obj.get("sample")
            if isinstance(sample, int) and not isinstance(sample, bool) and sample >= 0:
                done.add((str(obj["id"]), sample))
            sampler = obj.get("sampler")
            if isinstance(sampler, dict) and sampler not in samplers:
                samplers.append(sampler)
        return Existing(frozenset(done), tuple(samplers), dropped)

    @staticmethod
    def check_settings(existing: Existing, sampler: dict[str, Any]) -> None:
        """Refuse to add samples taken with other settings than those already in the file."""
        for old in existing.samplers:
            diff = {
                k: (old.get(k), sampler.get(k))
                for k in set(old) | set(sampler)
                if old.get(k) != sampler.get(k)
            }
            if diff:
                same = " ".join(_flag(k, old_v) for k, (old_v, _) in sorted(diff.items()) if k in _FLAGS)
                raise ResumeMismatch(
                    f"the file already holds samples taken with other settings: {_describe(diff)}; "
                    f"rerun with the file's settings to resume it ({same or 'as it was sampled'}), or write to "
                    "another --out file",
                    diff,
                )

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a", encoding="utf-8")

    def append(self, row: dict[str, Any]) -> None:
        """One complete line in one write, flushed at once: what a kill can cut is at most this line."""
        self._fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
