"""The `cocotb` harness runner: runs a task's cocotb tests (Icarus by default, Verilator on request) for the
`tests` stage (plugins/rtlreward_tests), which dispatches to it for tasks whose `harness.kind == "cocotb"`.

Score = tests passed / tests run; only "every test passed" is a pass. The verdict comes only from the record
rtlreward's verdict probe signs inside the simulator at the end of cocotb's regression, before the design's
`final` blocks can run (`rtlreward.verdict`, hook `rtlreward_hdl/probe/rtlreward_cocotb_probe.py`), checked
against the test functions the harness's test module defines. cocotb's results XML, the driver's status file, the
exit code and log text are the design's to write and decide nothing: a simulation that ran without leaving an
authentic, complete record is an `error` (never a pass, never cached). A build that failed before the simulator
started (no design code ran yet) is `failed` with the tool's errors; a timeout is `timeout`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import attrs

from rtlreward import hookimpl
from rtlreward.model import Diagnostic, StageResult, Status
from rtlreward.seeding import seed_env
from rtlreward.stage import StageContext, UnsafePath, safe_relpath, write_files
from rtlreward.verdict import Channel, Received, Trust, probe_env
from rtlreward_hdl.files import compile_sources, summarise, toplevel, unsafe_includes
from rtlreward_hdl.icarus import iverilog_version, parse_iverilog
from rtlreward_hdl.probes import COCOTB_HOOK, check_cocotb, defined_tests, probe_dirs
from rtlreward_hdl.verilator import VerilatorNotFound, parse_verilator, verilator_bin_dir, verilator_version

__all__ = ["CocotbRunner", "TestCase", "parse_junit"]

STAGE = "tests"  # the stage whose results this runner produces
VERSION = "1"
# Icarus defaults to 1 s units: a harness clock in ns would not tick. Tasks may set their own.
DEFAULT_TIMESCALE = "1ns/1ps"
# Answer files never written next to the harness: Python the test process would import instead of the harness's.
_NO_ANSWER_EXTS = (".py", ".pyc", ".pth", ".so", ".pyd")


@attrs.frozen
class TestCase:
    name: str
    passed: bool
    skipped: bool = False
    message: str = ""
    file: str | None = None
    line: int | None = None


def parse_junit(path: Path) -> list[TestCase]:
    """Every <testcase> of cocotb's JUnit XML; a <failure>/<error> child fails it, <skipped> skips it.

    Raises ValueError when the file is not XML (a crash mid-write).
    """
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        raise ValueError(f"results file is not valid XML: {e}") from e
    cases = []
    for tc in root.iter("testcase"):
        name = tc.get("name") or "?"
        fail = tc.find("failure")
        if fail is None:
            fail = tc.find("error")
        skipped = tc.find("skipped") is not None
        msg = ""
        if fail is not None:
            msg = (fail.get("message") or "").strip()
            text = (fail.text or "").strip()
            if text and (not msg or msg.startswith("Test failed") or len(msg) < 8):
                msg = _last_line(text) or msg
        line = tc.get("lineno")
        cases.append(
            TestCase(
                name=name,
                passed=fail is None and not skipped,
                skipped=skipped and fail is None,
                message=msg,
                file=tc.get("file"),
                line=int(line) if line and line.isdigit() else None,
            )
        )
    return cases


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):  # the exception line of a traceback, e.g. "AssertionError: grant=..."
        if "Error" in ln or "assert" in ln.lower():
            return ln
    return lines[-1] if lines else ""


def _timescale(value: Any) -> list[str] | None:
    if not value:
        return None
    if isinstance(value, str):
        unit, _, prec = value.partition("/")
        return [unit.strip(), (prec or unit).strip()]
    unit, prec = value
    return [str(unit), str(prec)]


def _version(dist: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


class CocotbRunner:
    """Runs a task's cocotb tests with `cocotb_tools.runner` (Icarus by default, Verilator on request).

    Harness options: `toplevel`, `test_module` (default: the harness file's stem), `simulator` ("icarus" |
    "verilator"), `timescale` ("1ns/1ps" or [unit, precision]), `sources` (HDL that elaborates with the answer;
    default the task's compile sources), `build_args`, `parameters`. Stage options may override `simulator`.
    """

    kind = "cocotb"

    def tool_versions(self) -> dict[str, str]:
        """What the verdict depends on besides the files: part of the `tests` stage's cache key."""
        return {
            "cocotb": _version("cocotb"),
            "iverilog": iverilog_version(),
            "verilator": verilator_version(),
        }

    def run(self, ctx: StageContext) -> StageResult:
        t = ctx.task
        h = t.harness
        opts: dict[str, Any] = {**h.options, **{k: v for k, v in ctx.options.items() if k in ("simulator",)}}
        root = ctx.stage_dir(STAGE)
        files: dict[str, str] = {}
        for rel, text in t.context.items():
            files[rel] = text
        for rel, text in ctx.files.items():
            if not rel.lower().endswith(_NO_ANSWER_EXTS):
                files[rel] = text
        files.update(h.files)  # the harness wins every name clash
        try:
            files = {str(safe_relpath(k)): v for k, v in files.items()}
        except UnsafePath as e:
            return _result(Status.ERROR, 0, 0, [Diagnostic(str(e), code="unsafe-path")], "")
        bad = unsafe_includes(files)
        if bad:
            return _result(Status.FAILED, 0, 0, bad, summarise(bad))
        for rel in files:  # a folder used before holds read-only harness files (see below)
            if (root / rel).is_file() and not (root / rel).is_symlink():
                (root / rel).chmod(0o644)
        write_files(root, files)

        top = opts.get("toplevel") or toplevel(t)
        py_files = [p for p in h.files if p.endswith(".py")]
        module = opts.get("test_module") or (PurePosixPath(py_files[0]).stem if py_files else None)
        if not top or not module:
            d = Diagnostic(
                "the cocotb harness needs `toplevel` and `test_module` options", code="bad-harness"
            )
            return _result(Status.ERROR, 0, 0, [d], "")
        module_file = next((p for p in py_files if PurePosixPath(p).stem == module), None)
        test_dir = root / (str(PurePosixPath(module_file).parent) if module_file else ".")

        sources = list(opts.get("sources") or [])
        sources = [s for s in sources if s in files] or compile_sources(t, ctx.files, files)
        simulator = str(opts.get("simulator") or "icarus").lower()
        build_args = [str(a) for a in opts.get("build_args", ())]
        path_prepend: list[str] = []
        extra_env: dict[str, str] = {}
        if simulator == "verilator":
            try:
                path_prepend.append(verilator_bin_dir())
            except VerilatorNotFound as e:
                return _result(Status.ERROR, 0, 0, [Diagnostic(str(e), code="tool-missing")], "")
            build_args = ["--timing", "-CFLAGS", "-std=c++20", "-Wno-fatal", *build_args]
            if shutil.which("ccache"):
                extra_env["OBJCACHE"] = "ccache"
                extra_env["CCACHE_DIR"] = str(opts.get("ccache_dir") or (root / ".ccache"))
        elif simulator != "icarus":
            d = Diagnostic(
                f"unsupported simulator {simulator!r}: use icarus or verilator", code="bad-harness"
            )
            return _result(Status.ERROR, 0, 0, [d], "")

        # Build products come from this run only: an agentic answer could ship a prebuilt sim_build or cache.
        for generated in ("_rtlreward", "sim_build", ".ccache"):
            if (root / generated).is_symlink() or (root / generated).is_file():
                (root / generated).unlink()
            elif (root / generated).exists():
                shutil.rmtree(root / generated)
        # The harness's files are read-only for the run: the design (as the sandbox's user, without capabilities)
        # cannot rewrite a module the tests import later, nor the data they read.
        harness_paths = {str(safe_relpath(k)) for k in h.files}
        for rel in harness_paths:
            (root / rel).chmod(0o444)
        out = root / "_rtlreward"
        out.mkdir()
        channel = Channel.open(out, role="cocotb", hooks=(COCOTB_HOOK,))
        probes = [str(d) for d in probe_dirs()]
        trust = Trust(
            dirs=probes,
            files=Trust.hashed(
                {k: v for k, v in files.items() if k in harness_paths}, lambda rel: str(root / rel)
            ),
            untrusted=[str(ctx.workspace.resolve())],
        )
        results_xml = out / "results.xml"  # cocotb's own file: for people, never for the verdict
        status_json = out / "status.json"
        cfg = {
            "simulator": simulator,
            "sources": [str(root / s) for s in sources],
            "includes": sorted({str((root / s).parent) for s in sources}),
            "toplevel": top,
            "test_module": module,
            "build_dir": str(root / "sim_build"),
            "test_dir": str(test_dir),
            "results_xml": str(results_xml),
            "status": str(status_json),
            "timescale": _timescale(opts.get("timescale") or DEFAULT_TIMESCALE),
            "build_args": build_args,
            "parameters": dict(opts.get("parameters") or {}),
            "seed": ctx.seed % (1 << 32),
            # only the simulator gets the key: the driver (and the build) never start the probe
            "extra_env": {**extra_env, **channel.env(trust)},
        }
        (out / "config.json").write_text(json.dumps(cfg))
        driver = out / "driver.py"
        driver.write_text((Path(__file__).parent / "driver.py").read_text())
        env = seed_env(ctx.seed, base_pythonpath=[*probes, str(test_dir)], site_dir=out / "site")
        env.update(probe_env())
        env.update(extra_env)
        try:
            res = ctx.run(
                [ctx.python, str(driver), str(out / "config.json")],
                cwd=root,
                env=env,
                path_prepend=path_prepend,
                read_only=[Path(p) for p in probes],
            )
            received = channel.receive()
        finally:
            channel.close()
        module_text = files.get(str(safe_relpath(module_file))) if module_file else None
        return self._verdict(ctx, res, received, module, module_text, status_json, root)

    def _verdict(
        self,
        ctx: StageContext,
        res,
        received: Received,
        module: str,
        module_text: str | None,
        status_json: Path,
        root: Path,
    ) -> StageResult:
        metrics_extra = {"seed": ctx.seed % (1 << 32)}
        if res.timed_out:
            d = Diagnostic(
                f"the simulation did not finish within {ctx.timeout:g} s (a loop that never advances time, or a "
                "design that never reaches the state the tests wait for)",
                code="timeout",
            )
            return _result(Status.TIMEOUT, 0, 0, [d], d.message, metrics_extra)
        if not received.started:
            # The simulator never took its key, so no design code ran: the driver's status file is still ours.
            st = _read_status(status_json)
            phase = st.get("phase", "start")
            msg = st.get("message") or f"the harness driver exited with code {res.returncode}"
            if phase == "build":
                d = Diagnostic(
                    f"the design did not build for simulation: {_clean(msg, root)}", code="build-failed"
                )
                tool = _build_diagnostics(res.output, root)
                return _result(Status.FAILED, 0, 0, [d, *tool], summarise([d, *tool]), metrics_extra)
            if phase == "test":  # the simulator was loading the design: a limit it hit is the design's
                limited = _exhausted(ctx, res, msg, metrics_extra)
                if limited is not None:
                    return limited
            hint = _last_error(res.output, root)
            d = Diagnostic(
                f"the simulator did not start ({phase}): {_clean(msg, root)}"
                + (f" ({hint})" if hint else ""),
                code="not-started",  # the environment's (results row: tests.not_started), never test-failed
                fields={"phase": phase},
            )
            return _result(Status.ERROR, 0, 0, [d], d.message, metrics_extra)
        if not received.authentic:
            # The design ran and the run ended without a record: a sandbox limit the design hit is its own failure
            # (rtlreward.sandbox.resource_exhaustion); anything else stays an error.
            limited = _exhausted(ctx, res, _read_status(status_json).get("message", ""), metrics_extra)
            if limited is not None:
                return limited
            hint = _last_error(res.output, root)
            d = Diagnostic(
                f"the simulation ended without an authentic test record ({received.problem}; simulator exit code "
                f"{res.returncode}): the simulator crashed, the harness did not start, or the design destroyed the "
                "record" + (f" ({hint})" if hint else ""),
                code="no-record",
            )
            return _result(Status.ERROR, 0, 0, [d], d.message, metrics_extra)
        try:
            defined = {module: defined_tests(module_text)} if module_text is not None else {}
        except SyntaxError as e:
            d = Diagnostic(f"the harness's test module {module} does not parse: {e}", code="bad-harness")
            return _result(Status.ERROR, 0, 0, [d], d.message, metrics_extra)
        run = check_cocotb(received.payload, defined)
        if run.problem:
            d = Diagnostic(
                f"the simulation's test record is incomplete: {run.problem}", code="incomplete-record"
            )
            return _result(Status.ERROR, 0, 0, [d], d.message, metrics_extra)
        cases = run.cases
        ran = [c for c in cases if not c.skipped]
        passed = [c for c in ran if c.passed]
        failed = [c for c in ran if not c.passed]
        if not ran:
            d = Diagnostic("no test ran (every cocotb test of the harness was skipped)", code="no-tests")
            return _result(Status.FAILED, 0, 0, [d], d.message, metrics_extra)
        diags = [
            Diagnostic(f"{c.name}: {_clean(c.message, root) or 'failed'}", code="test-failed") for c in failed
        ]
        if failed:
            head = "; ".join(f"{c.name}: {_clean(c.message, root, 160) or 'failed'}" for c in failed[:3])
            more = f"; ... {len(failed) - 3} more" if len(failed) > 3 else ""
            feedback = f"{len(failed)}/{len(ran)} tests failed: {head}{more}"
            status = Status.FAILED
        else:
            feedback = ""
            status = Status.PASSED
            if res.returncode != 0:  # all recorded tests passed, yet the simulator failed afterwards
                d = Diagnostic(
                    f"the simulator exited with code {res.returncode} after the tests", code="sim-exit"
                )
                return _result(Status.FAILED, len(passed), len(ran), [d], d.message, metrics_extra)
        return _result(status, len(passed), len(ran), diags, feedback, metrics_extra)


def _exhausted(ctx: StageContext, res, message: str, extra: Mapping[str, Any]) -> StageResult | None:
    """The answer's `failed` when the run of its design ended at a sandbox limit (memory, stack, file size,
    processes, output), naming the limit; None otherwise. `message`: the driver's account of how the simulator
    ended (cocotb's "died with <Signals.SIGSEGV: 11>"), which the command's own exit code no longer carries."""
    from rtlreward.sandbox import resource_exhaustion

    hit = resource_exhaustion(
        f"{res.output}\n{message}",
        res.returncode,
        limits=ctx.limits(),
        truncated=bool(getattr(res, "truncated", False)),
    )
    if hit is None:
        return None
    d = Diagnostic(hit.message, code="resource-limit", fields={"limit": hit.limit})
    return _result(Status.FAILED, 0, 0, [d], d.message, {**extra, "resource_limit": hit.limit})


def _result(
    status: Status,
    passed: int,
    total: int,
    diags: list[Diagnostic],
    feedback: str,
    extra: Mapping[str, Any] | None = None,
) -> StageResult:
    score = passed / total if total else 0.0
    if status is not Status.PASSED and status is not Status.FAILED:
        score = 0.0
    return StageResult(
        name=STAGE,
        status=status,
        score=score,
        metrics={"tests_passed": passed, "tests_total": total, **(extra or {})},
        diagnostics=tuple(diags),
        feedback=feedback,
        version=VERSION,
    )


def _build_diagnostics(output: str, root: Path) -> list[Diagnostic]:
    """The simulator's own compile errors (Icarus or Verilator format), so a build failure names file:line."""
    diags = [d for d in parse_verilator(output, root) if d.severity == "error"]
    diags += [d for d in parse_iverilog(output, root) if d.severity == "error" and d.file]
    return diags[:10]


def _read_status(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _clean(text: str, root: Path, limit: int = 300) -> str:
    """Shorten a message for a model: workspace paths relative, one line, bounded."""
    text = (text or "").replace(str(root) + os.sep, "").replace(str(root), ".")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _last_error(output: str, root: Path) -> str:
    """The last `SomethingError: ...` line of a run's output (an import error in the harness, say)."""
    for line in reversed(output.splitlines()[-200:]):
        m = re.search(r"\b([A-Z]\w*(?:Error|Exception)): (.*)$", line)
        if m:
            return _clean(f"{m.group(1)}: {m.group(2)}", root, 200)
    return ""


@hookimpl
def rtlreward_register_harnesses(register):
    register("cocotb", CocotbRunner())
