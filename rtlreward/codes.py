"""Stable diagnostic codes: `<namespace>.<name>`, the same for every run, so a report can count failure causes
across runs, datasets and versions without parsing messages.

Stages name their findings with short tool-specific ids (`missing-port`, Verilator's `WIDTH`, the cocotb runner's
`test-failed`); several harness runners report the same outcome under different ids. `stable_code(stage, d)`
maps each to one spelling under its stage's namespace, e.g.

    interface.port_missing   interface.port_extra   interface.width_mismatch   interface.direction_mismatch
    lint.WIDTH  (Verilator's own code, kept as Verilator spells it)   lint.error (a Verilator error without one)
    compile.error   tests.failed   tests.timeout   tests.build_failed   verilog_eval.mismatch   safety.<category>
    answer.unexpected_path   engine.deadline

A code that already has a namespace (a dot) is kept: stages that name their findings in this scheme
(`interface`, `safety`, the VerilogEval runner, the engine's `answer.*`) pass through unchanged. A stage may map its
older ids with a `codes` class attribute ({"compile-failed": "error"} gives `compile.error`). A tool's ALL-CAPS
code keeps its spelling; anything else becomes `<stage>.<code with - as _>` (or `<stage>.error` /
`<stage>.warning` / `<stage>.info` when the stage gave none), so every row code has a namespace even for a
third-party stage. These tables are part of the results file's format (docs/evaluate.md): renaming an entry is a
breaking change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Outcomes every stage can have: legacy code -> stable code. What a stage's own ids become is the stage's to say
# (its `codes` attribute, e.g. the compile stage maps "compile-failed" to "compile.error"): the core names no stage.
_COMMON: dict[str, str] = {
    "timeout": "{stage}.timeout",
    "tool-missing": "{stage}.tool_missing",
    "stage-exception": "engine.stage_exception",
    "engine-deadline": "engine.deadline",
}


def stage_codes(stage: str) -> Mapping[str, str]:
    """The stage's own legacy-code table (`Stage.codes`) from the loaded plugins; {} when it has none."""
    from rtlreward.plugins import get_registry

    try:
        obj = get_registry().stages().get(stage)
    except Exception:  # a broken plugin set must not cost a results row
        return {}
    codes = getattr(obj, "codes", None)
    return codes if isinstance(codes, Mapping) else {}


def stable_code(
    stage: str, code: str | None, severity: str = "error", codes: Mapping[str, str] | None = None
) -> str:
    """The namespaced code a results row records for a finding of `stage` with the stage's own `code`. `codes`
    is the stage's own table (default: looked up with `stage_codes`)."""
    ns = stage or "engine"
    if code and "." in code:
        return code
    if not code:
        return f"{ns}.{severity or 'error'}"
    table = stage_codes(ns) if codes is None else codes
    mapped = table.get(code) or _COMMON.get(code)
    if mapped:
        return mapped.format(stage=ns) if "." in mapped else f"{ns}.{mapped}"
    if code.isupper():  # a tool's own codes keep their spelling: Verilator's WIDTH, UNUSEDSIGNAL, ...
        return f"{ns}.{code}"
    return f"{ns}.{code.replace('-', '_')}"


def diagnostic_row(stage: str, d: Any) -> dict[str, Any]:
    """A diagnostic as a results row holds it: the stable code, where, how bad, the message and the structured
    fields (the stage's own code under `fields.tool_code` when it differs, so nothing is lost)."""
    raw = d.to_dict() if hasattr(d, "to_dict") else dict(d)
    code = stable_code(stage, raw.get("code"), str(raw.get("severity") or "error"))
    fields = dict(raw.get("fields") or {}) if isinstance(raw.get("fields"), Mapping) else {}
    if raw.get("code") and raw["code"] != code and "." not in str(raw["code"]):
        fields.setdefault("tool_code", raw["code"])
    return {
        "code": code,
        "severity": raw.get("severity") or "error",
        "message": raw.get("message") or "",
        "file": raw.get("file"),
        "line": raw.get("line"),
        "fields": fields,
    }


__all__ = ["diagnostic_row", "stable_code", "stage_codes"]
