"""Ports, expected against generated, for the report's interface sections and its failure clusters.

What is known about a failing sample's interface comes from three places, best first: the task (its expected
interface, when `--dataset` gives the tasks), the reply (its ports as slang reads them, when the row or
`--completions` gives the reply), and the interface stage's own diagnostics (stable codes with the port as a
field in newer results; today's `missing-port`, `extra-port`, `port-mismatch` with the port in the message). Any
one of them is enough for a partial picture; the page says which it used.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from rtlreward.model import Task
from rtlreward_report.runs import Finding, Sample

__all__ = [
    "InterfaceView",
    "PortInfo",
    "PortRow",
    "compare_ports",
    "derived_findings",
    "expected_ports",
    "generated_ports",
    "port_problem",
    "view_from_findings",
]

UNKNOWN = ("unknown", "", None)
_DIRS = ("input", "output", "inout", "ref", "interface")
_MISSING_RE = re.compile(
    r"^missing port (?:(?P<dir>" + "|".join(_DIRS) + r")\s+)?(?P<name>\S+?)"
    r"(?: \((?P<width>\d+) bits?\))?(?: \(the answer has (?P<near>\S+?)\))?\s*$"
)
_EXTRA_RE = re.compile(
    r"^extra port (?:(?P<dir>" + "|".join(_DIRS) + r")\s+)?(?P<name>\S+?)(?: \((?P<width>\d+) bits?\))?"
    r"(?: \(.*\))?\s*$"
)
_MISMATCH_RE = re.compile(r"^port (?P<name>\S+?): (?P<rest>.*)$")
_MODULE_RE = re.compile(r"^no module named (?P<name>\S+?):")
_DIR_DIFF_RE = re.compile(r"direction (?P<got>\w+), expected (?P<exp>\w+)")
_WIDTH_DIFF_RE = re.compile(r"width (?P<got>\d+), expected (?P<exp>\d+)")


@attrs.frozen
class PortInfo:
    name: str
    direction: str | None = None
    width: int | None = None

    def describe(self) -> str:
        bits = [b for b in (self.direction if self.direction not in UNKNOWN else None,) if b]
        width = f"[{self.width}]" if self.width is not None else ""
        return " ".join([*bits, self.name + width]) if bits or width else self.name


@attrs.frozen
class PortProblem:
    """What an interface diagnostic says about one port. kind: missing | extra | mismatch | module."""

    kind: str
    port: str
    near: str | None = None  # the answer's port that looks like a rename of `port`
    expected: PortInfo | None = None
    actual: PortInfo | None = None


@attrs.frozen
class PortRow:
    """One line of the side-by-side table. status: ok | missing | renamed | mismatch | extra."""

    expected: PortInfo | None
    generated: PortInfo | None
    status: str
    detail: str = ""


@attrs.frozen
class InterfaceView:
    task_id: str
    sample_index: int
    module: str | None
    rows: tuple[PortRow, ...]
    expected_from: str  # "task (…)" / "diagnostics" / ""
    generated_from: str  # "reply" / "diagnostics" / ""
    generated_module: str | None = None
    partial: bool = False  # only the ports the diagnostics name (the others matched)
    note: str = ""

    @property
    def problems(self) -> int:
        return sum(r.status != "ok" for r in self.rows)


def _kind(code: str) -> str | None:
    """What an interface code is about, in both spellings: the stable `interface.port_missing`,
    `interface.width_mismatch`, ... and the older `missing-port`, `port-mismatch`, ..."""
    c = code.lower().replace("-", "_").replace(".", "_")
    if "module" in c and any(x in c for x in ("missing", "not_found", "absent")):
        return "module"
    if "port" in c and "missing" in c:
        return "missing"
    if "port" in c and "extra" in c:
        return "extra"
    if any(x in c for x in ("mismatch", "width", "direction")):
        return "mismatch"
    return None


def _field(fields: Mapping[str, Any], *names: str) -> Any:
    for n in names:
        v = fields.get(n)
        if v is not None and v != "":
            return v
    return None


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


def port_problem(f: Finding) -> PortProblem | None:
    """The port an interface diagnostic is about, from its fields when it has them, else from today's messages."""
    kind = _kind(f.code)
    msg = f.message.strip()
    m = None
    if kind is None or not f.fields:
        for k, rx in (("missing", _MISSING_RE), ("extra", _EXTRA_RE), ("module", _MODULE_RE)):
            if kind in (None, k) and (m := rx.match(msg)):
                kind = k
                break
        else:
            m = _MISMATCH_RE.match(msg) if kind in (None, "mismatch") else None
            if m is not None and (_DIR_DIFF_RE.search(msg) or _WIDTH_DIFF_RE.search(msg)):
                kind = "mismatch"
            elif kind is None:
                return None
    fields = f.fields
    names = ("module", "name") if kind == "module" else ("port", "name", "port_name")
    port = _str(_field(fields, *names))
    if port is None and m is not None:
        port = m.group("name")
    if port is None:
        return None
    groups = m.groupdict() if m is not None else {}
    near = _str(_field(fields, "near", "renamed_to", "suggestion", "actual_name", "closest", "candidate"))
    near = near or groups.get("near")
    direction = _str(_field(fields, "direction", "expected_direction")) or groups.get("dir")
    width = _int(_field(fields, "width", "expected_width")) or _int(groups.get("width"))
    if kind == "missing":
        return PortProblem("missing", port, near, expected=PortInfo(port, direction, width))
    if kind == "extra":
        return PortProblem("extra", port, actual=PortInfo(port, direction, width))
    if kind == "module":
        return PortProblem("module", port)
    exp_dir = _str(_field(fields, "expected_direction", "direction"))
    got_dir = _str(_field(fields, "actual_direction", "got_direction"))
    exp_w = _int(_field(fields, "expected_width", "width"))
    got_w = _int(_field(fields, "actual_width", "got_width"))
    if (dm := _DIR_DIFF_RE.search(msg)) is not None:
        exp_dir, got_dir = exp_dir or dm.group("exp"), got_dir or dm.group("got")
    if (wm := _WIDTH_DIFF_RE.search(msg)) is not None:
        exp_w, got_w = exp_w or int(wm.group("exp")), got_w or int(wm.group("got"))
    return PortProblem(
        "mismatch", port, expected=PortInfo(port, exp_dir, exp_w), actual=PortInfo(port, got_dir, got_w)
    )


