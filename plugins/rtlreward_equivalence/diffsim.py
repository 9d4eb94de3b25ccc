"""Differential simulation: the same stimulus through the reference and the candidate, every output compared every
cycle.

The two designs are simulated separately (two Icarus runs of one generated testbench), not side by side in one
simulation: in one simulation the candidate could read the reference's outputs by hierarchical name
(`assign q = tb.ref.q;`), and the two designs' module names would have to be renamed apart in their text. The
stimulus is generated here, written to a file both runs read, and the comparison is done here.

Each run prints its samples behind a per-run nonce the candidate cannot know (it is only in the testbench's text,
and the safety gate has kept file reads out of the candidate), so a candidate that prints look-alike lines, or
calls `$finish` early, cannot make up samples: missing samples count as mismatches.

Cycle timing (10 time units per cycle, clocks low at the start): inputs change 1 unit after the falling edge, the
outputs are sampled 3 units later, then the rising edge. So sample i shows the state after i rising edges and the
combinational response to the inputs of cycle i: the same frame a formal step describes.

With several clocks (`SimPlan.clocks`), the first rises every cycle as above; each further clock rises at the same
moment only in the cycles its enable bit in the stimulus says (`Stimulus.rises`: a random bit per cycle in
`random_stimulus`, so about every other cycle, and every cycle of the reset each run starts with; every cycle in
`directed_stimulus`), and falls with the first only after it rose. Driving every clock together would let a design
that clocks both domains from one clock pass (several clocks get no formal proof, so simulation alone decides).
The enable bits are the low bits of each line of the stimulus file, after the inputs (`stimulus_hex`), so the
reference and the answer see the same clock pattern.
"""

from __future__ import annotations

import functools
import random
import re
import secrets
from collections.abc import Mapping, Sequence

import attrs

from .design import PortInfo, Reset


@attrs.frozen
class SimPlan:
    """What the testbench drives and samples. Every name is a plain identifier (checked by the caller)."""

    top: str
    inputs: tuple[PortInfo, ...]  # driven from the stimulus, reset included, clocks excluded
    outputs: tuple[PortInfo, ...]
    clocks: tuple[str, ...]
    reset: Reset | None
    reset_cycles: int

    @property
    def input_width(self) -> int:
        return sum(p.width or 1 for p in self.inputs)

    @property
    def output_bits(self) -> int:
        return sum(p.width or 1 for p in self.outputs)


@attrs.frozen
class Stimulus:
    """Input values per cycle (in `SimPlan.inputs` order); `segments` are the first cycles of each seed's run
    (each starts with reset); cycles before `compare_from` are not compared (before the first reset took).
    `rises`: per cycle, a bit per further clock (`SimPlan.clocks[1:]`), 1 where it rises in that cycle; empty
    (a plan with one clock or none, or a directed stimulus): every clock rises every cycle."""

    vectors: tuple[tuple[int, ...], ...]
    segments: tuple[int, ...] = (0,)
    compare_from: int = 0
    rises: tuple[tuple[int, ...], ...] = ()

    def __len__(self) -> int:
        return len(self.vectors)

    def segment_start(self, cycle: int) -> int:
        return max((s for s in self.segments if s <= cycle), default=0)


def _value(rng: random.Random, width: int) -> int:
    """Uniform values, with the corners (0, all ones, small numbers) over-weighted: comparisons against
    constants such as `q == 8'hFF` are where designs differ."""
    if width == 1:
        return rng.getrandbits(1)
    r = rng.random()
    full = (1 << width) - 1
    if r < 0.1:
        return 0
    if r < 0.2:
        return full
    if r < 0.3:
        return rng.randint(0, min(full, 3))
    return rng.getrandbits(width)


