"""Probe hook for a simulator running cocotb: signs the regression's per-test outcomes at its end.

The end of a cocotb regression is the moment cocotb hands its xUnit report to `XUnitReporter.write` (cocotb 2.x
`RegressionManager._tear_down`, cocotb 1.9 the same method): every test, including those a simulator failure
failed, is scored; the simulator is paused inside cocotb's callback; the design's `final` blocks run only after
cocotb asks the simulator to stop, which is after this. A design that ends the simulation early (`$finish`)
makes cocotb fail the remaining tests and tear down the same way. So this hook reads the report from memory,
before it is written anywhere, signs it with `probe.emit`, then lets cocotb write its file for humans.

Reported per test: name (the test function's qualified name, with cocotb 2's `/param=value` suffix when
parametrised), module, outcome (passed / failed / skipped) and the failure message; plus the modules and test
filter cocotb was given, so the parent can check the record covers every test the module defines.

Standard library only (runs in whichever Python the simulator embeds); cocotb 1.9 and 2.x.
"""

from __future__ import annotations

import os

_MODULES = ("cocotb._xunit_reporter", "cocotb.xunit_reporter")  # cocotb 2.x, cocotb 1.9
_MAX_MESSAGE = 2000


def activate(probe) -> None:
    for name in _MODULES:
        probe.after_import(name, lambda module, probe=probe: _patch(module, probe))


def _patch(module, probe) -> None:
    cls = getattr(module, "XUnitReporter", None)
    if cls is None or getattr(cls, "_rtlreward_probe", False):
        return
    original = cls.write

    def write(self, *args, **kwargs):
        try:
            probe.emit(_payload(self))
        except Exception as exc:  # no record: the parent reports an error, never a pass
            probe._say(f"cannot report the cocotb results: {exc!r}")
        return original(self, *args, **kwargs)

    write.__doc__ = original.__doc__
    cls.write = write
    cls._rtlreward_probe = True


def _payload(reporter) -> dict:
    root = getattr(reporter, "_root", None)
    if root is None:
        root = getattr(reporter, "results", None)
    if root is None:
        raise RuntimeError("unknown XUnitReporter layout")
    tests = []
    for case in root.iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, message = "failed", _message(child)
                break
            if child.tag == "skipped":
                outcome = "skipped"
        tests.append(
            {
                "name": case.get("name") or "",
                "module": case.get("classname") or "",
                "outcome": outcome,
                "message": message,
            }
        )
    env = os.environ
    try:
        import cocotb

        version = str(getattr(cocotb, "__version__", ""))
    except Exception:
        version = ""
    return {
        "kind": "cocotb",
        "cocotb": version,
        "modules": env.get("COCOTB_TEST_MODULES") or env.get("MODULE") or "",
        "filter": env.get("COCOTB_TEST_FILTER") or "",
        "testcase": env.get("COCOTB_TESTCASE") or env.get("TESTCASE") or "",
        "tests": tests,
    }


def _message(element) -> str:
    """The assertion, not cocotb's generic "Test failed with RANDOM_SEED=..." when the traceback has one."""
    msg = (element.get("message") or "").strip()
    text = (element.text or "").strip()
    if text and (not msg or msg.startswith("Test failed") or len(msg) < 8):
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        for line in reversed(lines):
            if "Error" in line or "assert" in line.lower():
                msg = line
                break
        else:
            msg = msg or (lines[-1] if lines else "")
    return msg[:_MAX_MESSAGE]
