"""What the HDL stages (lint, compile, tests, ...) share: the file extensions, comment stripping, which files elaborate together, writing them into a stage's
folder, refusing includes that leave the workspace, and keeping tool messages about outside files out of
diagnostics (a tool that reads `/etc/passwd` as Verilog quotes its lines in the error text).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

from rtlreward.model import Diagnostic, Task
from rtlreward.stage import StageContext, UnsafePath, safe_relpath, write_files

SOURCE_EXTS = (".v", ".sv", ".vlog", ".verilog", ".vams", ".vp", ".svp")
HEADER_EXTS = (".vh", ".svh", ".vinc", ".inc", ".svi")
HDL_EXTS = SOURCE_EXTS + HEADER_EXTS


def strip_comments(text: str, *, keep_strings: bool = True) -> str:
    """Blank out comments (and string literals unless `keep_strings`) keeping every newline, so line numbers of
    what remains are the original ones. A small lexer, not a regex, so `//` inside a string stays a string.
    Remembered for recent texts of ordinary size (the stages of one candidate ask for the same text ~10 times)."""
    if len(text) <= _STRIP_MEMO_TEXT:
        return _strip_comments_memo(text, keep_strings)
    return _strip_comments(text, keep_strings)


_STRIP_MEMO_TEXT = 64 * 1024


@functools.lru_cache(maxsize=256)
def _strip_comments_memo(text: str, keep_strings: bool) -> str:
    return _strip_comments(text, keep_strings)


def _strip_comments(text: str, keep_strings: bool) -> str:
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"' and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n) if j < n and text[j] == '"' else j
            seg = text[i:j]
            if not keep_strings:  # same length and newlines, quotes kept: offsets stay valid
                inner = "".join(ch if ch == "\n" else " " for ch in seg[1:])
                seg = '"' + (inner[:-1] + '"' if seg.endswith('"') and len(seg) > 1 else inner)
            out.append(seg)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


_INCLUDE_RE = re.compile(r'`include\b[ \t]*(?:"([^"\n]*)"|<([^>\n]*)>)')


def is_source(path: str) -> bool:
    return path.lower().endswith(SOURCE_EXTS)


def toplevel(task: Task) -> str | None:
    """The design's top module: the task's own, else the harness's."""
    if task.toplevel:
        return task.toplevel
    if task.harness is not None:
        for key in ("toplevel", "TOPLEVEL", "hdl_toplevel"):
            if task.harness.options.get(key):
                return str(task.harness.options[key])
    return None


def workspace_files(ctx: StageContext) -> dict[str, str]:
    """Context files first, then the answer's files over them (the answer wins a name clash)."""
    files = dict(ctx.task.context)
    files.update(ctx.files)
    return files


def compile_sources(task: Task, answer: Mapping[str, str], available: Iterable[str]) -> list[str]:
    """The source files that elaborate with the answer: the task's `compile_sources` (what its harness compiles),
    else the expected files plus context HDL under rtl/. The answer's own HDL sources are always in."""
    available = set(available)
    out: list[str] = []
    if task.compile_sources:
        out = [p for p in task.compile_sources if p in available and is_source(p)]
    else:
        out = [p for p in task.expected_files if p in available and is_source(p)]
        out += sorted(p for p in task.context if p.startswith("rtl/") and is_source(p) and p not in out)
    for p in answer:
        if is_source(p) and p not in out:
            out.append(p)
    return out


def materialise(ctx: StageContext, stage: str) -> tuple[Path, dict[str, str]]:
    """Write context and answer files into the stage's folder; returns (folder, files written)."""
    root = ctx.stage_dir(stage)
    files = {}
    for rel, text in workspace_files(ctx).items():
        try:
            files[str(safe_relpath(rel))] = text
        except UnsafePath:
            continue
    write_files(root, files)
    return root, files


def include_dirs(sources: Iterable[str]) -> list[str]:
    """Folders of the given files, so `include "foo.vh"` finds a sibling header (workspace-relative)."""
    dirs = []
    for p in sources:
        d = str(PurePosixPath(p).parent)
        if d not in dirs:
            dirs.append(d)
    return dirs


def unsafe_includes(files: Mapping[str, str]) -> list[Diagnostic]:
    """`include`s naming an absolute path, `~` or `..`: refused before any tool runs (the safety stage does a
    deeper check; this one holds even when that stage is turned off)."""
    diags = []
    for rel, text in files.items():
        if not rel.lower().endswith(HDL_EXTS):
            continue
        clean = strip_comments(text)
        for m in _INCLUDE_RE.finditer(clean):
            target = (m.group(1) or m.group(2) or "").strip()
            parts = target.replace("\\", "/").split("/")
            if target.startswith(("/", "~")) or ".." in parts or re.match(r"^[A-Za-z]:", target):
                line = clean.count("\n", 0, m.start()) + 1
                diags.append(
                    Diagnostic(
                        "`include of a path outside the workspace is not allowed; include files of the answer by "
                        "relative name",
                        file=rel,
                        line=line,
                        code="unsafe-include",
                    )
                )
    return diags


def relative_file(path: str, root: Path) -> str | None:
    """A tool's file name as a workspace-relative path, or None when it lies outside `root`."""
    if not path:
        return None
    p = Path(path)
    full = p if p.is_absolute() else root / p
    real_root = os.path.realpath(root)
    real = os.path.realpath(full)
    if real == real_root or not real.startswith(real_root.rstrip("/") + "/"):
        return None
    return os.path.relpath(real, real_root)


OUTSIDE_MESSAGE = "a file outside the workspace was read (its content is not shown)"


def summarise(diags: Iterable[Diagnostic], limit: int = 3) -> str:
    """The first few diagnostics as one line each, for a model's next turn."""
    diags = list(diags)
    lines = [str(d) for d in diags[:limit]]
    if len(diags) > limit:
        lines.append(f"... and {len(diags) - limit} more")
    return "\n".join(lines)
