"""What a results file was scored under, so that resuming never mixes rewards computed under other settings.

The first line of a results file is a header, `{"rtlreward": "results", "format": 2, "settings": {...}}`, written
when the file is created. `settings` holds what decides a reward (`SCORING_KEYS`: the profile's name and content
hash, the executor, each stage's version and tools, the engine's memory limit, rtlreward's version) and, for
people, what does not (the dataset, jobs, when, the completions file; each row's `task_hash` covers the task). Resuming into a file whose header differs in a
scoring key is refused with the differences named (`SettingsMismatch`, exit 2), or, with `--rescore`, the old file
is moved aside (`FILE.prev`) and everything is scored again.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rtlreward.model import hash_json

HEADER_KIND = "results"
FORMAT = 2
# The settings that change a reward: a difference in any of them makes earlier rows incomparable.
# The dataset is recorded, not compared: each row carries its task's hash (`task_hash`), so a row whose task
# changed is scored again and the same data under another spelling (`rtllm` or its path) resumes.
SCORING_KEYS = (
    "profile",
    "profile_hash",
    "executor",
    "stages",
    "tool_versions",
    "memory_mb",
    "rtlreward",
)


class SettingsMismatch(ValueError):
    """The results file was scored under other settings; the message names each difference and what to do."""


def is_header(obj: Any) -> bool:
    return isinstance(obj, Mapping) and obj.get("rtlreward") == HEADER_KIND


def header_line(settings: Mapping[str, Any]) -> dict[str, Any]:
    return {"rtlreward": HEADER_KIND, "schema": FORMAT, "settings": dict(settings)}


def run_settings(engine: Any, *, dataset: str | None = None, **extra: Any) -> dict[str, Any]:
    """The settings of a run with `engine` (an `rtlreward.engine.Engine`; anything else records what it can)."""
    from rtlreward.version import __version__

    profile = getattr(engine, "profile", None)
    to_dict = getattr(profile, "to_dict", None)
    settings: dict[str, Any] = {
        "dataset": dataset,
        "profile": getattr(profile, "name", None) or getattr(engine, "profile_name", None),
        "profile_hash": hash_json(to_dict())[:16] if callable(to_dict) else None,
        "executor": _executor(engine),
        "stages": {
            n: str(getattr(s, "version", "")) for n, s in (getattr(engine, "stages", None) or {}).items()
        },
        "tool_versions": _tool_versions(engine),
        "memory_mb": getattr(engine, "memory_mb", None),
        "rtlreward": __version__,
        "jobs": getattr(engine, "jobs", None),
        "started": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    settings.update({k: v for k, v in extra.items() if v is not None})
    return json.loads(json.dumps(settings, default=str))  # exactly what the file will read back


def _executor(engine: Any) -> dict[str, Any]:
    desc = getattr(engine, "describe", None)
    try:
        ex = desc()["executor"] if callable(desc) else None
    except Exception:
        ex = None
    if isinstance(ex, Mapping):
        return {k: v for k, v in ex.items() if k != "user"}  # who runs the commands does not change a verdict
    return {"executor": str(ex) if ex else type(getattr(engine, "executor", engine)).__name__}


def _tool_versions(engine: Any) -> dict[str, Any]:
    tools = getattr(engine, "_tools", None)
    out: dict[str, Any] = {}
    for name, stage in (getattr(engine, "stages", None) or {}).items():
        try:
            out[name] = dict(tools(name, stage)) if callable(tools) else {}
        except Exception as exc:  # a tool that cannot say its version is recorded as such
            out[name] = {"error": repr(exc)}
    return out


def differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Each scoring setting that differs, as `key: old -> new` (nested dicts down to the differing entry)."""
    out: list[str] = []

    def walk(path: str, a: Any, b: Any) -> None:
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            for k in sorted(set(a) | set(b), key=str):
                walk(f"{path}.{k}", a.get(k), b.get(k))
        elif a != b:
            out.append(f"{path}: {_show(a)} -> {_show(b)}")

    for key in SCORING_KEYS:
        walk(key, old.get(key), new.get(key))
    return out


def _show(v: Any) -> str:
    text = json.dumps(v, default=str) if not isinstance(v, str) else repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def check_resume(
    path: Path, old: Mapping[str, Any] | None, rows: list[Mapping[str, Any]], new: Mapping[str, Any]
) -> str | None:
    """Raise SettingsMismatch when the rows in `path` were scored under other settings than `new`. Returns a
    warning for a file written before headers existed (only its rows' profile can be checked)."""
    if not rows and old is None:
        return None
    if old is None:
        profiles = sorted({str(r.get("profile")) for r in rows if r.get("profile")})
        if profiles and profiles != [str(new.get("profile"))]:
            raise SettingsMismatch(
                f"{path} holds results scored with profile {', '.join(profiles)}; this run uses "
                f"{new.get('profile')!r}. Pass another --out, or --rescore to score everything again "
                f"(the old file is kept as {path.name}.prev)"
            )
        return f"{path} records no run settings (written by an older rtlreward): resuming on the profile name alone"
    diffs = differences(old, new)
    if diffs:
        shown = "; ".join(diffs[:6]) + (f"; and {len(diffs) - 6} more" if len(diffs) > 6 else "")
        raise SettingsMismatch(
            f"{path} was scored under other settings ({shown}). Pass another --out, or --rescore to score "
            f"everything again (the old file is kept as {path.name}.prev)"
        )
    return None


def set_aside(path: Path) -> Path | None:
    """`--rescore`: move the old results to FILE.prev (replacing an older .prev) so the run starts afresh."""
    if not path.exists():
        return None
    prev = path.with_name(path.name + ".prev")
    path.replace(prev)
    return prev


__all__ = [
    "SCORING_KEYS",
    "SettingsMismatch",
    "check_resume",
    "differences",
    "header_line",
    "is_header",
    "run_settings",
    "set_aside",
]