def random_stimulus(
    plan: SimPlan, seed: int, *, seeds: int = 3, cycles: int = 256, reset_probability: float = 0.02
) -> Stimulus:
    """`seeds` runs of `cycles` cycles each, each starting with `plan.reset_cycles` cycles of reset; after the
    first run the reset is also asserted now and then, so designs must agree on a reset in mid-run too. With
    several clocks, each further clock rises in a cycle where a random bit from the same generator, drawn after
    the cycle's inputs, is 1 (and in the reset cycles each run starts with, so a synchronous reset takes in its
    domain too): `Stimulus.rises`."""
    vectors: list[tuple[int, ...]] = []
    rises: list[tuple[int, ...]] = []
    further = len(plan.clocks[1:])
    segments: list[int] = []
    hold = plan.reset_cycles if plan.reset is not None else 0
    for s in range(max(1, seeds)):
        rng = random.Random(f"{seed}:{s}")
        segments.append(len(vectors))
        for c in range(max(1, cycles)):
            row = []
            for p in plan.inputs:
                if plan.reset is not None and p.name == plan.reset.name:
                    active = c < hold or (s > 0 and rng.random() < reset_probability)
                    row.append(plan.reset.active if active else 1 - plan.reset.active)
                else:
                    row.append(_value(rng, p.width or 1))
            vectors.append(tuple(row))
            if further:
                rises.append(tuple(rng.getrandbits(1) | (c < hold) for _ in range(further)))
    return Stimulus(tuple(vectors), tuple(segments), compare_from=hold, rises=tuple(rises))


def directed_stimulus(plan: SimPlan, frames: Sequence[Mapping[str, int]]) -> Stimulus:
    """A formal counterexample as stimulus: frame values per input name (missing: 0), reset forced active in
    the first `reset_cycles` frames as the formal check did; every clock rises every frame (`Stimulus.rises`
    empty: the formal check steps one clock)."""
    hold = plan.reset_cycles if plan.reset is not None else 0
    vectors = []
    for i, frame in enumerate(frames):
        row = []
        for p in plan.inputs:
            if plan.reset is not None and p.name == plan.reset.name and i < hold:
                row.append(plan.reset.active)
            else:
                row.append(int(frame.get(p.name, 0)) & ((1 << (p.width or 1)) - 1))
        vectors.append(tuple(row))
    return Stimulus(tuple(vectors), (0,), compare_from=hold)


def concat(first: Stimulus, second: Stimulus) -> Stimulus:
    """`second` run after `first` in one simulation (its segments keep their resets; compared from the start).
    Where only one of them has clock enables (`Stimulus.rises`), every clock rises every cycle of the other."""
    n = len(first)
    rises: tuple[tuple[int, ...], ...] = ()
    if first.rises or second.rises:
        every = (1,) * len((first.rises or second.rises)[0])
        rises = (first.rises or (every,) * len(first)) + (second.rises or (every,) * len(second))
    return Stimulus(
        first.vectors + second.vectors,
        first.segments + tuple(s + n for s in second.segments),
        compare_from=first.compare_from,
        rises=rises,
    )


def stimulus_hex(plan: SimPlan, stim: Stimulus) -> str:
    """One line per cycle: the inputs concatenated in `plan.inputs` order (first input most significant), then,
    with several clocks, one enable bit per further clock in `plan.clocks[1:]` order (the last clock least
    significant; all 1 where `stim.rises` is empty): `stimulus_width` bits."""
    further = len(plan.clocks[1:])
    width = stimulus_width(plan)
    digits = (width + 3) // 4
    fields = [(p.width or 1, (1 << (p.width or 1)) - 1) for p in plan.inputs]
    rises = stim.rises or ((1,) * further,) * len(stim)
    if further and len(rises) != len(stim):
        raise ValueError(f"{len(rises)} rows of clock enables for {len(stim)} cycles")
    lines = []
    for i, row in enumerate(stim.vectors):
        v = 0
        for (w, mask), x in zip(fields, row, strict=True):
            v = (v << w) | (x & mask)
        if further:
            for bit in rises[i]:
                v = (v << 1) | (bit & 1)
        lines.append(f"{v:0{digits}x}")
    return "\n".join(lines) + "\n"


def stimulus_width(plan: SimPlan) -> int:
    """Bits per line of the stimulus file (`stimulus_hex`): the inputs and an enable per further clock."""
    return max(1, plan.input_width + len(plan.clocks[1:]))


CYCLES_PLUSARG = "rtlreward_cycles"


