"""rtlreward's verdict probe: the half of the verdict channel that runs INSIDE the sandbox (the other half, and
the reasons for the design, are in `rtlreward.verdict`).

A harness's test code and the simulated design share processes and a file system: whatever file the tests write
their results to, the design can write too (Icarus accepts `$fopenw`, and a `final` block runs after cocotb has
written its results). So the results the parent believes are a record signed with a per-run key that only this
module holds: HMAC-SHA256 over a canonical JSON payload that carries the run's nonce.

Life of a probed process (every Python whose environment names a key file, `RTLREWARD_PROBE_KEY`):
1. The seeding `sitecustomize` (rtlreward.seeding) imports this module first thing at interpreter start-up, before
   any harness module and before the simulator runs one instant of the design (cocotb's Python starts when the
   simulator loads it, before time 0; pytest's plugins load before collection).
2. It drops its variables from the environment, reads the key file and unlinks it (a child, or the design through
   `/proc/self/environ`, which keeps the initial environment, finds a path to nothing), marks the process
   non-dumpable (for a non-root sandbox user `/proc/self/mem` becomes unreadable), stops bytecode writing (no
   `__pycache__` folder appears where the design could write), and installs the import guard.
3. The import guard: from then on a module is imported only from the Python installation, the folders the
   parent names as trusted (the probe's own), or the harness's own files by exact path and SHA-256 (compiled from
   that checked source, never from a cached .pyc). A file the design planted (in the working folder cocotb puts first on `sys.path`, next to a harness module, or an
   `encodings.py` for the next process) is skipped as if it were not there.
4. It imports the hook modules the parent names (`RTLREWARD_PROBE_HOOKS`, e.g. the cocotb or pytest hooks of the
   HDL library), which call `emit(payload)` once the harness has its results and before the design can run again.
   A hook that spawns further probed processes (pytest launching simulators) gives each its own key with
   `child(...)` and checks their records itself.

A probed process whose key cannot be read ends at once (exit 97): a second Python that inherited the variables,
or a re-run, can never run unwatched.

Standard library only, Python 3.8+ (the sim image's 3.13, the cocotb 1.9 venv, the host's). The parent imports the
same file as `rtlreward.probe.rtlreward_probe` for `sign` and `verify`; it boots only under its sandbox name.
"""

from __future__ import annotations

import os
import sys

KEY_VAR = "RTLREWARD_PROBE_KEY"  # path of the key file: read and unlinked at start-up
OUT_VAR = "RTLREWARD_PROBE_OUT"  # where the signed record goes
ROLE_VAR = "RTLREWARD_PROBE_ROLE"  # what this process reports ("cocotb", "pytest"): hooks read it
HOOKS_VAR = "RTLREWARD_PROBE_HOOKS"  # comma-separated modules; `activate(probe)` installs their hooks
TRUST_VAR = "RTLREWARD_PROBE_TRUST"  # JSON {"dirs": [...], "files": {path: sha256}, "untrusted": [...]}
VARS = (KEY_VAR, OUT_VAR, ROLE_VAR, HOOKS_VAR, TRUST_VAR)
RECORD_VERSION = 1
MAX_RECORD_BYTES = 8 << 20
MAX_KEY_BYTES = 4096
EXIT_NO_KEY = 97

_BOOT = __name__ == "rtlreward_probe" and bool(os.environ.get(KEY_VAR))


def _stdlib_path() -> list:
    """The interpreter's own library folders: where the probe's imports come from while it boots (sys.path puts
    PYTHONPATH, where a harness's folder lies, before the standard library). Found from `encodings`, which the
    interpreter imported from its library before any site code ran (frozen modules such as `os` may report a
    prefix-derived path that does not exist, as in a venv's Python embedded by a simulator)."""
    out = []
    bases = []
    enc = sys.modules.get("encodings")
    if enc is not None and getattr(enc, "__file__", None):
        bases.append(os.path.dirname(os.path.dirname(enc.__file__)))
    bases += [os.path.dirname(getattr(os, "__file__", "") or ""), getattr(sys, "_stdlib_dir", None)]
    for base in bases:
        if base and base not in out and os.path.isdir(os.path.join(base, "encodings")):
            out += [base, os.path.join(base, "lib-dynload")]
    return out


if _BOOT:
    _SAVED_PATH = sys.path[:]
    sys.path[:] = _stdlib_path()
try:
    import contextlib
    import hashlib
    import hmac
    import importlib
    import importlib.machinery
    import json
    import secrets
    import stat
    import threading

    if _BOOT:
        import ctypes  # prctl; imported here, from the standard library only
