"""Shell completion (Tab) for the values a command line names most: profiles and datasets.

`rtlreward --install-completion` installs the shell hook; these functions are the options' `autocompletion`:
a profile is a preset or plugin profile name, or a `.toml` file; a dataset is a registered dataset name, or a
path. A broken plugin set completes what it can and never prints a traceback into the shell.
"""

from __future__ import annotations

from pathlib import Path


def _paths(incomplete: str, suffixes: tuple[str, ...] = ()) -> list[str]:
    """Files (with one of `suffixes`, when given) and folders starting with `incomplete`."""
    base = Path(incomplete).expanduser()
    folder, prefix = (base, "") if incomplete.endswith("/") else (base.parent, base.name)
    try:
        entries = sorted(folder.iterdir()) if str(folder) else sorted(Path(".").iterdir())
    except OSError:
        return []
    out = []
    for p in entries:
        if not p.name.startswith(prefix) or (p.name.startswith(".") and not prefix.startswith(".")):
            continue
        shown = str(p) if incomplete.startswith("./") or str(folder) != "." else p.name
        if p.is_dir():
            out.append(shown + "/")
        elif not suffixes or p.name.endswith(suffixes):
            out.append(shown)
    return out


def complete_profile(incomplete: str) -> list[str]:
    """Preset and plugin profile names, then profile TOML files."""
    try:
        from rtlreward.profiles import available_profiles

        names = sorted(available_profiles())
    except Exception:  # completion must never fail loudly
        names = []
    return [n for n in names if n.startswith(incomplete)] + _paths(incomplete, (".toml",))


def complete_dataset(incomplete: str) -> list[str]:
    """Registered dataset names, then paths (task folders, JSONL files)."""
    try:
        from rtlreward.plugins import get_registry

        names = sorted(get_registry().datasets())
    except Exception:
        names = []
    return [n for n in names if n.startswith(incomplete)] + _paths(incomplete)


__all__ = ["complete_dataset", "complete_profile"]
