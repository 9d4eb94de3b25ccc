"""Formal equivalence with Yosys and ABC: a miter of the two designs, proved with PDR, else checked to a bound.

Yosys builds the miter and writes it as an AIGER file; `yosys-abc` (shipped with Yosys) runs `pdr` (a complete
proof or a counterexample, for sequential and combinational designs alike) and, when PDR does not decide within
its budget, `bmc3` to a bound. A miter whose output Yosys already reduced to the constant 0, or a combinational
one with few inputs, is decided from the file without ABC (`yosys_server.aiger_decide`). Measured here, ABC's PDR
decides a 4-deep FIFO in 0.1 s, where Yosys's own `sat -tempinduct` needs seconds per step on the same miter.

Semantics, chosen to match the differential simulation:
- registers start unknown (x), as in the simulator; the reset input (when there is one) is held active for the
  first `reset_cycles` frames by a generated wrapper, and the outputs of those frames are not compared;
  afterwards the reset is a free input like any other, so the designs must also agree on a reset in mid-run;
- x as the simulator has it: before any optimisation could resolve an x to a value (`opt` reads `v[n]` of an
  all-ones `v` as 1 for any `n`, `w == w` of an undriven `w` as 1; a division by zero has a value in Yosys), each
  design's x sources are encoded by `xprop` (outputs split into value and x mask); the wrapper's miter counts a
  difference where the reference's bit is defined and the answer's is x or another value. A counterexample is
  still only reported after the simulation replays it and sees the difference;
- the clock is implicit (one step per frame); designs with more than one clock are left to simulation.

Hostile input: the only names this module writes into the Yosys script are file names and identifiers checked
by the caller (`IDENT_RE`, `SAFE_PATH_RE`), so a file called `x; shell rm -rf /` never reaches a command line of
the script; the candidate's text reaches Yosys only through `read_verilog`, and nothing in the script runs
commands that text could name (`script -scriptwire`, `tee`, `!`, `write_*` on a path from the design).

Nothing an answer names can meet the reference: each design is read, elaborated and flattened in a design of its
own; after flattening it may hold no cell of a module type (an undefined module, a black box, a module kept
unflattened), checked with `select -assert-none` before the top is copied out; and the names the copies and the
wrapper (the miter) get are fresh for every run (`Names.fresh`), so no answer can declare or instantiate them.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable, Sequence

import attrs

from rtlreward_hdl.yosys import check_ident, check_path

from .design import PortInfo, Reset

AIG, MAP = "eq.aig", "eq.aim"
# What Yosys says when a side still holds a cell of a module type after flattening (our `select -assert-none`).
HIERARCHY_LEFT = "Assertion failed: selection is not empty"


@attrs.frozen
class Names:
    """The module names the proof adds to the design: the two copies and the wrapper that compares them (the
    miter). Fresh per run (a random suffix), never written into feedback, so no answer can name them."""

    gold: str
    gate: str
    top: str

    @classmethod
    def fresh(cls) -> Names:
        tag = secrets.token_hex(8)
        return cls(f"g{tag}_ref", f"g{tag}_ans", f"g{tag}_top")

    def all(self) -> tuple[str, ...]:
        return (self.gold, self.gate, self.top)


def _read_side(
    stash: str,
    files: Sequence[str],
    incdirs: Iterable[str],
    top: str,
    nolatches: bool = False,
    *,
    drop_ports: Sequence[str] = (),
) -> list[str]:
    """Read one design on its own, flatten it and make its x explicit before anything can fold it: each output
    becomes two, `<name>_d` (its value) and `<name>_x` (which bits are x). The answer's file is a preprocessor's
    output, `view.neutralise`d: no directive, macro use or backtick is left, so Yosys's preprocessor has nothing to
    act on (`-nopp` would say so, but it crashes libyosys 0.70).
    `drop_ports`: ports of the top that are not the reference's (the answer's extra ports): made internal, so an
    extra input is an undriven net (x, as in the simulation where nothing drives it) and an extra output is not
    compared."""
    incs = " ".join(f"-I {check_path(d)}" for d in incdirs)
    # -nolatches (the retry when Yosys 0.23 refuses a latch inferred from always_comb): the latch's hold condition
    # gives x instead, encoded like any other x below.
    flags = "-sv -noblackbox" + (" -nolatches" if nolatches else "")
    lines = [
        f"read_verilog {flags} {incs} {' '.join(check_path(f) for f in files)}".replace("  ", " "),
        f"hierarchy -check -top {check_ident(top)}",
        # proc's closing opt_expr folds identities on x (`w == w` of an undriven w is 1 to it, x to the simulator)
        "proc -noopt",
        "flatten",
        # Nothing but Yosys's own cells may be left: a cell of a module type is a module the design does not define
        # in full (a black box, an empty module) or keeps apart, which the copy below would resolve by name.
        "select -assert-none t:* t:$* %d",
        # Assertions and assumptions the design itself declares say nothing about the reference: drop them.
        "chformal -remove",
        # What $display, $write, $strobe and $monitor print changes no state (a function called in their arguments
        # keeps its assignments: proc made them logic of their own): a miter cannot hold a print, and an answer
        # with a debug print would otherwise never be proved (and a wrong one could buy the undecided share).
        "delete t:$print",
    ]
    lines += [f"delete -port {check_ident(top)}/{check_ident(p)}" for p in drop_ports]
    lines += [
        "setundef -undriven -undef",  # an undriven net is x, as in the simulator
        # A net with two drivers (the simulator resolves a conflict to x; opt_clean would keep one of them) or a
        # combinational loop: an error, so no proof.
        "check -assert",
        "opt_clean",  # wire aliases only (an initial block's memory-write enable must read as a constant)
        "memory",  # its memory_memx: a read out of range is x, as in the simulator
        # Flip-flops with resets, loads and enables as plain ones and logic, which xprop encodes. Registers start
        # unknown, as in the simulator (a register nothing writes stays x, behind any trigger); the reset the
        # wrapper holds in the first frames defines them.
        "async2sync",
        "dffunmap",
        # Every x source (x constants, undriven nets, division by zero, selects out of range, memories, registers
        # not yet written) encoded in two-valued logic before any optimisation could resolve an x to a value.
        # -required: a cell it cannot encode ($pow) ends the proof instead of passing x through.
        "xprop -split-outputs -assume-def-inputs -required",
        "chformal -remove",  # xprop's assumption that the inputs are defined: the miter's inputs always are
        "opt -fast",
        f"design -stash {stash}",
    ]
    return lines


SHIFT_HOLD = 8  # reset frames up to this many are counted by a shift register in the wrapper, more by a counter


def wrapper(
    inputs: Sequence[PortInfo],
    outputs: Sequence[PortInfo],
    reset: Reset | None,
    reset_cycles: int,
    names: Names,
    clocks: Sequence[str] = (),
) -> str:
    """The top the proof runs on: both designs (as `xprop -split-outputs` left them: `<out>_d` the value, `<out>_x`
    the bits that are x) on the same inputs; the reset held for the first frames, then every frame compared. A
    frame differs where the reference's bit is not x and the answer's bit is x or has another value: an x of the
    reference is a don't-care, an x of the answer is a difference (as in the simulation)."""
    hold = reset_cycles if reset is not None else 0
    ports = ["input rtlreward_clk"]
    conns = [f".{check_ident(c)}(rtlreward_clk)" for c in clocks]
    for p in inputs:
        name = check_ident(p.name)
        ports.append(f"input [{(p.width or 1) - 1}:0] in_{name}")
        if reset is not None and name == reset.name and hold:
            conns.append(f".{name}(rtlreward_started ? in_{name} : 1'b{reset.active})")
        else:
            conns.append(f".{name}(in_{name})")
    wires, gold, gate, terms = [], list(conns), list(conns), []
    for k, p in enumerate(outputs):
        name, top = check_ident(p.name), (p.width or 1) - 1
        g, a = f"rtlreward_g{k}", f"rtlreward_a{k}"
        wires.append(f"  wire [{top}:0] {g}_d, {g}_x, {a}_d, {a}_x;")
        gold += [f".{name}_d({g}_d)", f".{name}_x({g}_x)"]
        gate += [f".{name}_d({a}_d)", f".{name}_x({a}_x)"]
        terms.append(f"(|(~{g}_x & (({g}_d ^ {a}_d) | {a}_x)))")
    diff = " | ".join(terms) or "1'b0"
    if 0 < hold <= SHIFT_HOLD:
        # A shift register filling with ones: `started` after `hold` frames, as the counter below, with no adder
        # or comparator for techmap to map (the counter's $alu, $eq and $ne were ~8 of ~19 ms of Yosys on an 8-bit
        # register with a reset) and `hold` latches instead of 8.
        shift = "1'b1" if hold == 1 else f"{{rtlreward_frame[{hold - 2}:0], 1'b1}}"
        started = [
            f"  reg [{hold - 1}:0] rtlreward_frame = {hold}'d0;",
            f"  always @(posedge rtlreward_clk) rtlreward_frame <= {shift};",
            f"  wire rtlreward_started = rtlreward_frame[{hold - 1}];",
        ]
    elif hold:
        w = max(8, hold.bit_length())  # wide enough for the count (8 bits wrapped 256 to 0: no reset held at all)
        started = [
            f"  reg [{w - 1}:0] rtlreward_frame = {w}'d0;",
            f"  always @(posedge rtlreward_clk) if (rtlreward_frame != {w}'d{hold}) "
            f"rtlreward_frame <= rtlreward_frame + {w}'d1;",
            f"  wire rtlreward_started = rtlreward_frame == {w}'d{hold};",
        ]
    else:  # compared from the first frame: no counter (its 8 latches would make a combinational miter sequential)
        started = ["  wire rtlreward_started = 1'b1;"]
    return "\n".join(
        [
            f"module {names.top}({', '.join(ports)}, output trigger);",
            *started,
            *wires,
            f"  {names.gold} rtlreward_gold ({', '.join(gold)});",
            f"  {names.gate} rtlreward_gate ({', '.join(gate)});",
            f"  assign trigger = rtlreward_started & ({diff});",
            "endmodule",
            "",
        ]
    )