# -- the task's ports and the reply's ports -----------------------------------------------------------------------
def expected_ports(task: Task) -> tuple[str, tuple[PortInfo, ...], str] | None:
    """(module, ports, source) the task expects, as the interface stage derives it; None when it cannot tell."""
    from rtlreward_hdl.interface import expected_interface

    try:
        iface = expected_interface(task)
    except Exception:  # a task the library cannot read is simply one without an expected interface here
        return None
    if iface is None:
        return None
    ports = tuple(PortInfo(p.name, p.direction, p.width) for p in iface.ports)
    return iface.module, ports, iface.source or "task"


_HDL_TAGS = ("", "verilog", "systemverilog", "sv", "v", "vlog")
_parsed: dict[str, dict[str, tuple[PortInfo, ...]]] = {}


def _answer_files(sample: Sample) -> dict[str, str]:
    from rtlreward_hdl.files import HDL_EXTS
    from rtlreward_hdl.slang import find_fenced_blocks

    if sample.files:
        return {p: t for p, t in sample.files.items() if p.lower().endswith(HDL_EXTS)}
    text = sample.reply or ""
    blocks = [body for tag, body in find_fenced_blocks(text) if tag in _HDL_TAGS and "module" in body]
    if not blocks and re.search(r"\bmodule\b", text):
        blocks = [text]
    return {f"reply_{i}.sv": b for i, b in enumerate(blocks)}


def generated_ports(sample: Sample) -> dict[str, tuple[PortInfo, ...]] | None:
    """{module: ports} the reply declares, read by slang (the same reader the interface stage uses); None when
    the report has no reply for this sample. Cached by content: a run repeats replies."""
    if sample.reply is None and not sample.files:
        return None
    files = _answer_files(sample)
    key = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()
    if key not in _parsed:
        out: dict[str, tuple[PortInfo, ...]] = {}
        if files:
            from rtlreward_hdl.slang import module_infos

            try:
                infos, _ = module_infos(files)
            except Exception:  # slang could not make sense of it: no ports to show
                infos = {}
            for name, info in infos.items():
                out[name] = tuple(PortInfo(p.name, p.direction, p.width) for p in info.interface.ports)
        _parsed[key] = out
    return _parsed[key]


def _renames(missing: Sequence[str], extra: Sequence[str]) -> dict[str, str]:
    """Expected name -> the answer's port that looks like it renamed (close spelling, or equal ignoring case)."""
    pool = list(extra)
    out: dict[str, str] = {}
    for name in missing:
        near = [n for n in pool if n.lower() == name.lower()] or difflib.get_close_matches(
            name, pool, n=1, cutoff=0.6
        )
        if near:
            out[name] = near[0]
            pool.remove(near[0])
    return out


def compare_ports(expected: Sequence[PortInfo], generated: Sequence[PortInfo]) -> tuple[PortRow, ...]:
    """Line the two port lists up: by name, then renamed pairs, then what is left over on either side. An expected
    port known by name only (from a harness) is never compared by direction or width, and leaves no 'extra'."""
    names_only = bool(expected) and all(p.direction in UNKNOWN for p in expected)
    got = {p.name: p for p in generated}
    exp_names = {p.name for p in expected}
    missing = [p.name for p in expected if p.name not in got]
    extra = [p.name for p in generated if p.name not in exp_names]
    renamed = _renames(missing, extra)
    rows: list[PortRow] = []
    for p in expected:
        g = got.get(p.name)
        if g is None and p.name in renamed:
            rows.append(PortRow(p, got[renamed[p.name]], "renamed", f"{p.name} is called {renamed[p.name]}"))
            continue
        if g is None:
            rows.append(PortRow(p, None, "missing", f"no port {p.name}"))
            continue
        diffs = []
        if p.direction not in UNKNOWN and g.direction not in UNKNOWN and p.direction != g.direction:
            diffs.append(f"direction {g.direction}, expected {p.direction}")
        if p.width is not None and g.width is not None and p.width != g.width:
            diffs.append(f"width {g.width}, expected {p.width}")
        rows.append(PortRow(p, g, "mismatch" if diffs else "ok", "; ".join(diffs)))
    used = set(renamed.values())
    if not names_only:
        rows += [
            PortRow(None, g, "extra", "not expected")
            for g in generated
            if g.name in extra and g.name not in used
        ]
    return tuple(rows)


