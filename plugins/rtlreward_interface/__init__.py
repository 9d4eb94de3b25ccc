"""The `interface` stage: does the answer's top module have the ports the task expects?

A design with the wrong port names cannot connect to the harness, so it fails every test for a reason a model
can fix in one step. This stage names that reason (each missing, extra and mismatched port) and gives partial
credit: matched ports / expected ports, where a port with the right name but the wrong direction or width
counts half (both wrong: nothing), because the harness still finds it by name.

The expected interface comes from, in order: `task.interface`; the reference solution's module `task.toplevel`;
a module header in the spec's code blocks; the `dut.<name>` signals the harness's cocotb tests touch (names only:
a test may also read internal signals by hierarchy, so there a name declared inside the module also matches).
With none of these the stage passes with score 1 and says so (`interface_known` = 0), so a profile's maximum
stays reachable for tasks that cannot be checked.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

import attrs

from rtlreward import hookimpl
from rtlreward.model import Diagnostic, Interface, Port, StageResult, Status
from rtlreward.stage import Stage, StageContext
from rtlreward_hdl.interface import (
    UNKNOWN,
    context_modules,
    expected_interface,
    harness_signals,
    hdl_files,
    task_headers,
)
from rtlreward_hdl.slang import (
    ExpansionTooLarge,
    ModuleInfo,
    module_infos,
    parse_modules,
    slang_version,
)

__all__ = ["InterfaceStage", "compare_interface", "expected_interface", "harness_signals", "parse_modules"]


@attrs.frozen
class Comparison:
    score: float
    module_found: bool
    diagnostics: tuple[Diagnostic, ...]
    metrics: dict
    exact: bool  # every expected port matched in name, direction and width, and no extra port


def _fmt(p: Port) -> str:
    width = "" if p.width is None else f" ({p.width} bit{'s' if p.width != 1 else ''})"
    return f"{p.direction} {p.name}{width}" if p.direction != UNKNOWN else p.name


def _port_fields(p: Port) -> dict:
    """A port as structured fields of a finding (width None: unknown, e.g. an unresolved parameter)."""
    return {"port": p.name, "direction": None if p.direction == UNKNOWN else p.direction, "width": p.width}


def compare_interface(expected: Interface, modules: Mapping[str, ModuleInfo]) -> Comparison:
    """Compare the answer's modules with the expected interface, port by port."""
    info = modules.get(expected.module)
    n_exp = len(expected.ports)
    base = {
        "ports_expected": n_exp,
        "ports_matched": 0,
        "ports_missing": 0,
        "ports_mismatched": 0,
        "ports_extra": 0,
        "module_found": 0,
    }
    if info is None:
        declared = ", ".join(modules) or "no module"
        msg = f"no module named {expected.module}: the answer declares {declared}"
        d = Diagnostic(msg, code="interface.module_missing", fields={"module": expected.module})
        return Comparison(0.0, False, (d,), base, False)
    file, line = info.file, info.line
    names_only = expected.source in ("harness", "spec+harness")
    actual = {p.name: p for p in info.interface.ports}
    credit = 0.0
    diags: list[Diagnostic] = []
    matched = missing = mismatched = 0
    for exp in expected.ports:
        got = actual.get(exp.name)
        if got is None:
            if names_only and exp.name in info.members:
                credit += 1
                matched += 1
                diags.append(
                    Diagnostic(
                        f"{exp.name} is declared inside {expected.module}, not a port; the tests "
                        "reach it by hierarchy",
                        file=file,
                        line=line,
                        severity="info",
                        code="interface.internal_signal",
                        fields={"port": exp.name},
                    )
                )
                continue
            missing += 1
            unmatched = [n for n in actual if n not in {p.name for p in expected.ports}]
            near = difflib.get_close_matches(exp.name, unmatched, n=1, cutoff=0.6) or [
                n for n in unmatched if n.lower() == exp.name.lower()
            ]
            hint = f" (the answer has {near[0]})" if near else ""
            diags.append(
                Diagnostic(
                    f"missing port {_fmt(exp)}{hint}",
                    file=file,
                    line=line,
                    code="interface.port_missing",
                    fields={**_port_fields(exp), **({"near": near[0]} if near else {})},
                )
            )
            continue
        problems: list[tuple[str, str]] = []
        if exp.direction != UNKNOWN and got.direction != exp.direction:
            problems.append(
                (f"direction {got.direction}, expected {exp.direction}", "interface.direction_mismatch")
            )
        if exp.width is not None and got.width is not None and exp.width != got.width:
            problems.append((f"width {got.width}, expected {exp.width}", "interface.width_mismatch"))
        if problems:
            mismatched += 1
            credit += 0.5 if len(problems) == 1 else 0.0
            # one finding per kind of problem, so a report counts width and direction errors apart
            fields = {
                **_port_fields(exp),
                "actual_direction": got.direction,
                "actual_width": got.width,
            }
            for text, code in problems:
                diags.append(
                    Diagnostic(f"port {exp.name}: {text}", file=file, line=line, code=code, fields=fields)
                )
        else:
            credit += 1
            matched += 1
    expected_names = {p.name for p in expected.ports}
    extra = [p for p in info.interface.ports if p.name not in expected_names] if not names_only else []
    for p in extra:
        diags.append(
            Diagnostic(
                f"extra port {_fmt(p)} (not in the expected interface)",
                file=file,
                line=line,
                severity="warning",
                code="interface.port_extra",
                fields=_port_fields(p),
            )
        )
    score = credit / n_exp if n_exp else 1.0
    metrics = {
        **base,
        "ports_matched": matched,
        "ports_missing": missing,
        "ports_mismatched": mismatched,
        "ports_extra": len(extra),
        "module_found": 1,
    }
    exact = matched == n_exp and not extra
    return Comparison(score, True, tuple(diags), metrics, exact)


