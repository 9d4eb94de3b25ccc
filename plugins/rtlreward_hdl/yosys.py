"""Running Yosys the same way in every stage that needs it (equivalence, synth): libyosys from the `pyosys` wheel
in the executor's Python, else the `yosys` binary; tool versions for cache keys; the checks that keep a name or a
path from ever becoming script syntax."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from typing import Any

__all__ = [
    "IDENT_RE",
    "SAFE_PATH_RE",
    "YOSYS_RUNNER",
    "check_ident",
    "check_path",
    "missing_tool",
    "pyosys_dir",
    "pyosys_version",
    "tool_version",
]

IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SAFE_PATH_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+/-]*$")

# Runs a Yosys script with libyosys (the `pyosys` wheel) in the executor's Python, as `yosys -q -s SCRIPT` would:
# the log goes to SCRIPT.log beside it (libyosys has no quiet switch, and a sandbox may not open /dev/null for
# writing), errors and `log -stderr` lines go to stderr, an error exits 1. Without pyosys there, the `yosys`
# binary on PATH runs the script instead.
# Runs a Yosys script with libyosys from the pyosys wheel, else the `yosys` binary. The interpreter starts with
# -I -S (no site import: ~60 ms less per run on a large site-packages) and is handed the folder holding pyosys
# here; where that folder does not exist (a container), the site import finds the wheel as before.
YOSYS_RUNNER = (
    "import os, sys\n"
    "if os.path.isdir(sys.argv[2]):\n"
    "    sys.path.insert(0, sys.argv[2])\n"
    "try:\n"
    "    from pyosys import libyosys as ys\n"
    "except ImportError:\n"
    "    try:\n"
    "        import site\n"
    "        site.main()\n"
    "        from pyosys import libyosys as ys\n"
    "    except ImportError:\n"
    "        os.execvp('yosys', ['yosys', '-q', '-s', sys.argv[1]])\n"
    "chain = sys.argv[3:]\n"
    "if chain:\n"
    "    import signal\n"
    "    signal.alarm(max(1, int(float(chain[0]) + 0.999)))\n"
    "    out = os.dup(1)\n"
    "os.dup2(os.open(sys.argv[1] + '.log', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)\n"
    "ys.run_pass('script ' + sys.argv[1], ys.Design())\n"
    "if chain:\n"
    "    signal.alarm(0)\n"
    "    os.dup2(out, 1)\n"
    "    if not os.path.isfile(chain[2]):\n"
    "        sys.exit(0)\n"
    "    d = os.environ.get('RTLREWARD_DECIDE_WITH', '')\n"
    "    if d and os.path.isfile(os.path.join(d, 'yosys_server.py')):\n"
    "        sys.path.insert(0, d)\n"
    "        import yosys_server\n"
    "        if yosys_server.aiger_decide(os.environ.get('RTLREWARD_DECIDE_FILE', '')) is not None:\n"
    "            sys.exit(0)\n"
    "    os.write(1, (chain[1] + '\\n').encode())\n"
    "    os.execv(chain[2], chain[2:])\n"
)
# With three or more extra arguments (seconds, nonce, program, its arguments...) the runner is a chain: Yosys's part
# is cut by SIGALRM after `seconds` (the command's own limit then covers what follows), and when the script
# succeeds and `program` exists where the command runs, the runner prints the nonce on its standard output and
# becomes `program` (the proof's ABC): one sandboxed command instead of two. Without that line the caller runs the
# program itself. With RTLREWARD_DECIDE_WITH naming a folder holding `yosys_server.py` (visible where the command
# runs), the AIGER file RTLREWARD_DECIDE_FILE names is first read by its `aiger_decide`: a miter decided without ABC
# ends the chain there (the caller decides it from the file again).


def check_ident(name: str) -> str:
    """`name` when it is a plain identifier (never script syntax), else ValueError."""
    if not IDENT_RE.match(name):
        raise ValueError(f"not a plain identifier: {name!r}")
    return name


def check_path(path: str) -> str:
    """`path` when it is a plain relative path (no `..`, no script syntax), else ValueError."""
    if not SAFE_PATH_RE.match(path) or ".." in path.split("/"):
        raise ValueError(f"not a safe script path: {path!r}")
    return path


@functools.cache
def pyosys_dir() -> str:
    """The folder holding the pyosys package here ('' without it), found without importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("pyosys")
    except (ImportError, ValueError):
        return ""
    if spec is None or not spec.submodule_search_locations:
        return ""
    return os.path.dirname(next(iter(spec.submodule_search_locations)))


@functools.cache
def pyosys_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("pyosys")
    except importlib.metadata.PackageNotFoundError:
        return ""


@functools.cache
def tool_version(argv: tuple[str, ...]) -> str:
    """The first line a tool prints for its version (`missing` when it is not on PATH)."""
    exe = shutil.which(argv[0])
    if exe is None:
        return "missing"
    try:
        out = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    text = (out.stdout + out.stderr).strip().splitlines()
    return text[0][:80] if text else "unknown"


def missing_tool(res: Any, tool: str) -> bool:
    """Whether a command result says `tool` could not be started (the shell's 127, or an exec error)."""
    text = res.stderr or ""
    # bubblewrap's own line when the exec fails (`bwrap: execvp yosys: No such file or directory`), alone on its
    # line: a tool's error message quoting such text (an answer's `$error("execvp yosys: ...")` in Yosys's
    # elaboration error) is not one.
    pattern = rf"^(?:bwrap: )?execvp {re.escape(tool)}: No such file or directory\s*$"
    return res.returncode == 127 or re.search(pattern, text, re.M) is not None
