"""Icarus Verilog helpers the compile stage and the harness runners share: identifying the installed Icarus
(for cache keys), reading its messages as diagnostics, and elaborating without its launcher.

`iverilog` is a launcher: it writes two configuration files, then runs `sh -c "ivlpp ... | ivl ..."`, four
processes where the compiler proper (`ivl`) is one; on a small module the launcher, the shell and the
preprocessor are ~40% of the command's time (3 of 7 ms here). For an answer no preprocessor would change
(`preprocess.inert`), `direct_elaboration` gives the command `ivl` itself runs: the configuration the launcher
writes for `-g2012 -t null [-s TOP]` and the preprocessor's output (each file after its `` `line`` directive).
Only for an Icarus whose configuration this was read from (11.0, checked against the launcher's own in
`tests/test_icarus_direct.py`), elsewhere the launcher runs as before.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
from collections.abc import Mapping, Sequence

from rtlreward.model import Diagnostic
from rtlreward_hdl.files import OUTSIDE_MESSAGE, relative_file

__all__ = [
    "capture_setup",
    "captured_command",
    "direct_command",
    "direct_elaboration",
    "iverilog_version",
    "ivl_folder",
    "line_name",
    "local_launcher",
    "parse_iverilog",
    "place",
]

_LINE_RE = re.compile(r"^(\S[^:\n]*?):(\d+):\s*(?:(error|warning|sorry):\s*)?(.*)$")


def iverilog_version() -> str:
    """Identifies the installed Icarus without running it (a stage runs tools only through the sandbox)."""
    exe = shutil.which("iverilog")
    if not exe:
        return "missing"
    st = os.stat(exe)
    return f"{os.path.realpath(exe)}:{st.st_size}:{int(st.st_mtime)}"


def parse_iverilog(output: str, root) -> list[Diagnostic]:
    """`file:line: error: msg`, `file:line: syntax error`, `file:line: warning: msg` as diagnostics; other
    lines ("I give up.", notes without a severity) are dropped or kept as info."""
    diags: list[Diagnostic] = []
    for raw in output.splitlines():
        m = _LINE_RE.match(raw.strip())
        if not m:
            continue
        file, line, sev, msg = m.groups()
        msg = msg.strip()
        if sev is None:
            sev = "error" if "error" in msg.lower() else "info"
        elif sev == "sorry":
            sev = "error"
            msg = f"unsupported by Icarus: {msg}"
        rel = relative_file(file, root)
        if rel is None:
            diags.append(Diagnostic(OUTSIDE_MESSAGE, severity=sev))
            continue
        diags.append(Diagnostic(msg, file=rel, line=int(line), severity=sev))
    return diags


# What `iverilog -g2012 [-t null] [-o out]` writes for `ivl` (Icarus 11.0), after `root:` when a top is named.
_IVL_CONFIG_2012 = """basedir:{base}
module:{base}/system.vpi
module:{base}/vhdl_sys.vpi
module:{base}/vhdl_textio.vpi
module:{base}/v2005_math.vpi
module:{base}/va_math.vpi
module:{base}/v2009.vpi
generation:2012
generation:no-specify
generation:assertions
generation:xtypes
generation:io-range-error
generation:no-strict-ca-eval
generation:no-strict-expr-width
generation:shared-loop-index
generation:no-verilog-ams
generation:icarus-misc
warnings:n
ignore_missing_modules:false
out:{out}
iwidth:32
widthcap:65536
"""
_DIRECT_VERSION = b"11.0 (stable)"
_PLAIN_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./+-]*")
_BASE_FILES = ("ivl", "ivlpp", "null.conf", "null.tgt", "vvp.conf", "system.vpi", "v2009.vpi")
CONFIG_FILE = "_rtlreward_ivl.conf"
INPUT_FILE = "_rtlreward_ivl.v"


def _ivl_base(launcher: str | None) -> str | None:
    """Icarus's library folder (where `ivl` and its targets are) when the launcher at `launcher` is the version
    whose configuration `_IVL_CONFIG_2012` is; None otherwise."""
    if not launcher:
        return None
    exe = os.path.realpath(launcher)
    try:
        st = os.stat(exe)
    except OSError:
        return None
    return _ivl_base_of(exe, st.st_size, int(st.st_mtime))


@functools.lru_cache(maxsize=8)
def _ivl_base_of(exe: str, size: int, mtime: int) -> str | None:
    try:
        with open(exe, "rb") as fh:
            if _DIRECT_VERSION not in fh.read(8 << 20):
                return None
    except OSError:
        return None
    return ivl_folder(exe)


def ivl_folder(launcher: str | None) -> str | None:
    """Icarus's library folder (`ivl`, `ivlpp`, the targets) beside the launcher at `launcher`, any version."""
    return _ivl_folder_of(os.path.realpath(launcher)) if launcher else None


