"""Probe hook and pytest plugin for a pytest session that launches simulators (a CVDP service's
`pytest /src/test_runner.py`): signs the session's per-test outcomes, exit status, and the verified record of
every simulation it ran.

Loaded twice over, by design: the verdict probe imports it at interpreter start-up (`RTLREWARD_PROBE_HOOKS`,
`activate`), and pytest loads the same module as a plugin (`-p rtlreward_pytest_probe`). The plugin half is
inert in a process the probe did not start with the session key.

Why the session also watches its simulators: a CVDP test calls cocotb's runner, which starts the simulator and
then reads cocotb's results XML from the working folder, a file the design can rewrite; pytest's own verdict
inherits that. So every `Runner.test` call (cocotb 2's `cocotb_tools.runner`, cocotb 1.9's `cocotb.runner`)
gets its own child key (`probe.child`): the simulator's cocotb hook signs its regression with it, and this
session verifies that record right after the simulator ends, before the next one starts, and reports it with the
pytest test it ran under. The child sees a PYTHONPATH without untrusted folders.

Reported (`probe.emit` at `pytest_sessionfinish`): `exitstatus`, `collected` (the items after collection),
`items` (nodeid, outcome, message), collection `errors`, `sims` (item, started, problem, the child's payload) and
what the import guard refused.

Standard library only; no pytest import (hooks are plain functions, so activation costs nothing).
"""

from __future__ import annotations

import os
import sys
import threading

_RUNNER_MODULES = ("cocotb_tools.runner", "cocotb.runner")  # cocotb 2.x, cocotb 1.9
COCOTB_HOOK = "rtlreward_cocotb_probe"
_MAX_MESSAGE = 2000
_MAX_SIMS = 1000

_PROBE = None
_SESSION = None
_LOCAL = threading.local()


class _Session:
    def __init__(self) -> None:
        self.items: dict = {}
        self.collected = None
        self.errors: list = []
        self.sims: list = []
        self.current = None
        self.lock = threading.Lock()

    def item(self, nodeid: str) -> dict:
        rec = self.items.get(nodeid)
        if rec is None:
            rec = self.items[nodeid] = {"nodeid": nodeid, "outcome": "", "message": ""}
        return rec

    def payload(self, exitstatus: int) -> dict:
        guard = _PROBE.guard() if _PROBE is not None else None
        return {
            "kind": "pytest",
            "exitstatus": int(exitstatus),
            "collected": self.collected,
            "items": list(self.items.values()),
            "errors": self.errors[:50],
            "sims": self.sims[:_MAX_SIMS],
            "sims_total": len(self.sims),
            "refused": [list(r) for r in (guard.refused if guard is not None else [])][:50],
        }


def activate(probe) -> None:
    """Session role: watch the cocotb runners as soon as they are imported."""
    global _PROBE, _SESSION
    _PROBE, _SESSION = probe, _Session()
    for name in _RUNNER_MODULES:
        probe.after_import(name, _patch_runner_module)


def _patch_runner_module(module) -> None:
    for obj in list(vars(module).values()):
        if not isinstance(obj, type) or obj.__module__ != module.__name__:
            continue
        fn = vars(obj).get("test")
        if callable(fn) and not getattr(fn, "_rtlreward_probe", False):
            obj.test = _wrap(fn)


def _patch_loaded() -> None:
    for name in _RUNNER_MODULES:
        mod = sys.modules.get(name)
        if mod is not None:
            _patch_runner_module(mod)


def _wrap(original):
    def test(self, *args, **kwargs):
        __tracebackhide__ = True  # pytest's reports show the harness's frames, not this wrapper
        session = _SESSION
        if session is None or getattr(_LOCAL, "active", False):  # not probed, or a subclass calling super()
            return original(self, *args, **kwargs)
        child = _PROBE.child("cocotb", COCOTB_HOOK)
        saved_env = {k: os.environ.get(k) for k in child.env}
        saved_path = sys.path[:]
        guard = _PROBE.guard()
        os.environ.update(child.env)
        if guard is not None:  # cocotb's runner hands sys.path to the simulator as PYTHONPATH
            sys.path[:] = [p for p in sys.path if guard.entry_ok(p)]
        _LOCAL.active = True
        try:
            return original(self, *args, **kwargs)
        finally:
            _LOCAL.active = False
            sys.path[:] = saved_path
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            started = child.started
            payload, problem = child.collect()
            with session.lock:
                session.sims.append(
                    {"item": session.current, "started": started, "problem": problem, "record": payload}
                )

    test._rtlreward_probe = True
    test.__doc__ = original.__doc__
    test.__name__ = getattr(original, "__name__", "test")
    test.__qualname__ = getattr(original, "__qualname__", "test")
    return test


# -- pytest plugin hooks (plain functions: this module imports no pytest) ----------------------------------------
def pytest_configure(config) -> None:
    if _SESSION is not None:
        _patch_loaded()


def pytest_collectreport(report) -> None:
    if _SESSION is not None and report.failed:
        _SESSION.errors.append({"nodeid": report.nodeid, "message": _text(report)})


def pytest_collection_finish(session) -> None:
    if _SESSION is not None:
        _SESSION.collected = len(session.items)
        _patch_loaded()


def pytest_runtest_logstart(nodeid, location) -> None:
    if _SESSION is not None:
        _SESSION.current = nodeid
        _SESSION.item(nodeid)


def pytest_runtest_logfinish(nodeid, location) -> None:
    if _SESSION is not None:
        _SESSION.current = None


def pytest_runtest_logreport(report) -> None:
    if _SESSION is None:
        return
    rec = _SESSION.item(report.nodeid)
    if report.failed:
        if rec["outcome"] != "failed":
            rec["message"] = _text(report)
        rec["outcome"] = "failed"
    elif report.skipped:
        if rec["outcome"] in ("", "passed"):
            rec["outcome"] = "skipped"
    elif report.when == "call" and rec["outcome"] == "":
        rec["outcome"] = "passed"


def pytest_sessionfinish(session, exitstatus) -> None:
    if _SESSION is not None:
        _PROBE.emit(_SESSION.payload(int(exitstatus)))


def _text(report) -> str:
    """The failure's own line (pytest's `reprcrash`: "AssertionError: ..."), then the end of the report."""
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    head = str(getattr(crash, "message", "") or "")
    try:
        text = report.longreprtext or ""
    except Exception:
        text = ""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    tail = "\n".join(lines[-12:])
    out = f"{head}\n{tail}" if head else tail
    return out[:_MAX_MESSAGE]
