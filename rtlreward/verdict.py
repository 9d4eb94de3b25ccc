"""A verdict channel the design cannot reach.

The problem. A harness's tests and the design under test run in the same processes (cocotb's Python is embedded
in the simulator) and share one writable workspace. Everything the tests can write, the design can write too:
Icarus accepts `$fopenw`, and a `final` block runs after cocotb has written its results, so a design that does
nothing can overwrite `results.xml` (or a CVDP runner's JUnit file) with seven passing test cases. A verdict read
from any file, stream or exit code the design can touch is the design's to choose.

The mechanism, and why this one:
- **A signed record, not a file's contents.** Per run the parent draws a 256-bit key and a nonce
  (`secrets.token_bytes`). The probe (`rtlreward/probe/rtlreward_probe.py`, standard library only) signs the
  harness's results as `HMAC-SHA256(key, canonical JSON payload)`, the payload carrying the nonce. The parent
  accepts a payload only if the MAC checks with this run's key and the nonce is this run's (`Channel.receive`).
  The design may still write, truncate or delete the record file: that costs it the run (no authentic record is
  an `error`, never a pass and never cached), it cannot make a pass. Nothing else the design can write (JUnit or
  cocotb XML, status files, log text, the exit code) decides a verdict any more.
- **A key the design cannot read.** The key travels in a file (name drawn per run) whose path is in the
  environment. The probe runs first thing at interpreter start-up (the seeding `sitecustomize`), reads the file,
  unlinks it and drops the variables, before the harness imports anything and before the simulator runs one
  instant of the design. Not the environment itself: `/proc/self/environ` keeps a process's initial environment
  for its whole life, so the design could read a key passed that way; the path it finds there leads to nothing.
  Not stdin or an inherited descriptor: cocotb's runner starts the simulator with `close_fds` and its own
  stdin, and an open descriptor is reachable through `/proc/self/fd`. The probed process is made non-dumpable,
  so for a non-root sandbox user (the Docker executor's) `/proc/self/mem` and `/proc/<pid>/fd` are root's; and
  the pytest process that holds the session key starts the simulators, which cannot read a non-dumpable
  parent's memory even as root without capabilities.
- **Only the harness's code runs with the key.** A design with file I/O could plant Python where the probed
  process imports it (cocotb puts the working folder first on `sys.path`; a harness folder on PYTHONPATH comes
  before the standard library; an `encodings.py` there hijacks the next interpreter's start-up). The probe's
  import guard takes a module only from the interpreter's own folders, folders the parent declares read-only,
  or the harness's files by exact path and SHA-256 (`Trust`); a planted file is skipped as if absent.
  Runners also make the harness's folder read-only for the run and drop untrusted folders from a child's
  PYTHONPATH, and set `PYTHONNOUSERSITE`, `PYTHONSAFEPATH` and `PYTHONDONTWRITEBYTECODE` (a cached .pyc is never
  taken for a harness module: the guard compiles it from the source it checked).
- **Complete, not just authentic.** A record lists every test the harness ran; runners check it against what
  the harness defines (the cocotb test functions of the test module, read with `ast` on the parent side; pytest's
  collected count) and treat a missing or extra test as an `error`.

What it does not cover (docs/security.md): a design that executes native code in the simulator's process
(Verilator `$c`, DPI, `$system`: the safety gate refuses them) can read its own process's key, as could a design
reading `/proc/self/mem` if the sandbox ran it as root (only the local executor's no-bubblewrap fallback when it
cannot drop privileges; as the sandbox's unprivileged user a non-dumpable process's /proc files are root's);
either can forge its own simulation's record, not another's. Without any sandbox (no bubblewrap, root) the
design can write anywhere, the probe's folders included: none of this holds there.

This module is the parent's half; it names no plugin. Harness runners (`rtlreward_cocotb`, the CVDP runners,
third parties) open a `Channel` per probed process, put `Channel.env(...)` and `probe_env()` in its environment,
`PROBE_DIR` (and their hook folders) on its PYTHONPATH after the seeding folder, and call `receive()` afterwards.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from rtlreward.probe import rtlreward_probe as _probe

__all__ = [
    "EXIT_NO_KEY",
    "HOOKS_VAR",
    "KEY_VAR",
    "OUT_VAR",
    "PROBE_DIR",
    "ROLE_VAR",
    "TRUST_VAR",
    "Channel",
    "Received",
    "Trust",
    "probe_env",
    "sha256_text",
    "sign",
    "verify",
]

PROBE_DIR = Path(_probe.__file__).resolve().parent
KEY_VAR, OUT_VAR, ROLE_VAR, HOOKS_VAR, TRUST_VAR = (
    _probe.KEY_VAR,
    _probe.OUT_VAR,
    _probe.ROLE_VAR,
    _probe.HOOKS_VAR,
    _probe.TRUST_VAR,
)
EXIT_NO_KEY = _probe.EXIT_NO_KEY
sign = _probe.sign
verify = _probe.verify


def sha256_text(text: str | bytes) -> str:
    """The digest the import guard compares a harness file against (of the bytes written to disk)."""
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def probe_env() -> dict[str, str]:
    """Interpreter settings every probed process gets: no user site folder (its `.pth` files run before any
    guard), no script folder on `sys.path`, no bytecode written (so no `__pycache__` folder appears where the
    design could plant a .pyc; Icarus cannot create folders, and the guard compiles harness modules from source)."""
    return {"PYTHONNOUSERSITE": "1", "PYTHONSAFEPATH": "1", "PYTHONDONTWRITEBYTECODE": "1"}


def _paths(paths: Iterable[str | os.PathLike[str]]) -> tuple[str, ...]:
    return tuple(os.fspath(p) for p in paths)


@attrs.frozen(slots=True)
class Trust:
    """What the probe's import guard lets a probed process import from, in paths as the SANDBOX sees them.

    `dirs`: folders the sandbox cannot write (the probe folders; a seeding folder mounted read-only). The
    interpreter's own folders are added inside the sandbox. `files`: the harness's own Python files, path ->
    SHA-256 of their content. `untrusted`: what the sandbox can write (the workspace); the deepest rule wins.
    """

    dirs: tuple[str, ...] = attrs.field(default=(), converter=_paths)
    files: Mapping[str, str] = attrs.field(
        factory=dict, converter=lambda m: {str(k): v for k, v in m.items()}
    )
    untrusted: tuple[str, ...] = attrs.field(default=(), converter=_paths)

    def to_json(self) -> str:
        import json

        return json.dumps(
            {
                "dirs": list(self.dirs),
                "files": dict(sorted(self.files.items())),
                "untrusted": list(self.untrusted),
            },
            sort_keys=True,
        )

    @staticmethod
    def hashed(files: Mapping[str, str | bytes], place: Callable[[str], str]) -> dict[str, str]:
        """{sandbox path: sha256} of the Python files among `files` ({relative path: content});
        `place(rel)` is where the sandbox sees a relative path."""
        return {place(rel): sha256_text(text) for rel, text in files.items() if rel.endswith(".py")}


@attrs.frozen(slots=True)
class Received:
    """What came back from one probed process: the authentic payload, or why there is none."""

    payload: dict[str, Any] | None
    problem: str = ""
    started: bool = True  # the probe took its key (False: the process never started, or was never probed)

    @property
    def authentic(self) -> bool:
        return self.payload is not None


@attrs.frozen(slots=True)
class Channel:
    """One probed process's key, nonce and files (on the host). Open one per process whose results count."""

    key: bytes = attrs.field(repr=False)
    nonce: str
    key_file: Path
    out_file: Path
    role: str
    hooks: tuple[str, ...] = ()

    @classmethod
    def open(cls, folder: Path, *, role: str, hooks: Iterable[str] = ()) -> Channel:
        """Draw a key and a nonce, write the key file under `folder` (created) under a fresh name."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        name = secrets.token_hex(12)
        key, nonce = secrets.token_bytes(32), secrets.token_hex(16)
        key_file = folder / f"k-{name}"
        _probe.write_key_file(str(key_file), key, nonce)
        return cls(key, nonce, key_file, folder / f"v-{name}.json", role, tuple(hooks))

    def env(self, trust: Trust, place: Callable[[Path], str] = str) -> dict[str, str]:
        """The variables that start the probe in the process, paths mapped by `place` (host path -> the path the
        sandbox sees; identity when the workspace is mounted at its own path)."""
        return {
            KEY_VAR: place(self.key_file),
            OUT_VAR: place(self.out_file),
            ROLE_VAR: self.role,
            HOOKS_VAR: ",".join(self.hooks),
            TRUST_VAR: trust.to_json(),
        }

    @property
    def started(self) -> bool:
        """The probe took the key (it unlinks the file first thing): the process ran, and so may the design."""
        return not os.path.lexists(self.key_file)

    def receive(self) -> Received:
        """Verify the record (once the process has ended) and remove the key file if it is still there."""
        started = self.started
        self.close()
        data = _probe.read_record(str(self.out_file))
        if data is None:
            why = "no verdict record" if started else "the probed process never started"
            return Received(None, why, started)
        payload = verify(data, self.key, self.nonce)
        if payload is None:
            return Received(None, "the verdict record is not authentic", started)
        if payload.get("role") != self.role:
            return Received(None, f"the verdict record is for role {payload.get('role')!r}", started)
        return Received(payload, "", started)

    def close(self) -> None:
        """Remove the key file (a process that never started leaves it)."""
        with contextlib.suppress(FileNotFoundError):
            self.key_file.unlink()