finally:
    if _BOOT:
        sys.path[:] = _SAVED_PATH


# -- the record format (shared with the parent) -------------------------------------------------------------------
def canonical(payload: dict) -> bytes:
    """The bytes the MAC covers: sorted keys, no spaces, ASCII. Payloads hold no floats (exact round trip)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def sign(payload: dict, key: bytes) -> bytes:
    """One record: `{"v": 1, "payload": {...}, "mac": hex}` and a newline."""
    mac = hmac.new(key, canonical(payload), hashlib.sha256).hexdigest()
    return json.dumps({"v": RECORD_VERSION, "payload": payload, "mac": mac}, sort_keys=True).encode() + b"\n"


def verify(data: bytes, key: bytes, nonce: str):
    """The payload if `data` is one record signed with `key` for the run `nonce`, else None."""
    if not isinstance(data, (bytes, bytearray)) or len(data) > MAX_RECORD_BYTES:
        return None
    try:
        rec = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(rec, dict) or set(rec) != {"v", "payload", "mac"} or rec["v"] != RECORD_VERSION:
        return None
    payload, mac = rec["payload"], rec["mac"]
    if not isinstance(payload, dict) or not isinstance(mac, str):
        return None
    try:
        expected = hmac.new(key, canonical(payload), hashlib.sha256).hexdigest()
    except (TypeError, ValueError):
        return None
    if not hmac.compare_digest(expected, mac) or payload.get("nonce") != nonce:
        return None
    return payload


def read_key_file(path: str):
    """(key bytes, nonce) from a key file, which is unlinked whatever happens. Raises OSError/ValueError."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            data = os.read(fd, MAX_KEY_BYTES + 1)
        finally:
            os.close(fd)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
    if len(data) > MAX_KEY_BYTES:
        raise ValueError("key file too large")
    spec = json.loads(data.decode("ascii"))
    key, nonce = bytes.fromhex(spec["key"]), spec["nonce"]
    if len(key) < 16 or not isinstance(nonce, str) or not nonce:
        raise ValueError("malformed key file")
    return key, nonce


def write_key_file(path: str, key: bytes, nonce: str) -> None:
    """Create a key file that did not exist (never follows or reuses a planted name)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o600)
    try:
        os.write(fd, json.dumps({"key": key.hex(), "nonce": nonce}).encode("ascii"))
    finally:
        os.close(fd)


def write_record(path: str, data: bytes) -> None:
    """Write next to `path` under a fresh name, then rename over it: a reader sees the whole record or none."""
    tmp = f"{path}.{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_record(path: str):
    """The bytes of a record file, or None when it is missing, not a regular file, or too large."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_RECORD_BYTES:
                return None
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


# -- the import guard -------------------------------------------------------------------------------------------
def _real(path: str) -> str:
    """The resolved path ('' is the working folder). Raises ValueError when it cannot be resolved."""
    try:
        return os.path.realpath(path or os.getcwd())
    except OSError as exc:
        raise ValueError(str(exc)) from exc


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _sha256_file(path: str):
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return None


class Guard:
    """Which files a module may come from. The most specific rule wins: the harness's own files (by exact path,
    while their content is unchanged), then the deepest of the trusted folders (the interpreter's own, and
    those the parent declares read-only, such as a seeding folder mounted read-only inside the workspace) and
    the untrusted roots (what the sandbox can write: the workspace)."""

    def __init__(self, dirs=(), files=None, untrusted=()) -> None:
        self.untrusted = sorted({_real(p) for p in untrusted if p})
        self.dirs = sorted({_real(p) for p in dirs if p} - {"/"})
        self.files = {_real(p): h for p, h in (files or {}).items()}
        self.refused = []  # (module, file): what was skipped, for diagnostics

    def _verdict(self, rp: str):
        """True (trusted folder), False (untrusted root) or None (neither), by the deepest matching rule."""
        best, verdict = -1, None
        for d in self.dirs:
            if _under(rp, d) and len(d) > best:
                best, verdict = len(d), True
        for u in self.untrusted:
            if _under(rp, u) and len(u) >= best:
                best, verdict = len(u), False
        return verdict

    def file_ok(self, path: str) -> bool:
        return self.file_rule(path) is not None

    def file_rule(self, path: str):
        """ "file" (a harness file, content checked), "dir" (under a trusted folder) or None (refused)."""
        try:
            rp = _real(path)
        except (TypeError, ValueError):
            return None
        want = self.files.get(rp)
        if want is not None:
            return "file" if _sha256_file(rp) == want else None
        return "dir" if self._verdict(rp) is True else None

    def dir_ok(self, path: str) -> bool:
        try:
            rp = _real(path)
        except (TypeError, ValueError):
            return False
        if any(_under(f, rp) and f != rp for f in self.files):
            return True  # a namespace folder holding harness files
        return self._verdict(rp) is True

    def entry_ok(self, entry) -> bool:
        """Whether a sys.path entry may stay on a child's PYTHONPATH: anything but an untrusted folder, unless it
        holds harness files (the guard still checks each module found there)."""
        if not isinstance(entry, str):
            return False
        try:
            rp = _real(entry)
        except (TypeError, ValueError):
            return False
        return self._verdict(rp) is not False or any(_under(f, rp) for f in self.files)

    def spec_rule(self, spec):
        origin = getattr(spec, "origin", None)
        if not origin or not getattr(spec, "has_location", False):
            return None
        return self.file_rule(origin)

    def spec_ok(self, spec) -> bool:
        return self.spec_rule(spec) is not None