@functools.lru_cache(maxsize=8)
def _ivl_folder_of(exe: str) -> str | None:
    prefix = os.path.dirname(os.path.dirname(exe))
    for base in (
        os.path.join(prefix, "lib", "ivl"),
        *sorted(glob.glob(os.path.join(prefix, "lib", "*", "ivl"))),
    ):
        if all(os.path.isfile(os.path.join(base, f)) for f in _BASE_FILES):
            return base if "\n" not in base and '"' not in base else None
    return None


def line_name(name: str) -> bool:
    """Whether `name` can stand in a `` `line`` directive and a configuration line as it is."""
    return _PLAIN_NAME_RE.fullmatch(name) is not None


def local_launcher(executor) -> str | None:
    """The `iverilog` a command of `executor` runs, where that is this machine's (the local executor, on its own
    PATH); None elsewhere (a container has its own Icarus) or where there is none."""
    which = getattr(executor, "which", None)
    if getattr(executor, "name", "") != "local" or not callable(which):
        return None
    return which("iverilog")


def direct_command(
    executor, cwd: str | os.PathLike, sources: Sequence[str], texts: Mapping[str, str], top: str | None, **kw
) -> list[str] | None:
    """`direct_elaboration` for a command of `executor` run in `cwd`, its files placed there (`place`): the argv
    to run in place of the launcher's, or None where the launcher runs. The caller checked `inert`."""
    got = direct_elaboration(sources, texts, top, local_launcher(executor), **kw)
    if got is None:
        return None
    argv, extra = got
    return argv if place(cwd, extra) else None


def direct_elaboration(
    sources: Sequence[str],
    texts: Mapping[str, str],
    top: str | None,
    launcher: str | None,
    *,
    target: str = "null",
    out: str = "a.out",
    folder: str = "",
) -> tuple[list[str], dict[str, str]] | None:
    """(argv, files to write) of `ivl` compiling `sources` as `iverilog -g2012 -t <target> [-s top] [-o out]
    <sources>` would (`null`: elaboration only; `vvp`: the simulation program at `out`), or None where the
    launcher must run: no launcher (`launcher`: the `iverilog` the command would run, None where it is not
    found), another Icarus, a file name a `` `line`` directive cannot carry. The caller checked that no text is one
    a preprocessor would change (`preprocess.inert`) and runs the argv where it would run `iverilog`; the files
    (keys relative to that folder) go into `folder` under it."""
    base = _ivl_base(launcher)
    if base is None or not sources or (top is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$]*", top)):
        return None
    if target not in ("null", "vvp") or not os.path.isfile(os.path.join(base, f"{target}.conf")):
        return None
    if not line_name(out) or (folder and not line_name(folder)):
        return None
    if any(
        not line_name(s) or s not in texts or s.split("/")[-1].startswith("_rtlreward_ivl") for s in sources
    ):
        return None
    config = (f"root:{top}\n" if top else "") + _IVL_CONFIG_2012.format(base=base, out=out)
    # ivlpp -L: each file after a `line directive naming it, a newline between files.
    text = "\n".join(f'`line 1 "{s}" 0\n{texts[s]}' for s in sources)
    conf, pp = (f"{folder}/{n}" if folder else n for n in (CONFIG_FILE, INPUT_FILE))
    argv = [os.path.join(base, "ivl"), f"-C{conf}", f"-C{os.path.join(base, f'{target}.conf')}", "--", pp]
    return argv, {conf: config, pp: text}