class InterfaceStage(Stage):
    name = "interface"
    version = "2"  # 2: namespaced codes with the port's name, direction and width as fields
    requires = ("safety",)
    description = "top module name, port names, directions and widths match the expected interface"

    def tool_versions(self) -> dict[str, str]:
        return {"pyslang": slang_version()}

    def run(self, ctx: StageContext) -> StageResult:
        task = ctx.task
        expected = expected_interface(task)
        if expected is None:
            note = "no expected interface (no declaration, reference, spec header or harness signals): not checked"
            return self.result(
                Status.PASSED,
                1.0,
                metrics={"interface_known": 0},
                diagnostics=[Diagnostic(note, severity="info", code="interface.unknown")],
            )
        files = hdl_files(ctx.files)
        headers = {**task_headers(task), **hdl_files(ctx.files)}
        try:
            infos, parsed = module_infos(files, headers) if files else ({}, None)
        except ExpansionTooLarge as e:  # pyslang runs in this process: the answer's macros are refused first
            return self._too_large(e)
        context_note = None
        if expected.module not in infos and expected.module in context_modules(task):
            # The top module is one of the task's files (the answer fills in a part of it): check it as the
            # simulator will see it, with the answer's files in place.
            both = {**{p: t for p, t in hdl_files(task.context).items() if p not in files}, **files}
            try:
                infos, _ = module_infos(both, headers)
            except ExpansionTooLarge as e:
                return self._too_large(e)
            context_note = Diagnostic(
                f"{expected.module} is declared in the task's files, not in the answer; checked with the answer's "
                "files in place",
                severity="info",
                code="interface.context_top",
            )
        cmp = compare_interface(expected, infos)
        metrics = {"interface_known": 1, "interface_source": expected.source, **cmp.metrics}
        diags = list(cmp.diagnostics) + ([context_note] if context_note else [])
        errors = list(parsed.errors) if parsed is not None else []
        score = cmp.score
        if cmp.module_found:
            info = infos[expected.module]
            errors = [e for e in errors if e.file == info.file]
            lo, hi = info.header_lines or (0, 0)
            in_header = [e for e in errors if e.line is not None and lo <= e.line <= hi]
            if in_header:
                # Recovered ports of a broken port list are guesses: no credit for them.
                score = 0.0
                diags.append(
                    Diagnostic(
                        f"the port list of {expected.module} has a syntax error, so its ports cannot be read: "
                        f"{in_header[0].message}",
                        file=info.file,
                        line=in_header[0].line,
                        code="interface.header_syntax",
                    )
                )
        metrics["parse_errors"] = len(errors)
        if errors:
            # A design that does not parse earns no interface credit: its ports come from a recovered parse, and a
            # stub with the right header and a broken body must not earn what a working design does.
            score = 0.0
        for e in errors[:5]:
            diags.append(
                Diagnostic(
                    f"syntax error (ports read from slang's recovered parse): {e.message}",
                    file=e.file,
                    line=e.line,
                    severity="warning",
                    code="interface.syntax",
                )
            )
        passed = cmp.module_found and score >= 1.0 and not errors
        status = Status.PASSED if passed else Status.FAILED
        feedback = ""
        problems = [d for d in diags if d.severity in ("error", "warning")]
        if problems:
            feedback = f"Interface of {expected.module} (expected from the {expected.source}): " + "; ".join(
                d.message for d in problems
            )
        return self.result(status, score, metrics=metrics, diagnostics=diags, feedback=feedback)

    def _too_large(self, e: ExpansionTooLarge) -> StageResult:
        """The answer's macros expand past what pyslang may read in this process: the answer's `failed`."""
        d = Diagnostic(e.message, code="resource-limit", fields={"limit": e.limit})
        metrics = {"interface_known": 1, "resource_limit": e.limit}
        return self.result(Status.FAILED, 0.0, metrics=metrics, diagnostics=[d], feedback=d.message)


@hookimpl
def rtlreward_register_stages(register):
    register(InterfaceStage())
