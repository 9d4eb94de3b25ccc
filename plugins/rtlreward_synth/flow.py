"""The Yosys side of the `synth` stage: one script per design, and what its outputs say.

One script reads a design (the answer, or the reference) for its top, elaborates it (`proc`, `flatten`), writes
the elaborated design as JSON (`rtl.json`: cells with their `src` attributes, wires with `init`, ports) and
Yosys's own `check` report (`check.txt`: logic loops, multiple drivers, undriven wires), refuses a design that
still instantiates a module it does not define in full (a black box could hide any amount of logic), drops
`$display`-style cells and lists the flip-flops left without them (`kept.txt`), then runs the generic `synth`,
legalises every flip-flop to Yosys's CMOS cells (`dfflegalize`: enables and synchronous resets become gates), and
writes the figures (`stat.json`, `ltp.txt`) and the gate-level netlist under a fresh module name (`netlist.v`).

Only file names and identifiers checked by `rtlreward_hdl.yosys` (`SAFE_PATH_RE`, `IDENT_RE`) are written into a script; the design's
text reaches Yosys only through `read_verilog`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from rtlreward.stage import UnsafePath, safe_relpath
from rtlreward_hdl.files import HEADER_EXTS
from rtlreward_hdl.yosys import SAFE_PATH_RE, check_ident, check_path

SCRIPT_VERSION = "2"  # bump when the script or the figures' meaning changes (cached reference figures)

# Transistors per cell after `dfflegalize`: Yosys's own CMOS table (`stat -tech cmos`, kernel/cost.h) for gates and
# the plain flip-flop; our estimates for the flip-flop variants Yosys leaves unpriced (an asynchronous reset adds a
# gate's worth, set and reset two) and for latches.
CMOS_TRANSISTORS: dict[str, int] = {
    "$_BUF_": 1,
    "$_NOT_": 2,
    "$_AND_": 6,
    "$_NAND_": 4,
    "$_OR_": 6,
    "$_NOR_": 4,
    "$_ANDNOT_": 6,
    "$_ORNOT_": 6,
    "$_XOR_": 12,
    "$_XNOR_": 12,
    "$_AOI3_": 6,
    "$_OAI3_": 6,
    "$_AOI4_": 8,
    "$_OAI4_": 8,
    "$_MUX_": 12,
    "$_NMUX_": 10,
    "$_DFF_P_": 16,
    "$_DFF_N_": 16,
}
FF_EXTRA = {"async": 20, "sr": 24, "latch": 12}
_LEGAL_FFS = (
    ["$_DFF_P_", "$_DFF_N_"]
    + [f"$_DFF_{c}{r}{v}_" for c in "PN" for r in "PN" for v in "01"]
    + [f"$_DFFSR_{c}{s}{r}_" for c in "PN" for s in "PN" for r in "PN"]
    + ["$_DLATCH_P_", "$_DLATCH_N_"]
    + [f"$_DLATCH_{e}{r}{v}_" for e in "PN" for r in "PN" for v in "01"]
)
FF_TYPES = (
    "$dff",
    "$dffe",
    "$adff",
    "$adffe",
    "$sdff",
    "$sdffe",
    "$sdffce",
    "$dffsr",
    "$dffsre",
    "$aldff",
    "$aldffe",
)
LATCH_TYPES = ("$dlatch", "$adlatch", "$dlatchsr")
# Markers the script logs to stderr after each phase, so a failure can be placed (names are ours, fresh per run).
PHASES = ("read", "checked", "synthesised")


def script(
    files: Sequence[str],
    top: str,
    netlist_top: str,
    marks: Mapping[str, str],
    *,
    liberty: str = "",
    nolatches: bool = False,
) -> str:
    """The Yosys script for one design (see the module's docstring). `marks`: phase -> identifier logged to stderr
    once the phase is done. `liberty`: a liberty file (a path in the stage folder) to map to and price with.
    `nolatches`: the retry after Yosys refused an `always_comb` that infers a latch (the latch is then recorded as
    a finding, and the hold becomes a don't-care so the rest can be measured)."""
    top = check_ident(top)
    lines = [
        f"read_verilog -sv -noblackbox{' -nolatches' if nolatches else ''} {' '.join(check_path(f) for f in files)}",
        f"hierarchy -check -top {top}",
        "proc",
        "flatten",
        f"log -stderr {check_ident(marks['read'])}",
        "write_json rtl.json",
        "tee -q -o check.txt check",
        f"log -stderr {check_ident(marks['checked'])}",
        # Nothing but Yosys's own cells may be left after flattening: a cell of a module type is a module the design
        # does not define in full (a black box, an empty module), whose logic no figure would count.
        "select -assert-none t:* t:$* %d",
        "chformal -remove",
        # registers kept with and without the display cells: those only a display reads are gone in the second
        "opt_clean",
        "tee -q -o ffs.txt select -list t:$*dff*",
        "delete t:$print t:$check",
        "opt_clean",
        "tee -q -o kept.txt select -list t:$*dff*",
        f"synth -top {top} -flatten",
        "dfflegalize " + " ".join(f"-cell {c} 01" for c in _LEGAL_FFS),
        "opt_clean",
        "tee -q -o stat.json stat -json -tech cmos",
        "tee -q -o ltp.txt ltp -noff",
    ]
    if liberty:
        lib = check_path(liberty)
        lines += [
            "design -save generic",
            f"dfflibmap -liberty {lib}",
            f"abc -liberty {lib}",
            "opt_clean",
            f"tee -q -o stat_lib.json stat -json -liberty {lib}",
            "design -load generic",
        ]
    lines += [
        f"rename {top} {check_ident(netlist_top)}",
        "write_verilog -noattr netlist.v",
        f"log -stderr {check_ident(marks['synthesised'])}",
    ]
    return "\n".join(lines) + "\n"


# -- reading the outputs ------------------------------------------------------------------------------------------


def _int(v: Any) -> int:
    if isinstance(v, int):
        return v
    try:
        return int(str(v), 2)
    except ValueError:
        return 0


def _src(attrs_: Mapping[str, Any]) -> str:
    """`file:line` of a Yosys `src` attribute (`a.v:3.5-7.6|b.v:1.2-1.3` -> `a.v:3`)."""
    src = str(attrs_.get("src", "")).split("|")[0]
    m = re.match(r"^(.*?):(\d+)(?:\.\d+)?(?:-\d+(?:\.\d+)?)?$", src)
    return f"{m.group(1)}:{m.group(2)}" if m else src


@attrs.frozen
class Finding:
    kind: str  # latch | loop | multiple-drivers | undriven | initial | display-only | delay | display
    what: str  # the construct, in words, with the signal names
    where: str = ""  # file:line (the answer's own path)


@attrs.frozen
class Elaborated:
    """What the elaborated design (rtl.json) says."""

    ports: dict[str, tuple[str, int]]  # name -> (direction, width)
    clocks: dict[str, int]  # port -> edge polarity (1 = posedge)
    resets: dict[str, int]  # port -> active level
    latches: tuple[Finding, ...]
    inits: tuple[Finding, ...]
    prints: tuple[Finding, ...]
    ffs: dict[str, str]  # FF cell name -> what it holds (public wire names)
    ff_src: dict[str, str]
    names_of_bit: dict[int, list[tuple[str, str]]]  # bit -> [(public wire name, src)]


def _bit_names(module: Mapping[str, Any]) -> dict[int, list[tuple[str, str]]]:
    out: dict[int, list[tuple[str, str]]] = {}
    for name, net in module.get("netnames", {}).items():
        if name.startswith("$") or net.get("hide_name"):
            continue
        for i, b in enumerate(net.get("bits", [])):
            if isinstance(b, int):
                label = name if len(net["bits"]) == 1 else f"{name}[{i + _int(net.get('offset', 0))}]"
                out.setdefault(b, []).append((label, _src(net.get("attributes", {}))))
    return out


def _held(bits: Sequence[Any], names: Mapping[int, list[tuple[str, str]]]) -> tuple[str, str]:
    """The public names of the signal(s) on `bits` (a vector collapsed to its name) and the first one's src."""
    seen: list[str] = []
    src = ""
    for b in bits:
        for label, s in names.get(b, [])[:1] if isinstance(b, int) else []:
            base = label.split("[")[0]
            if base not in seen:
                seen.append(base)
                src = src or s
    return ", ".join(seen[:4]) or "an internal signal", src


def elaborated(path: Path, top: str) -> Elaborated:
    data = json.loads(path.read_text(errors="replace"))
    modules = data.get("modules", {})
    module = modules.get(top) or next(iter(modules.values()), {})
    names = _bit_names(module)
    bit_port: dict[int, str] = {}
    ports: dict[str, tuple[str, int]] = {}
    for name, p in module.get("ports", {}).items():
        ports[name] = (p.get("direction", ""), len(p.get("bits", [])))
        for b in p.get("bits", []):
            if isinstance(b, int):
                bit_port.setdefault(b, name)
    clocks: dict[str, int] = {}
    resets: dict[str, int] = {}
    latches, prints = [], []
    ffs: dict[str, str] = {}
    ff_src: dict[str, str] = {}
    for cname, cell in module.get("cells", {}).items():
        ctype, conn, par = cell.get("type", ""), cell.get("connections", {}), cell.get("parameters", {})
        where = _src(cell.get("attributes", {}))
        if ctype in FF_TYPES:
            held, wsrc = _held(conn.get("Q", []), names)
            ffs[cname] = held
            ff_src[cname] = where or wsrc
            for b in conn.get("CLK", []):
                if b in bit_port:
                    clocks[bit_port[b]] = _int(par.get("CLK_POLARITY", 1))
            for port, pol in (("ARST", "ARST_POLARITY"), ("SRST", "SRST_POLARITY")):
                for b in conn.get(port, []):
                    if b in bit_port:
                        resets[bit_port[b]] = _int(par.get(pol, 1))
        elif ctype in LATCH_TYPES:
            held, wsrc = _held(conn.get("Q", []), names)
            latches.append(Finding("latch", f"a latch holds {held}", where or wsrc))
        elif ctype in ("$print", "$check"):
            prints.append(Finding("display", "a $display/$write/assertion", where))
    inits = []
    for name, net in module.get("netnames", {}).items():
        a = net.get("attributes", {})
        if "init" in a and not name.startswith("$"):
            inits.append(Finding("initial", f"an initial value for {name}", _src(a)))
    return Elaborated(ports, clocks, resets, tuple(latches), tuple(inits), tuple(prints), ffs, ff_src, names)


_LOOP_HEAD = re.compile(r"^Warning: found logic loop in module \S+:", re.M)
_LOOP_ITEM = re.compile(r"^\s+(?:cell|wire)\s+\\?(\S+).*?source:\s*(\S+)", re.M)
_MULTI = re.compile(r"^Warning: multiple conflicting drivers for \S+?\.\\?(\S+?)(?: \[(\d+)\])?:", re.M)
_UNDRIVEN = re.compile(r"^Warning: Wire \S+?\.\\?(\S+?)(?: \[(\d+)\])? is used but has no driver\.", re.M)


def check_findings(text: str, elab: Elaborated) -> list[Finding]:
    """Logic loops, multiple drivers and undriven wires from Yosys's `check` report, named with the design's own
    signals and places."""
    out: list[Finding] = []
    srcs: dict[str, str] = {}
    for labels in elab.names_of_bit.values():
        for label, src in labels:
            srcs.setdefault(label.split("[")[0], src)
    blocks = _LOOP_HEAD.split(text)[1:]
    for block in blocks:
        block = block.split("\nWarning:")[0]
        items = _LOOP_ITEM.findall(block)
        wires = [n for n, _ in items if not n.startswith("$")]
        where = next((_src({"src": s}) for _, s in items if s), "")
        out.append(
            Finding(
                "loop",
                "a combinational loop" + (f" through {', '.join(dict.fromkeys(wires))}" if wires else ""),
                where,
            )
        )
    for m in _MULTI.finditer(text):
        name, where = _public(m.group(1), srcs)
        out.append(Finding("multiple-drivers", f"{name} has more than one driver", where))
    for m in _UNDRIVEN.finditer(text):
        name, where = _public(m.group(1), srcs)
        direction = elab.ports.get(name, ("", 0))[0]
        what = (
            f"output {name} is never driven" if direction == "output" else f"{name} is used but never driven"
        )
        out.append(Finding("undriven", what, where))
    return out


def _public(name: str, srcs: Mapping[str, str]) -> tuple[str, str]:
    """A signal's name as the design spells it, and where it is declared; Yosys's own names (`$not$a.v:13$2_Y`)
    become "an internal signal" at the place they name."""
    if not name.startswith("$"):
        return name, srcs.get(name, "")
    m = re.search(r"\$([^$]+?):(\d+)\$", name)
    return "an internal signal", f"{m.group(1)}:{m.group(2)}" if m else ""


def display_only(before: str, kept: str, elab: Elaborated) -> list[Finding]:
    """Flip-flops that exist only for a `$display` (there before the display cells are deleted, gone after):
    synthesis drops them. (Registers nothing reads at all are dropped too, display or not: not a finding.)"""

    def names(text: str) -> set[str]:
        return {line.strip().split("/", 1)[-1] for line in text.splitlines() if line.strip()}

    had, left = names(before), names(kept)
    out = []
    for cname, held in elab.ffs.items():
        if cname in had and cname not in left:
            out.append(
                Finding(
                    "display-only",
                    f"register {held} feeds only a $display: synthesis drops it",
                    elab.ff_src.get(cname, ""),
                )
            )
    return out


# `#5`, `#1.5ns`, `#(PERIOD / 2)`, `#DELAY`; not `##` (a sequence delay in an assertion)
_DELAY_RE = re.compile(
    r"(?<![\w$'#])#(?!#)\s*(\d[\d_]*(?:\.\d+)?(?:\s*[munpf]?s\b)?|\((?:[^()]|\([^()]*\))*\)|[A-Za-z_]\w*)"
)
_HEADER_BEFORE = re.compile(r"\b(?:module|macromodule|interface|program|class|package)\s+[A-Za-z_]\w*\s*$")
_INSTANCE_AFTER = re.compile(r"^[A-Za-z_]\w*\s*(?:\[[^\]]*\]\s*)?\(")


def delays(files: Mapping[str, str]) -> list[Finding]:
    """Delays (`#5`, `#(PERIOD / 2)`, `#DELAY`) in the answer's text: synthesis ignores them, so the hardware does
    not wait. Parameter lists (`module m #(parameter W = 8)`, `sub #(8) u (...)`, `sub #(.W(8)) u (...)`) are not
    delays."""
    from rtlreward_hdl.files import strip_comments

    out = []
    for path, text in sorted(files.items()):
        clean = strip_comments(text, keep_strings=False)
        for m in _DELAY_RE.finditer(clean):
            arg = m.group(1)
            before = clean[: m.start()].rstrip()
            after = clean[m.end() :].lstrip()
            inner = arg[1:].lstrip() if arg.startswith("(") else ""
            if inner.startswith((".", "parameter", "localparam", "type")) or _HEADER_BEFORE.search(before):
                continue
            if re.search(r"[A-Za-z_]\w*$", before) and _INSTANCE_AFTER.match(after):
                continue
            line = clean.count("\n", 0, m.start()) + 1
            out.append(Finding("delay", f"a delay #{' '.join(arg.split())}", f"{path}:{line}"))
    return out


_ALWAYS_COMB_LATCH = re.compile(
    r"Latch inferred for signal `\\?[^`']*?\.\\?([^`'.]+)' from always_comb process `[^`']*?\$proc\$([^`']*?):(\d+)\$"
)


def comb_latch(error: str) -> Finding | None:
    """Yosys refuses an `always_comb` that infers a latch at read time: that error as a latch finding."""
    m = _ALWAYS_COMB_LATCH.search(error)
    if m is None:
        return None
    return Finding(
        "latch", f"a latch holds {m.group(1)} (in an always_comb block)", f"{m.group(2)}:{m.group(3)}"
    )


_TOOL_MACRO_RE = re.compile(
    r"`(ifdef|ifndef|elsif)\s+(YOSYS|SYNTHESIS|__ICARUS__|VERILATOR|FORMAL|COCOTB_SIM)\b"
)


def tool_macros(files: Mapping[str, str]) -> list[Finding]:
    """`ifdef YOSYS`, `ifndef SYNTHESIS`, `ifdef __ICARUS__`...: code that shows synthesis one design and the
    simulator another, so the figures would be those of a design nothing simulated."""
    from rtlreward_hdl.files import strip_comments

    out = []
    for path, text in sorted(files.items()):
        clean = strip_comments(text, keep_strings=False)
        for m in _TOOL_MACRO_RE.finditer(clean):
            line = clean.count("\n", 0, m.start()) + 1
            out.append(Finding("tool-macro", f"`{m.group(1)} {m.group(2)}", f"{path}:{line}"))
    return out


@attrs.frozen
class Figures:
    cells: int
    flip_flops: int
    latches: int
    area: float  # transistors (CMOS estimate) or the liberty area
    depth: int  # cells on the longest combinational path
    cells_by_type: dict[str, int]
    area_unit: str = "transistors"
    liberty_area: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


_LTP_RE = re.compile(r"Longest topological path in \S+ \(length=(\d+)\)")


def figures(stat_path: Path, ltp_text: str, stat_lib: Path | None = None) -> Figures:
    data = json.loads(stat_path.read_text(errors="replace"))
    design = data.get("design") or next(iter(data.get("modules", {}).values()), {})
    by_type = {str(k): int(v) for k, v in (design.get("num_cells_by_type") or {}).items()}
    area = 0.0
    ffs = latches = 0
    for t, n in by_type.items():
        if t in CMOS_TRANSISTORS:
            area += CMOS_TRANSISTORS[t] * n
        if t.startswith("$_DFFSR"):
            area += FF_EXTRA["sr"] * n
        elif t.startswith("$_DFF_") and t not in CMOS_TRANSISTORS:
            area += FF_EXTRA["async"] * n
        elif t.startswith("$_DLATCH"):
            area += FF_EXTRA["latch"] * n
        if t.startswith(("$_DFF", "$_SDFF", "$_ALDFF")):
            ffs += n
        if t.startswith("$_DLATCH"):
            latches += n
    m = _LTP_RE.search(ltp_text)
    depth = int(m.group(1)) if m else 0
    lib_area = None
    if stat_lib is not None and stat_lib.is_file():
        lib = json.loads(stat_lib.read_text(errors="replace"))
        d = lib.get("design") or {}
        lib_area = float(d.get("area", 0.0) or 0.0)
    cells = sum(by_type.values())
    if lib_area is not None:
        return Figures(cells, ffs, latches, lib_area, depth, by_type, "liberty", lib_area)
    return Figures(cells, ffs, latches, area, depth, by_type)


def write_sources(
    work: Path, files: Mapping[str, str], clean: Callable[[str], str]
) -> tuple[dict[str, str], list[str]]:
    """Write a design's files under `work/src` for a Yosys script: each under its own relative path where that is
    a safe script path, else a generated name; `clean` applied to each text. Returns (script path -> the file's own
    path, the compilation units in order: every file but headers)."""
    work.mkdir(parents=True, exist_ok=True)
    names: dict[str, str] = {}
    units: list[str] = []
    for i, (rel, text) in enumerate(sorted(files.items())):
        try:
            name = safe_relpath(rel).as_posix()
        except UnsafePath:
            name = f"_unsafe_{i}.sv"
        if not SAFE_PATH_RE.match(name):
            name = f"_unit_{i}{'.svh' if rel.lower().endswith(HEADER_EXTS) else '.sv'}"
        dest = work / "src" / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(clean(text), errors="backslashreplace")
        names[f"src/{name}"] = rel
        if not rel.lower().endswith(HEADER_EXTS):
            units.append(f"src/{name}")
    return names, units
