"""Project settings for the command line: `rtlreward.toml`, or `[tool.rtlreward]` in `pyproject.toml`, in the
working folder or the nearest parent that has one (as ruff and pytest look for theirs).

    # rtlreward.toml                     # or, in pyproject.toml:
    profile = "strict"                   # [tool.rtlreward]
    executor = "docker"                  # profile = "strict"
    jobs = 8
    output_dir = "results"               # relative to the file's folder
    [corpus]                             # a table is a plugin's own section (here rtlreward_corpus's)

Every key is optional; a command-line flag always wins over the file, and the file over the built-in default
(profile `shaped`, executor `local`, jobs = CPU cores, output folder `results`). `RTLREWARD_CONFIG=PATH` names
the file explicitly; `RTLREWARD_CONFIG=` (empty) ignores every file. A mistake in the file is a one-line error.

Also here: the verbosity the root `-v`/`-q` options set, which long commands read to decide on progress bars.
"""

from __future__ import annotations

import logging
import os
import tomllib
from pathlib import Path
from typing import Any

import attrs

DEFAULT_PROFILE = "shaped"
DEFAULT_EXECUTOR = "local"
DEFAULT_OUTPUT_DIR = "results"
KEYS = {"profile": str, "executor": str, "jobs": int, "output_dir": str}


class ConfigError(ValueError):
    """The project file is unreadable or holds an unknown key or a wrong type."""


@attrs.frozen
class ProjectConfig:
    profile: str | None = None
    executor: str | None = None
    jobs: int | None = None
    output_dir: Path | None = None
    source: Path | None = None  # the file these came from (None: no file)

    def pick_profile(self, flag: str | None) -> str:
        return flag or self.profile or DEFAULT_PROFILE

    def pick_executor(self, flag: str | None) -> str:
        return flag or self.executor or DEFAULT_EXECUTOR

    def pick_jobs(self, flag: int | None) -> int | None:
        return flag if flag is not None else self.jobs

    def pick_output_dir(self) -> Path:
        return self.output_dir if self.output_dir is not None else Path(DEFAULT_OUTPUT_DIR)


def find_config(start: Path | None = None) -> tuple[Path, dict[str, Any]] | None:
    """The nearest `rtlreward.toml`, or `pyproject.toml` with a `[tool.rtlreward]` table, from `start` up."""
    env = os.environ.get("RTLREWARD_CONFIG")
    if env is not None:
        if not env:
            return None
        p = Path(env)
        return p, _table(p, p.name == "pyproject.toml")
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        own = folder / "rtlreward.toml"
        if own.is_file():
            return own, _table(own, False)
        py = folder / "pyproject.toml"
        if py.is_file():
            table = _table(py, True)
            if table is not None:
                return py, table
    return None


def _table(path: Path, pyproject: bool) -> dict[str, Any] | None:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    if not pyproject:
        return data
    tool = data.get("tool")
    table = tool.get("rtlreward") if isinstance(tool, dict) else None
    return table if isinstance(table, dict) else None


def load_config(start: Path | None = None) -> ProjectConfig:
    """The project settings in force for a command run in `start` (default: the working folder)."""
    found = find_config(start)
    if found is None or found[1] is None:
        return ProjectConfig()
    path, table = found
    where = f"{path} [tool.rtlreward]" if path.name == "pyproject.toml" else str(path)
    # A table (`[corpus]`, ...) is a plugin's own section, read by that plugin through find_config.
    unknown = sorted(k for k in set(table) - set(KEYS) if not isinstance(table[k], dict))
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; the keys are {', '.join(KEYS)} (docs/evaluate.md)"
        )
    values: dict[str, Any] = {}
    for key, kind in KEYS.items():
        if key not in table:
            continue
        v = table[key]
        if kind is int and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ConfigError(f"{where}: {key} must be a positive integer, got {v!r}")
        if kind is str and (not isinstance(v, str) or not v.strip()):
            raise ConfigError(f"{where}: {key} must be a non-empty string, got {v!r}")
        values[key] = v
    if "output_dir" in values:
        out = Path(values["output_dir"]).expanduser()
        values["output_dir"] = out if out.is_absolute() else path.parent / out
    return ProjectConfig(**values, source=path)


# -- verbosity (-v / -q) ---------------------------------------------------------------------------------------
_verbosity = 0


def set_verbosity(level: int) -> None:
    """-q is -1, nothing 0, -v 1, -vv 2: the `rtlreward` loggers' level, and whether progress bars show."""
    global _verbosity
    _verbosity = level
    log_level = {-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO}.get(level, logging.DEBUG)
    logging.basicConfig(level=log_level, format="%(levelname)s %(name)s: %(message)s")
    for name in ("rtlreward", "cvdp_adapter"):
        logging.getLogger(name).setLevel(log_level)


def verbosity() -> int:
    return _verbosity


def quiet() -> bool:
    return _verbosity < 0


__all__ = [
    "ConfigError",
    "ProjectConfig",
    "find_config",
    "load_config",
    "quiet",
    "set_verbosity",
    "verbosity",
]