class _SourceOnly(importlib.machinery.SourceFileLoader):
    """Loads a harness module from the source whose digest the guard just checked, never from a cached .pyc
    beside it (which no digest covers)."""

    def path_stats(self, path):
        raise OSError("harness modules are compiled from their checked source")


_GUARD = None
_ORIG_FIND_SPEC = None


def _guarded_find_spec(cls, fullname, path=None, target=None):
    """`PathFinder.find_spec`, one sys.path entry at a time, skipping what the guard refuses: a planted module
    never shadows the real one (and never aborts an import the real one would satisfy)."""
    guard = _GUARD
    entries = sys.path if path is None else path
    portions = []
    for entry in list(entries):
        if not isinstance(entry, str):
            continue
        spec = _ORIG_FIND_SPEC(fullname, [entry], target)
        if spec is None:
            continue
        if spec.loader is None:  # a namespace package portion
            portions += [p for p in (spec.submodule_search_locations or ()) if guard.dir_ok(p)]
            continue
        rule = guard.spec_rule(spec)
        if rule == "file" and isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            spec.loader = _SourceOnly(spec.name, spec.origin)
        if rule is not None:
            return spec
        if len(guard.refused) < 50:
            guard.refused.append((fullname, str(spec.origin)))
    if portions:
        return _ORIG_FIND_SPEC(fullname, portions, target)
    return None


def install_guard(guard: Guard) -> None:
    """Route every path-based import (importlib's PathFinder, which pytest's and cocotb's import hooks call too)
    through `guard`. Idempotent; the guard can be replaced."""
    global _GUARD, _ORIG_FIND_SPEC
    _GUARD = guard
    if _ORIG_FIND_SPEC is None:
        _ORIG_FIND_SPEC = importlib.machinery.PathFinder.find_spec
        importlib.machinery.PathFinder.find_spec = classmethod(_guarded_find_spec)
        importlib.invalidate_caches()


def guard():
    return _GUARD


# -- watching imports (hooks patch a module right after it is executed) -----------------------------------------
_WATCH = {}


class _Loader:
    """Wraps a module's loader to run callbacks right after the module body ran."""

    def __init__(self, inner, callbacks) -> None:
        self._inner = inner
        self._callbacks = callbacks

    def create_module(self, spec):
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create else None

    def exec_module(self, module) -> None:
        self._inner.exec_module(module)
        for cb in self._callbacks:
            cb(module)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _Watcher:
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        callbacks = _WATCH.pop(fullname, None)
        if not callbacks:
            return None
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is cls or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            _WATCH[fullname] = callbacks
            return spec
        spec.loader = _Loader(spec.loader, callbacks)
        return spec


def after_import(name: str, callback) -> None:
    """Call `callback(module)` once module `name` is imported (now, if it already is)."""
    mod = sys.modules.get(name)
    if mod is not None and getattr(mod, "__spec__", None) is not None:
        callback(mod)
        return
    _WATCH.setdefault(name, []).append(callback)
    if _Watcher not in sys.meta_path:
        sys.meta_path.insert(0, _Watcher)


# -- the booted process ---------------------------------------------------------------------------------------
class _State:
    def __init__(self, key: bytes, nonce: str, out: str, role: str, trust_json: str) -> None:
        self.key = key
        self.nonce = nonce
        self.out = out
        self.role = role
        self.trust_json = trust_json
        self.emitted = False
        self.lock = threading.Lock()
        self.child_dir = None


_STATE = None


def booted() -> bool:
    return _STATE is not None


def role():
    return _STATE.role if _STATE is not None else None


