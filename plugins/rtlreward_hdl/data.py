"""Where benchmark data lives when no source is given: an environment variable, then `../shared/data/<name>`
beside the checkout or the working directory. The dataset plugins (VerilogEval, RTLLM, CVDP) share it."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_source", "project_root"]


def project_root() -> Path:
    """The checkout rtlreward runs from (editable install): `../shared` beside it holds the benchmark data."""
    import rtlreward

    return Path(rtlreward.__file__).resolve().parents[1]


def default_source(name: str, env_var: str) -> tuple[Path | None, list[Path]]:
    """Where a benchmark's files are when no `source` was given: `$<env_var>`, then `../shared/data/<name>`
    beside the project root, then beside the working directory. Returns (found or None, places looked)."""
    looked: list[Path] = []
    env = os.environ.get(env_var)
    if env:
        looked.append(Path(env))
    looked.append(project_root().parent / "shared" / "data" / name)
    looked.append(Path.cwd().parent / "shared" / "data" / name)
    looked.append(Path.cwd() / "shared" / "data" / name)
    for p in looked:
        if p.is_dir():
            return p, looked
    return None, looked
