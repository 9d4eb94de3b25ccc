"""RTLLM v2.0 (hkust-zhiyao/RTLLM, MIT) as rtlreward Tasks.

Each design folder holds `design_description.txt` (the prompt), `testbench.v` (a self-checking testbench that
prints "Your Design Passed" or a failure count), `verified_<name>.v` (the reference) and, for five designs, data
files the testbench reads from its working directory. The testbench instantiates the design by the module name
the description asks for; 27 references declare it as `verified_<name>` (or another name), so the reference is
stored with its top module renamed to what the testbench instantiates.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rtlreward.model import Harness, Task
from rtlreward_hdl.data import default_source
from rtlreward_hdl.files import strip_comments

__all__ = ["DATASET", "KNOWN_REFERENCE_FAILURES", "RtllmDataset", "find_designs", "parse_testbench"]

DATASET = "rtllm"
ENV_VAR = "RTLREWARD_RTLLM"
TESTBENCH = "testbench.v"
DESCRIPTION = "design_description.txt"
SIM_TIMEOUT = 30.0  # the benchmark allows 8 s under VCS; Icarus is slower, the slowest reference takes ~2 s
_NOT_DATA = {TESTBENCH, DESCRIPTION, "makefile", "Makefile"}

# Designs whose own reference does not pass here (Debian Icarus 11), and why. Kept honest by
# tests/test_rtllm_references.py, which runs every reference.
KNOWN_REFERENCE_FAILURES: dict[str, str] = {
    "asyn_fifo": "Icarus 11: the testbench uses `break`, which Icarus 11 does not support",
    "ring_counter": "Icarus 11: the testbench assigns a whole unpacked array ('Cannot assign to array data')",
    "clkgenerator": "the testbench samples the clock exactly on its edge: a race whose outcome depends on the "
    "simulator's event order (passes under VCS, fails under Icarus)",
    "radix2_div": "the reference's result does not match its own testbench under Icarus",
}

_KEYWORDS = {
    "module",
    "endmodule",
    "begin",
    "end",
    "if",
    "else",
    "for",
    "always",
    "initial",
    "assign",
    "wire",
    "reg",
    "integer",
    "input",
    "output",
    "inout",
    "case",
    "casez",
    "casex",
    "endcase",
    "repeat",
    "while",
    "forever",
    "task",
    "function",
    "localparam",
    "parameter",
    "return",
    "wait",
    "disable",
    "fork",
    "join",
    "logic",
    "genvar",
    "generate",
    "endgenerate",
    "real",
    "time",
    "bit",
    "int",
    "byte",
    "default",
    "posedge",
    "negedge",
    "or",
    "and",
    "not",
    "force",
    "release",
    "deassign",
    "automatic",
    "string",
    "event",
}
_MODULE_RE = re.compile(r"\b(?:macro)?module\s+([A-Za-z_]\w*)")
_INSTANCE_RE = re.compile(
    r"(?<![\w.$`])([A-Za-z_]\w*)\s+(?:#\s*\((?:[^()]|\([^()]*\))*\)\s*)?([A-Za-z_]\w*)\s*\(", re.S
)
_CHECKS_RE = re.compile(r"%\s*d\s*/\s*(\d+)\s*failures")
_FILTERS = ("ids", "id", "limit", "category", "skip_known_issues")


def parse_testbench(tb: str) -> tuple[str | None, str | None]:
    """(the design module the testbench instantiates, the testbench's top module)."""
    text = strip_comments(tb)
    declared = _MODULE_RE.findall(text)
    instances = [
        (mod, inst)
        for mod, inst in _INSTANCE_RE.findall(text)
        if mod not in _KEYWORDS and inst not in _KEYWORDS and mod not in declared
    ]
    dut = instances[0][0] if instances else None
    instantiated = {mod for mod, _ in _INSTANCE_RE.findall(text)}
    tops = [m for m in declared if m not in instantiated]
    return dut, (tops[0] if tops else (declared[0] if declared else None))


def rename_top(ref: str, want: str) -> tuple[str, str | None]:
    """The reference with its top module renamed to `want` (what the testbench instantiates); returns (text,
    old name or None when nothing needed renaming)."""
    declared = _MODULE_RE.findall(strip_comments(ref))
    if want in declared or not declared:
        return ref, None
    verified = [m for m in declared if m.startswith("verified_")]
    old = verified[0] if len(verified) == 1 else declared[-1] if len(declared) > 1 else declared[0]
    return re.sub(rf"\b{re.escape(old)}\b", want, ref), old


def _looks_like_design(d: Path) -> bool:
    return (d / TESTBENCH).is_file() and (d / DESCRIPTION).is_file()


def find_designs(source: str | Path) -> list[Path]:
    """Design folders under `source` (a clone of RTLLM, rtlreward's data copy, a category folder or one design
    folder); folders starting with `_` or `.` (RTLLM's `_chatgpt4/` samples, `_pic/`) are skipped."""
    root = Path(source)
    if _looks_like_design(root):
        return [root]
    out = []
    for tb in root.rglob(TESTBENCH):
        rel = tb.parent.relative_to(root)
        if any(part.startswith(("_", ".")) for part in rel.parts):
            continue
        if _looks_like_design(tb.parent):
            out.append(tb.parent)
    return sorted(out, key=lambda p: p.name)


def _ids(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [x.strip() for x in value.split(",") if x.strip()]
    return [str(x) for x in value]


class RtllmDataset:
    """`load(source=None, ids=None, limit=None, category=None, skip_known_issues=False)`.

    `source`: RTLLM's files (a clone of the benchmark, or any folder above its design folders). Default:
    `$RTLREWARD_RTLLM`, else `../shared/data/rtllm` beside the project or the working directory. `category`
    keeps designs whose folder path starts with it, case-insensitively (`Arithmetic`, `Memory/FIFO`).
    `skip_known_issues` leaves out the designs whose own reference fails here (KNOWN_REFERENCE_FAILURES).
    """

    name = DATASET
    description = "RTLLM v2.0: 50 designs, self-checking Verilog testbenches run with Icarus"

    def detect(self, source: str | Path) -> bool:
        try:
            p = Path(source)
            return p.is_dir() and (_looks_like_design(p) or bool(find_designs(p)))
        except OSError:
            return False

    def resolve(self, source: str | Path | None) -> Path:
        if source is None:
            found, looked = default_source(DATASET, ENV_VAR)
            if found is None:
                places = ", ".join(str(p) for p in looked)
                raise ValueError(
                    f"RTLLM data not found (looked in {places}). Get it from github.com/hkust-zhiyao/RTLLM (MIT) "
                    f"and pass the clone with --source PATH, or set {ENV_VAR}=PATH"
                )
            source = found
        p = Path(source)
        if not p.is_dir():
            raise ValueError(f"{source} is not a folder; point --source at a clone of hkust-zhiyao/RTLLM")
        return p

    def load(self, source: str | Path | None = None, **filters: Any) -> list[Task]:
        unknown = sorted(set(filters) - set(_FILTERS))
        if unknown:
            raise ValueError(f"rtllm: unknown filter(s) {', '.join(unknown)}; known: {', '.join(_FILTERS)}")
        root = self.resolve(source)
        designs = find_designs(root)
        if not designs:
            raise ValueError(
                f"{root} holds no RTLLM design folders (each needs {DESCRIPTION} and {TESTBENCH}); point --source "
                "at a clone of hkust-zhiyao/RTLLM"
            )
        category = filters.get("category")
        if category:
            want = str(category).strip("/").lower()
            designs = [d for d in designs if _category(root, d).lower().startswith(want)]
        wanted = _ids(filters.get("ids")) or _ids(filters.get("id"))
        if wanted:
            by_name = {d.name: d for d in designs}
            missing = [w for w in wanted if w not in by_name]
            if missing:
                raise ValueError(
                    f"rtllm has no design {', '.join(missing[:5])}; names are the design folders, e.g. adder_8bit"
                )
            designs = [by_name[w] for w in dict.fromkeys(wanted)]
        if filters.get("skip_known_issues"):
            designs = [d for d in designs if d.name not in KNOWN_REFERENCE_FAILURES]
        limit = filters.get("limit")
        if limit is not None:
            designs = designs[: max(0, int(limit))]
        return [self.task(d, category=_category(root, d)) for d in designs]

    def task(self, folder: Path, *, category: str = "") -> Task:
        name = folder.name
        tb = (folder / TESTBENCH).read_text(errors="replace")
        dut, tb_top = parse_testbench(tb)
        dut = dut or name
        refs = sorted(folder.glob("verified_*.v"))
        reference = None
        renamed = None
        answer_file = f"{name}.v"
        if refs:
            text, renamed = rename_top(refs[0].read_text(errors="replace"), dut)
            reference = {answer_file: text}
        data = {p.name: p.read_text(errors="replace") for p in _data_files(folder, refs)}
        checks = _CHECKS_RE.findall(strip_comments(tb))
        metadata: dict[str, Any] = {"benchmark": "RTLLM v2.0", "source": str(folder)}
        if renamed:
            metadata["reference_renamed"] = f"{renamed} -> {dut}"
        if name in KNOWN_REFERENCE_FAILURES:
            metadata["known_issue"] = KNOWN_REFERENCE_FAILURES[name]
        return Task(
            id=name,
            prompt=(folder / DESCRIPTION).read_text(errors="replace").strip() + "\n",
            expected_files=(answer_file,),
            toplevel=dut,
            reference=reference,
            harness=Harness(
                kind=DATASET,
                files={TESTBENCH: tb, **data},
                options={
                    "design": name,
                    "testbench": [TESTBENCH],
                    "tb_top": tb_top,
                    "checks": int(checks[0]) if len(set(checks)) == 1 else None,
                    "timeout": SIM_TIMEOUT,
                },
            ),
            dataset=DATASET,
            category=category,
            metadata=metadata,
        )


def _category(root: Path, design: Path) -> str:
    try:
        return str(design.parent.relative_to(root)).replace("\\", "/").strip(".")
    except ValueError:
        return ""


def _data_files(folder: Path, refs: Iterable[Path]) -> list[Path]:
    """Files the testbench reads from its working directory (`$readmemh("reference.txt")`, `$fopen`)."""
    skip = {p.name for p in refs} | _NOT_DATA
    return sorted(
        p
        for p in folder.iterdir()
        if p.is_file()
        and p.name not in skip
        and not p.name.startswith(".")
        and p.suffix.lower() not in (".v", ".sv")
        and p.stat().st_size <= 4 << 20
    )
