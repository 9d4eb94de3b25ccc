"""Does the synthesised netlist mean what the simulation of the RTL means? One Icarus run of both, side by side.

The testbench instantiates the answer's top (the RTL, as every simulation of the answer runs it) and the netlist
Yosys wrote under a fresh module name, drives both with the same seeded random inputs (resets held for the first
cycles, then asserted now and then), toggles every clock together, and compares every output twice a cycle:
before the clock edge (combinational paths) and after it. An x or z bit of the RTL is a don't-care (uninitialised
state); any other bit must agree. Where they disagree, synthesis built something else than the simulation runs:
an incomplete sensitivity list, a delay the logic relies on, a race between blocking assignments, a branch under
`ifdef SYNTHESIS`, logic hidden from synthesis by a pragma.

Port names reach the testbench only when they are plain identifiers (`rtlreward_hdl.yosys.IDENT_RE`); the verdict line carries a
per-run nonce the design cannot know.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs

from .flow import check_ident

CYCLES = 200
RESET_CYCLES = 2


@attrs.frozen
class Mismatch:
    cycle: int
    port: str
    rtl: str
    netlist: str
    phase: str  # before-edge | after-edge


def testbench(
    top: str,
    netlist_top: str,
    ports: Mapping[str, tuple[str, int]],
    clocks: Mapping[str, int],
    resets: Mapping[str, int],
    nonce: str,
    seed: int,
    cycles: int = CYCLES,
) -> str:
    """The testbench source (module `tb_<nonce>`)."""
    check_ident(top)
    check_ident(netlist_top)
    ins = [(n, w) for n, (d, w) in ports.items() if d == "input" and n not in clocks]
    outs = [(n, w) for n, (d, w) in ports.items() if d == "output"]
    lines = ["`timescale 1ns/1ps", f"module tb_{nonce};"]
    for n in clocks:
        lines.append(f"  reg c_{check_ident(n)};")
    for n, w in ins:
        lines.append(f"  reg [{max(1, w) - 1}:0] i_{check_ident(n)};")
    for n, w in outs:
        lines.append(f"  wire [{max(1, w) - 1}:0] r_{check_ident(n)}, s_{n};")
    conns_r = (
        [f".{n}(c_{n})" for n in clocks]
        + [f".{n}(i_{n})" for n, _ in ins]
        + [f".{n}(r_{n})" for n, _ in outs]
    )
    conns_s = (
        [f".{n}(c_{n})" for n in clocks]
        + [f".{n}(i_{n})" for n, _ in ins]
        + [f".{n}(s_{n})" for n, _ in outs]
    )
    lines.append(f"  {top} u_rtl ({', '.join(conns_r)});")
    lines.append(f"  {netlist_top} u_syn ({', '.join(conns_s)});")
    lines += ["  integer seed, cyc, k, bad;", ""]
    lines.append("  task compare(input integer phase);")
    lines.append("  begin")
    for n, w in outs:
        lines += [
            f"    for (k = 0; k < {max(1, w)}; k = k + 1)",
            f"      if (bad == 0 && r_{n}[k] !== 1'bx && r_{n}[k] !== 1'bz && r_{n}[k] !== s_{n}[k]) begin",
            f'        $display("RTLREWARD_SYNTH_MISMATCH {nonce} %0d {n} %b %b %0d", cyc, r_{n}, s_{n}, phase);',
            "        bad = 1;",
            "      end",
        ]
    lines += ["  end", "  endtask", ""]
    lines.append("  task drive;")
    lines.append("  begin")
    for n, w in ins:
        words = (max(1, w) + 31) // 32
        value = "{" + ", ".join(["$random(seed)"] * words) + "}" if words > 1 else "$random(seed)"
        if n in resets:
            active = resets[n]
            lines.append(
                f"    i_{n} = (cyc < {RESET_CYCLES} || ($random(seed) & 31) == 0) ? {active} : {1 - active};"
            )
        else:
            lines.append(f"    i_{n} = {value};")
    lines += ["  end", "  endtask", ""]
    lines += [
        "  initial begin",
        f"    seed = {int(seed) & 0x7FFFFFFF}; bad = 0;",
        *[f"    c_{n} = {1 - p};" for n, p in clocks.items()],
        f"    for (cyc = 0; cyc < {int(cycles)}; cyc = cyc + 1) begin",
        "      drive;",
        "      #4 compare(0);",
        *[f"      c_{n} = {p};" for n, p in clocks.items()],
        "      #4 compare(1);",
        *[f"      c_{n} = {1 - p};" for n, p in clocks.items()],
        "      #2;",
        "      if (bad) cyc = 1 << 30;",
        "    end",
        f'    $display("RTLREWARD_SYNTH_DONE {nonce}");',
        "    $finish;",
        "  end",
        "endmodule",
        "",
    ]
    return "\n".join(lines)


def parse(output: str, nonce: str) -> tuple[bool, Mismatch | None]:
    """(finished, first mismatch) from the simulation's output."""
    done = f"RTLREWARD_SYNTH_DONE {nonce}" in output
    m = re.search(
        rf"^RTLREWARD_SYNTH_MISMATCH {re.escape(nonce)} (\d+) (\w+) (\S+) (\S+) (\d)\s*$", output, re.M
    )
    if m is None:
        return done, None
    phase = "after the clock edge" if m.group(5) == "1" else "before the clock edge"
    return done, Mismatch(int(m.group(1)), m.group(2), m.group(3), m.group(4), phase)