def testbench(
    plan: SimPlan, nonce: str, cycles: int, stim_file: str, *, capacity: int | None = None
) -> tuple[str, str]:
    """(module name, text) of the testbench: it instantiates `plan.top` with every port connected by name. With a
    `capacity`, it holds up to that many cycles and runs as many as `+rtlreward_cycles=N` says (else `cycles`),
    so one compiled program serves every stimulus up to that length."""
    # The module's name is random but not the nonce: the design can read its own path (`%m`), never the nonce its
    # trace lines must carry (a red-team answer printed forged lines under a nonce it read from `%m`).
    tb = f"rtlreward_eqtb_{secrets.token_hex(8)}"
    width = stimulus_width(plan)
    rows = max(cycles, capacity or 0)
    decl = [f"  reg [{width - 1}:0] rtlreward_stim [0:{rows - 1}];", "  integer rtlreward_i, rtlreward_n;"]
    conns = []
    for c in plan.clocks:
        decl.append(f"  reg clk_{c};")
        conns.append(f".{c}(clk_{c})")
    further = plan.clocks[1:]  # each rises only in the cycles its enable bit says (the module docstring)
    decl += [f"  reg en_{c};" for c in further]
    for p in plan.inputs:
        decl.append(f"  reg [{(p.width or 1) - 1}:0] in_{p.name};")
        conns.append(f".{p.name}(in_{p.name})")
    for p in plan.outputs:
        decl.append(f"  wire [{(p.width or 1) - 1}:0] out_{p.name};")
        conns.append(f".{p.name}(out_{p.name})")
    fmt = " ".join(["%0d"] + ["%b"] * len(plan.outputs))
    args = ", ".join(["rtlreward_i"] + [f"out_{p.name}" for p in plan.outputs])
    count = (
        [
            f'    if (!$value$plusargs("{CYCLES_PLUSARG}=%d", rtlreward_n)) rtlreward_n = {cycles};',
            f"    if (rtlreward_n > {rows}) rtlreward_n = {rows};",
        ]
        if capacity
        else [f"    rtlreward_n = {cycles};"]
    )
    body = [
        *count,
        f'    $readmemh("{stim_file}", rtlreward_stim);',
        *[f"    clk_{c} = 1'b0;" for c in plan.clocks],
        "    for (rtlreward_i = 0; rtlreward_i < rtlreward_n; rtlreward_i = rtlreward_i + 1) begin",
        "      #1;",
    ]
    if plan.inputs or further:
        fields = [f"in_{p.name}" for p in plan.inputs] + [f"en_{c}" for c in further]
        body.append(f"      {{{', '.join(fields)}}} = rtlreward_stim[rtlreward_i];")
    # Outputs are sampled in both phases of the clock: low (before the rising edge) and, under the name
    # `@<nonce>h`, high (before the falling edge). A design that reads its clock on both edges or as data
    # (VerilogEval Prob078's `q = clk ? qp : qn`) differs from the reference in one phase only.
    high = [f'      $display("@{nonce}{HIGH} {fmt}", {args});', "      #1;"] if plan.clocks else ["      #1;"]
    body += [
        "      #3;",
        f'      $display("@{nonce} {fmt}", {args});',
        "      #1;",
        *[f"      clk_{c} = 1'b1;" for c in plan.clocks[:1]],
        *[f"      if (en_{c}) clk_{c} = 1'b1;" for c in further],
        "      #4;",
        *high,
        *[f"      clk_{c} = 1'b0;" for c in plan.clocks[:1]],
        *[f"      if (en_{c}) clk_{c} = 1'b0;" for c in further],
        "    end",
        f'    $display("@{nonce} end");',
        "    $finish;",
    ]
    text = "\n".join(
        [
            "`timescale 1ns/1ps",
            f"module {tb};",
            *decl,
            f"  {plan.top} dut ({', '.join(conns)});",
            "  initial begin",
            *body,
            "  end",
            "endmodule",
            "",
        ]
    )
    return tb, text