def miter_script(
    gold: Sequence[str],
    gate: Sequence[str],
    top: str,
    wrapper_file: str,
    names: Names,
    *,
    gold_incdirs: Iterable[str] = (),
    gate_incdirs: Iterable[str] = (),
    nolatches: bool = False,
    drop_ports: Sequence[str] = (),
    marks: tuple[str, str] | None = None,
    gold_rtlil: str | None = None,
) -> str:
    """The Yosys script: read each design on its own (so their module names never meet), copy just the top of
    each into one design under fresh names, read the wrapper that compares them (`wrapper`), write the AIGER file. `marks`: two
    identifiers logged to stderr once the reference's and then the answer's side were read, so a caller can
    tell whose read failed. `gold_rtlil`: the reference's side as `reference_script` wrote it (its `gold` list
    is then not read)."""
    if gold_rtlil is not None:
        gold_lines = [f"read_rtlil {check_path(gold_rtlil)}", "design -stash gold"]
    else:
        gold_lines = _read_side("gold", gold, gold_incdirs, top, nolatches)
    lines = [
        *gold_lines,
        *([f"log -stderr {check_ident(marks[0])}"] if marks else []),
        *_read_side("gate", gate, gate_incdirs, top, nolatches, drop_ports=drop_ports),
        *([f"log -stderr {check_ident(marks[1])}"] if marks else []),
        f"design -copy-from gold -as {names.gold} {check_ident(top)}",
        f"design -copy-from gate -as {names.gate} {check_ident(top)}",
        f"read_verilog -sv {check_path(wrapper_file)}",
        f"hierarchy -check -top {names.top}",
        "proc",
        "flatten",
        "opt_clean",
        "setundef -undriven -anyseq",
        "setundef -zero -init",
        # alumacc first: techmap maps $alu/$macc cells far faster than chains of $add (a 255-input popcount:
        # 0.3 s instead of 2.6 s of CPU).
        "wreduce",
        # peepopt's rewrites of shifts by a product or sum (`in[sel*4 +: 4]`) into word selects: techmap and opt
        # of the wide barrel shifter the plain shift becomes took 2.7 s on a 1024-bit mux (VerilogEval
        # Prob021_mux256to1v), 0.1 s after it. Not on $div cells: its (A*B)/B -> A rewrite narrows the x a
        # division by zero gives, which the simulation of the same text would not.
        "peepopt t:* t:$div %d",
        "alumacc",
        "opt -fast",
        "techmap",
        "opt -fast",
        "dffunmap",
        "aigmap",
        "opt_clean",
        f"write_aiger -zinit -map {MAP} {AIG}",
    ]
    return "\n".join(lines) + "\n"


