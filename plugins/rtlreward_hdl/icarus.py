"""Icarus Verilog helpers the compile stage and the harness runners share: identifying the installed Icarus
(for cache keys) and reading its messages as diagnostics."""

from __future__ import annotations

import os
import re
import shutil

from rtlreward.model import Diagnostic
from rtlreward_hdl.files import OUTSIDE_MESSAGE, relative_file

__all__ = ["iverilog_version", "parse_iverilog"]

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