@attrs.frozen
class Trace:
    """Sampled outputs per cycle (bit strings, most significant first, as Icarus prints them: 0 1 x z)."""

    samples: tuple[tuple[str, ...] | None, ...]  # None: no sample for that cycle (the run stopped early)
    complete: bool  # the testbench reached its end


HIGH = "h"  # the suffix of the nonce on the lines sampled in the clock's high phase (`testbench`)


def parse_phases(output: str, nonce: str, plan: SimPlan, cycles: int) -> tuple[Trace, Trace | None]:
    """The low-phase trace and, for a clocked plan, the high-phase one (`testbench`), in one pass over the output:
    the samples the testbench printed (lines carrying its nonce, which the design cannot know), the first of each
    cycle; a line of the wrong shape did not come from the testbench and is ignored. Complete: the low phase's
    `end` line was printed."""
    low: list[tuple[str, ...] | None] = [None] * cycles
    high: list[tuple[str, ...] | None] = [None] * cycles
    complete = False
    for m in _sample_pattern(nonce, plan).findall(output.replace("\r\n", "\n").lower()):
        # m: (phase, "end", cycle, *values), as the pattern's groups
        if m[1]:
            complete = complete or not m[0]
            continue
        i = int(m[2])
        samples = high if m[0] else low
        if i < cycles and samples[i] is None:
            samples[i] = m[3:]
    if not plan.clocks:
        return Trace(tuple(low), complete), None
    return Trace(tuple(low), complete), Trace(tuple(high), complete)


def _sample_pattern(nonce: str, plan: SimPlan) -> re.Pattern[str]:
    """A testbench line of either phase, on text in lower case: the phase, then the cycle and every output at its
    declared width (Icarus prints exactly that; a line of another shape did not come from this testbench), or
    `end`. Group 1: `h` in the high phase; 2: `end`; 3: the cycle; 4...: the values."""
    values = "".join(f" ([01xz]{{{p.width or 1}}})" for p in plan.outputs)
    return _compiled(rf"@{re.escape(nonce.lower())}({HIGH})? (?:(end)|(\d+){values})[ \t\f\v\r]*$")


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.M)


def compare_phases(
    plan: SimPlan, stim: Stimulus, gold: Trace, gate: Trace, gold_high: Trace | None, gate_high: Trace | None
) -> Comparison:
    """`compare` in the low phase and, where both traces have one, the high phase: a bit that differs in either
    differs; the first difference is the low phase's, else the high phase's."""
    low = compare(plan, stim, gold, gate)
    if gold_high is None or gate_high is None:
        return low
    high = compare(plan, stim, gold_high, gate_high)
    if high.first is None:
        return low
    bits = {n: low.mismatched_bits[n] | high.mismatched_bits.get(n, frozenset()) for n in low.mismatched_bits}
    return attrs.evolve(low, mismatched_bits=bits, first=low.first or high.first)


@attrs.frozen
class Difference:
    cycle: int
    expected: dict[str, str]  # every output at that cycle
    actual: dict[str, str | None]
    differing: tuple[str, ...]


@attrs.frozen
class Comparison:
    mismatched_bits: dict[
        str, frozenset[int]
    ]  # output -> bit indices (0 = least significant) that ever differed
    first: Difference | None
    compared_cycles: int
    defined_bits: int  # reference output bits that were 0/1 (x in the reference is a don't-care)

    @property
    def equal(self) -> bool:
        return self.first is None


_ONES = str.maketrans("01xz", "0100")
_KNOWN = str.maketrans("01xz", "1100")


def _rows_bits(samples: Sequence[tuple[str, ...] | None], width: int) -> tuple[int, int]:
    """Samples as two integers: their 1 bits and their 0/1 bits, a sample's outputs concatenated in `plan.outputs`
    order, the first sample most significant; a missing sample is all x (no 0/1 bit). Each sample is `width` bits
    and holds only 0 1 x z (`_sample_pattern` reads exactly that)."""
    if not samples or not width:
        return 0, 0
    blank = ("x" * width,)
    text = "".join(["".join(r if r is not None else blank) for r in samples])
    return int(text.translate(_ONES), 2), int(text.translate(_KNOWN), 2)