def reference_script(
    gold: Sequence[str], top: str, out: str, *, gold_incdirs: Iterable[str] = (), nolatches: bool = False
) -> str:
    """The reference's side of `miter_script` alone, written as RTLIL to `out` where the miter stashes it: read
    back (`gold_rtlil`), it is the same design without reading, elaborating and encoding the reference again."""
    lines = _read_side("gold", gold, gold_incdirs, top, nolatches)
    assert lines[-1] == "design -stash gold"
    return "\n".join([*lines[:-1], f"write_rtlil {check_path(out)}"]) + "\n"


def abc_pdr(timeout: float) -> str:
    """ABC's proof: `scorr` first (signal correspondence: registers and nodes of the two sides proved equal by
    induction from the all-zero initial state `write_aiger -zinit` gives are merged, which leaves the miter of two
    like implementations combinational, often constant: ~10 ms where PDR took ~300 ms on a 32-bit edge detector
    restated), then PDR on what is left. `scorr` keeps every input and the output's value in every reachable
    state, so PDR's verdict and counterexample are the original miter's. The network's size is printed before and
    after `scorr`."""
    t = max(1, int(timeout))
    return f"read_aiger {AIG}; strash; print_stats; scorr; print_stats; pdr -T {t}; write_cex -n pdr.cex"