def derived_findings(stage: str, module: str, rows: Iterable[PortRow], found: bool) -> tuple[Finding, ...]:
    """What the interface stage would have said, for rows that recorded no diagnostics (older results files),
    with the stable codes and port fields of the newer ones; marked `derived`."""
    if not found:
        return (
            Finding(
                stage,
                "interface.module_missing",
                f"no module named {module}",
                fields={"module": module},
                derived=True,
            ),
        )
    out = []
    for r in rows:
        if r.status in ("missing", "renamed") and r.expected is not None:
            near = r.generated.name if r.generated is not None else None
            out.append(
                Finding(
                    stage,
                    "interface.port_missing",
                    f"missing port {r.expected.describe()}" + (f" (the answer has {near})" if near else ""),
                    fields={
                        "port": r.expected.name,
                        "direction": r.expected.direction,
                        "width": r.expected.width,
                        **({"near": near} if near else {}),
                    },
                    derived=True,
                )
            )
            if near:
                out.append(
                    Finding(
                        stage,
                        "interface.port_extra",
                        f"extra port {r.generated.describe()}",  # type: ignore[union-attr]
                        severity="warning",
                        fields={"port": near},
                        derived=True,
                    )
                )
        elif r.status == "mismatch" and r.expected is not None and r.generated is not None:
            exp, got = r.expected, r.generated
            fields = {
                "port": exp.name,
                "direction": exp.direction,
                "width": exp.width,
                "actual_direction": got.direction,
                "actual_width": got.width,
            }
            if (
                exp.direction not in UNKNOWN
                and got.direction not in UNKNOWN
                and exp.direction != got.direction
            ):
                text = f"port {exp.name}: direction {got.direction}, expected {exp.direction}"
                out.append(Finding(stage, "interface.direction_mismatch", text, fields=fields, derived=True))
            if exp.width is not None and got.width is not None and exp.width != got.width:
                text = f"port {exp.name}: width {got.width}, expected {exp.width}"
                out.append(Finding(stage, "interface.width_mismatch", text, fields=fields, derived=True))
        elif r.status == "extra" and r.generated is not None:
            out.append(
                Finding(
                    stage,
                    "interface.port_extra",
                    f"extra port {r.generated.describe()}",
                    severity="warning",
                    fields={"port": r.generated.name},
                    derived=True,
                )
            )
    return tuple(out)


def view_from_findings(task_id: str, sample_index: int, findings: Iterable[Finding]) -> InterfaceView | None:
    """A partial side-by-side from the diagnostics alone: only the ports they name."""
    rows: list[PortRow] = []
    module = None
    renamed_targets: set[str] = set()
    problems = [p for p in (port_problem(f) for f in findings) if p is not None]
    for p in problems:
        if p.kind == "module":
            module = p.port
        elif p.kind == "missing":
            if p.near:
                renamed_targets.add(p.near)
                rows.append(PortRow(p.expected, PortInfo(p.near), "renamed", f"{p.port} is called {p.near}"))
            else:
                rows.append(PortRow(p.expected, None, "missing", f"no port {p.port}"))
        elif p.kind == "mismatch":
            if any(r.expected is not None and r.expected.name == p.port for r in rows):
                continue  # a width and a direction finding for one port: one line
            detail = []
            if p.expected and p.actual and p.expected.direction != p.actual.direction and p.actual.direction:
                detail.append(f"direction {p.actual.direction}, expected {p.expected.direction}")
            if p.expected and p.actual and p.expected.width != p.actual.width and p.actual.width is not None:
                detail.append(f"width {p.actual.width}, expected {p.expected.width}")
            rows.append(PortRow(p.expected, p.actual, "mismatch", "; ".join(detail)))
    for p in problems:
        if p.kind == "extra" and p.port not in renamed_targets:
            rows.append(PortRow(None, p.actual, "extra", "not expected"))
        elif p.kind == "extra":  # fill in what the extra port's diagnostic says about the renamed one
            rows = [
                attrs.evolve(r, generated=p.actual)
                if r.status == "renamed" and r.generated and r.generated.name == p.port
                else r
                for r in rows
            ]
    if not rows and module is None:
        return None
    note = f"the answer has no module named {module}" if module else ""
    return InterfaceView(
        task_id, sample_index, module, tuple(rows), "diagnostics", "diagnostics", partial=True, note=note
    )