# -- the launcher's own command, read back --------------------------------------------------------------------------
# For flags and files this module has no configuration of its own for (a benchmark's testbench with its warnings
# and macros), the launcher itself says what it runs: pointed (-B) at a folder holding links to Icarus's own files
# but an `ivl` that records its arguments, its configuration and its input (the preprocessor's output), it runs
# everything up to the compiler proper. `capture_setup` makes that folder, `captured_command` reads what it
# recorded as the `ivl` command to run in its place.
CAPTURE_BASE = "_rtlreward_ivl_base"
_CAPTURE_IVL = """#!/bin/sh
: > _rtlreward_cap.argv
for a in "$@"; do printf '%s\\n' "$a" >> _rtlreward_cap.argv; done
for a in "$@"; do case "$a" in -C{base}/*) ;; -C*) cat "${{a#-C}}" > _rtlreward_cap.conf;; esac; done
cat > _rtlreward_cap.in
"""


def capture_setup(folder: str, launcher: str | None) -> bool:
    """Make `folder`/CAPTURE_BASE: links to every file of Icarus's folder but `ivl`, which records. False where
    Icarus's folder is not found beside the launcher."""
    base = ivl_folder(launcher)
    if base is None:
        return False
    fake = os.path.join(folder, CAPTURE_BASE)
    os.makedirs(fake, exist_ok=True)
    for name in os.listdir(base):
        if name != "ivl" and not os.path.lexists(os.path.join(fake, name)):
            os.symlink(os.path.join(base, name), os.path.join(fake, name))
    script = os.path.join(fake, "ivl")
    with open(script, "w") as fh:
        fh.write(_CAPTURE_IVL.format(base=CAPTURE_BASE))
    os.chmod(script, 0o755)
    return True


def captured_command(folder: str, launcher: str | None) -> tuple[list[str], str, str] | None:
    """(the `ivl` argv with its two placeholders `{config}` and `{input}`, the configuration, the preprocessor's
    output) of a launcher run `-B CAPTURE_BASE` in `folder`, or None where it did not get that far."""
    base = ivl_folder(launcher)
    try:
        with open(os.path.join(folder, "_rtlreward_cap.argv")) as fh:
            args = fh.read().splitlines()
        with open(os.path.join(folder, "_rtlreward_cap.conf")) as fh:
            config = fh.read()
        with open(os.path.join(folder, "_rtlreward_cap.in"), errors="surrogateescape") as fh:
            text = fh.read()
    except OSError:
        return None
    if base is None or not args or args[-1] != "-" or args[-2] != "--":
        return None
    own = [a for a in args[:-2] if a.startswith("-C") and not a.startswith(f"-C{CAPTURE_BASE}/")]
    if len(own) != 1:
        return None
    argv = [os.path.join(base, "ivl")]
    for a in args[:-2]:
        if a == own[0]:
            argv.append("-C{config}")
        else:
            argv.append(a.replace(CAPTURE_BASE, base, 1) if a.startswith(f"-C{CAPTURE_BASE}/") else a)
    argv += ["--", "{input}"]
    # `ivlpp:` names the launcher's temporary files; `ivl` reads it only for library folders (-y)
    lines = [
        ln.replace(CAPTURE_BASE, base) if ln.startswith(("basedir:", "module:")) else ln
        for ln in config.splitlines()
        if not ln.startswith("ivlpp:")
    ]
    return argv, "\n".join(lines) + "\n", text


def place(folder: str | os.PathLike, files: Mapping[str, str]) -> bool:
    """Write a direct command's files (their names relative to `folder`) as new files; False where one of the
    names is taken already (an answer's file or folder of that name: the launcher runs instead)."""
    for name, text in files.items():
        try:
            with open(os.path.join(folder, name), "x", encoding="utf-8", errors="surrogateescape") as fh:
                fh.write(text)
        except OSError:
            return False
    return True