def emit(payload: dict) -> bool:
    """Sign `payload` (plus this run's nonce and role) and write it to the output path. Once per process: the
    first record is the verdict."""
    st = _STATE
    if st is None:
        return False
    with st.lock:
        if st.emitted:
            return False
        st.emitted = True
        body = dict(payload)
        body["nonce"] = st.nonce
        body["role"] = st.role
        try:
            write_record(st.out, sign(body, st.key))
        except OSError as exc:
            _say(f"cannot write the verdict record: {exc}")
            return False
    return True


class Child:
    """A key for one probed child process (a simulator pytest launches): its environment, and its record."""

    def __init__(self, key: bytes, nonce: str, key_path: str, out: str, env: dict) -> None:
        self.key, self.nonce, self.key_path, self.out, self.env = key, nonce, key_path, out, env

    @property
    def started(self) -> bool:
        """Whether a probed process took the key (a child that never started leaves it)."""
        return not os.path.exists(self.key_path)

    def collect(self):
        """(payload or None, why not): read and verify the child's record, then remove its files."""
        started = self.started
        data = read_record(self.out)
        for p in (self.key_path, self.out):
            with contextlib.suppress(OSError):
                os.unlink(p)
        if data is None:
            return None, ("no record" if started else "the probe never started in the child")
        payload = verify(data, self.key, self.nonce)
        if payload is None:
            return None, "the record is not authentic"
        return payload, ""


def child(role_name: str, hooks: str) -> Child:
    """A fresh key file for one child process in this process's private folder (under TMPDIR, which the
    sandbox makes private)."""
    st = _STATE
    if st is None:
        raise RuntimeError("the rtlreward probe is not running in this process")
    with st.lock:
        if st.child_dir is None:
            base = os.environ.get("TMPDIR") or "/tmp"
            d = os.path.join(base, "rtlreward-probe-" + secrets.token_hex(8))
            os.mkdir(d, 0o700)
            st.child_dir = d
    name = secrets.token_hex(12)
    key, nonce = secrets.token_bytes(32), secrets.token_hex(16)
    key_path = os.path.join(st.child_dir, name + ".key")
    out = os.path.join(st.child_dir, name + ".json")
    write_key_file(key_path, key, nonce)
    env = {KEY_VAR: key_path, OUT_VAR: out, ROLE_VAR: role_name, HOOKS_VAR: hooks, TRUST_VAR: st.trust_json}
    return Child(key, nonce, key_path, out, env)


def _say(message: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, (f"rtlreward probe: {message}\n").encode("utf-8", "replace"))


def _die(message: str) -> None:
    _say(message)
    os._exit(EXIT_NO_KEY)


def _not_dumpable() -> None:
    """prctl(PR_SET_DUMPABLE, 0): /proc/<pid>/mem, fd/ and environ become root's, and same-uid processes (the
    simulators this process starts) can no longer read its memory."""
    with contextlib.suppress(Exception):  # not Linux, no libc symbol: the other layers still hold
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)


def _install_dirs():
    """The interpreter's own folders (read-only in every sandbox): standard library and site-packages."""
    dirs = {sys.prefix, sys.exec_prefix, getattr(sys, "base_prefix", sys.prefix)}
    dirs.add(getattr(sys, "base_exec_prefix", sys.exec_prefix))
    dirs.update(_stdlib_path())
    dirs.add(os.path.dirname(os.path.abspath(__file__)))
    return [d for d in dirs if d]


def _boot() -> None:
    global _STATE
    spec = {name: os.environ.pop(name, None) for name in VARS}
    try:
        key, nonce = read_key_file(spec[KEY_VAR] or "")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        _die(
            f"no verdict key for this process ({type(exc).__name__}): a process started with the probe's variables must be the one "
            "the runner launched"
        )
    if not spec[OUT_VAR]:
        _die("no output path for the verdict record")
    _not_dumpable()
    sys.dont_write_bytecode = True  # no __pycache__ folder appears where the design could write
    trust_json = spec[TRUST_VAR] or "{}"
    try:
        trust = json.loads(trust_json)
        if not isinstance(trust, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        _die(f"malformed trust spec: {exc}")
    install_guard(
        Guard(
            dirs=[*_install_dirs(), *trust.get("dirs", ())],
            files=trust.get("files") or {},
            untrusted=trust.get("untrusted", ()),
        )
    )
    _STATE = _State(key, nonce, spec[OUT_VAR], spec[ROLE_VAR] or "", trust_json)
    probe = sys.modules[__name__]
    for name in filter(None, (spec[HOOKS_VAR] or "").split(",")):
        try:
            importlib.import_module(name.strip()).activate(probe)
        except Exception as exc:
            _die(f"cannot activate hook {name}: {exc!r}")


if _BOOT:
    _boot()