def _fold(bits: int, rows: int, width: int) -> int:
    """The OR of the `rows` rows of `width` bits that `bits` holds (halving: log2(rows) operations on integers)."""
    while rows > 1:
        half = rows // 2
        low = half * width
        bits = (bits >> low) | (bits & ((1 << low) - 1))
        rows -= half
    return bits


def _spans(plan: SimPlan) -> list[tuple[str, int, int]]:
    """Each output's (name, shift, mask) in one sample's bits (`_rows_bits` of one sample)."""
    spans = []
    shift = plan.output_bits
    for p in plan.outputs:
        w = p.width or 1
        shift -= w
        spans.append((p.name, shift, (1 << w) - 1))
    return spans


def compare(plan: SimPlan, stim: Stimulus, gold: Trace, gate: Trace) -> Comparison:
    """Every output bit, every cycle from `stim.compare_from`: a reference bit that is x or z is a don't-care;
    otherwise the candidate must show the same 0/1 (its x is a mismatch). A cycle the candidate never sampled
    mismatches every defined bit. Both traces are compared at once, each as two integers (`_rows_bits`: its 1 bits
    and its 0/1 bits, the first cycle most significant); a cycle the reference did not reach compares nothing."""
    spans = _spans(plan)
    width = plan.output_bits
    lo, hi = stim.compare_from, max(stim.compare_from, min(len(stim), len(gold.samples)))
    golds = gold.samples[lo:hi]
    gates = list(gate.samples[lo:hi])
    gates += [None] * (len(golds) - len(gates))
    rows = len(golds)
    g_ones, g_known = _rows_bits(golds, width)
    a_ones, a_known = _rows_bits(gates, width)
    differs = g_known & ((g_ones ^ a_ones) | ~a_known)
    first: Difference | None = None
    if differs:
        r = (rows * width - differs.bit_length()) // width  # the first cycle with a differing bit
        c, g, a = lo + r, golds[r], gates[r]
        row = (differs >> ((rows - 1 - r) * width)) & ((1 << width) - 1)
        first = Difference(
            cycle=c,
            expected={p.name: g[k] for k, p in enumerate(plan.outputs)},
            actual={p.name: (a[k] if a is not None else None) for k, p in enumerate(plan.outputs)},
            differing=tuple(name for name, shift, mask in spans if (row >> shift) & mask),
        )
    bad_all = _fold(differs, rows, width)
    bad = {}
    for name, shift, mask in spans:
        bits = (bad_all >> shift) & mask
        bad[name] = frozenset(j for j in range(bits.bit_length()) if bits >> j & 1)
    compared = rows - sum(1 for g in golds if g is None)
    return Comparison(bad, first, compared, g_known.bit_count())


def constant_share(plan: SimPlan, stim: Stimulus, gold: Trace) -> float:
    """The output-bit credit the best constant stub earns on `stim`: the share of the reference's output bits that
    were never both 0 and 1 in a compared cycle (a stub with each such bit tied to its one value never differs on
    it). Partial credit is measured above this, so outputs tied to 0 or 1 earn nothing."""
    width = plan.output_bits
    if not width:
        return 0.0
    golds = gold.samples[stim.compare_from : min(len(stim), len(gold.samples))]
    g_ones, g_known = _rows_bits(golds, width)
    ones = _fold(g_ones, len(golds), width)
    zeros = _fold(g_known & ~g_ones, len(golds), width)
    return (width - (ones & zeros).bit_count()) / width


def fmt_bits(bits: str | None) -> str:
    """A sampled value as a sized literal: hex when fully known and wider than 4 bits, else binary."""
    if bits is None:
        return "(no sample)"
    w = len(bits)
    if w == 1:
        return bits
    if w > 4 and all(b in "01" for b in bits):
        return f"{w}'h{int(bits, 2):0{(w + 3) // 4}x}"
    return f"{w}'b{bits}"


def fmt_int(value: int, width: int) -> str:
    if width == 1:
        return str(value)
    if width > 4:
        return f"{width}'h{value:0{(width + 3) // 4}x}"
    return f"{width}'b{value:0{width}b}"