def abc_bmc(timeout: float, frames: int) -> str:
    return f"read_aiger {AIG}; strash; bmc3 -T {max(1, int(timeout))} -F {max(1, int(frames))}; write_cex -n bmc.cex"


@attrs.frozen
class AbcResult:
    verdict: str  # proved | cex | bounded | undecided
    frame: int | None = None  # cex: the frame where the outputs differ; bounded: frames checked


_ASSERTED_RE = re.compile(r"^Output 0 of miter .* was asserted in frame (\d+)\.", re.M)
_BOUNDED_RE = re.compile(r"^No output asserted in (\d+) frames\.", re.M)


# Newer ABC (pyosys 0.70's, Debian trixie's) ends PDR on a property no frame can violate with "All outputs solved or
# timed out in frame N. ... Property UNDECIDED" where older ABC says "Property proved" (measured: a constant-0
# miter, a combinational one whose only latches are the wrapper's idle frame counter). An output PDR disproves is
# reported as asserted with a counterexample; one it gave up on says it reached its time limit. Solved, with no
# counterexample and no time limit reached, is a proof.
_SOLVED_RE = re.compile(r"^All outputs solved or timed out in frame \d+\.", re.M)
_TIMED_OUT_RE = re.compile(r"(?i)timeout|time limit|timed out after|resource limit")


def parse_abc(output: str) -> AbcResult:
    """ABC's verdict. Its output never carries text from the designs (the AIGER file has no symbol table)."""
    if re.search(r"^Property proved\.", output, re.M):
        return AbcResult("proved")
    if (
        _SOLVED_RE.search(output)
        and "asserted" not in output
        and not _TIMED_OUT_RE.search(_SOLVED_RE.sub("", output))
    ):
        return AbcResult("proved")
    if m := _ASSERTED_RE.search(output):
        return AbcResult("cex", int(m.group(1)))
    if m := _BOUNDED_RE.search(output):
        return AbcResult("bounded", int(m.group(1)))
    return AbcResult("undecided")


def parse_map(text: str) -> dict[int, tuple[str, int]]:
    """AIGER input index -> (port name without the `in_` prefix, bit) from Yosys's `-map` file. Inputs Yosys
    added for x values and the wrapper's clock are left out."""
    out: dict[int, tuple[str, int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "input" and parts[3].startswith("in_"):
            out[int(parts[1])] = (parts[3][3:], int(parts[2]))
    return out


_CEX_RE = re.compile(r"^pi(\d+)@(\d+)=([01x])\s*$", re.M)


def parse_cex(text: str, inputs: dict[int, tuple[str, int]]) -> list[dict[str, int]]:
    """Per frame, each input port's value, from `write_cex -n`."""
    frames: dict[int, dict[str, int]] = {}
    for m in _CEX_RE.finditer(text):
        idx, frame, bit = int(m.group(1)), int(m.group(2)), m.group(3)
        if idx not in inputs:
            continue
        name, pos = inputs[idx]
        row = frames.setdefault(frame, {})
        row[name] = row.get(name, 0) | ((1 if bit == "1" else 0) << pos)
    if not frames:
        return []
    return [frames.get(i, {}) for i in range(max(frames) + 1)]


LATCH_ERROR = "Latch inferred"  # Yosys 0.23: an always_comb that infers a latch
_ERROR_RE = re.compile(r"^(.*?)ERROR: (.*)$", re.M)


def yosys_error(output: str, names: Names | None = None) -> str:
    """Yosys's error message (its last `ERROR:` line, with the file:line in front of it), shortened, with every
    name the proof added replaced (they are never shown: an answer that knew them could instantiate them)."""
    found = _ERROR_RE.findall(output)
    if not found:
        return ""
    where, msg = found[-1]
    where = where.strip().rstrip(":")
    text = f"{where}: {msg.strip()}" if where else msg.strip()
    if HIERARCHY_LEFT in text:
        text = (
            "after flattening, the design still instantiates a module it does not define in full (an undefined "
            "or empty module, a black box, or one kept unflattened)"
        )
    for name in names.all() if names else ():
        text = text.replace(name, "<internal>")
    return re.sub(r"\bg[0-9a-f]{16}_\w+", "<internal>", text)[:300]
