"""The miter's wrapper (`rtlreward_equivalence.formal.wrapper`): it holds the reset active for the first
`reset_cycles` frames and compares nothing there, then compares every frame. It counts those frames with a shift
register up to `formal.SHIFT_HOLD` and with a counter beyond; both must give the same frames. Checked by simulating
the wrapper itself with Icarus around two sides that always differ and report the reset they see."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rtlreward_equivalence import formal
from rtlreward_equivalence.design import PortInfo, Reset

pytestmark = pytest.mark.skipif(shutil.which("iverilog") is None, reason="needs Icarus Verilog")


def _frames(tmp_path: Path, hold: int, active_low: bool, frames: int) -> list[tuple[int, int]]:
    """(the reset the sides saw, trigger) in each frame, the free reset input held inactive throughout."""
    names = formal.Names.fresh()
    reset = Reset("rst", active_low)
    ins = [PortInfo("clk", "input", 1, True), PortInfo("rst", "input", 1, True)]
    outs = [PortInfo("q", "output", 1, True)]
    top = formal.wrapper(ins[1:], outs, reset, hold, names, clocks=("clk",))
    # Both sides output their reset input as `q`: the reference's bit is always defined, the answer's always x
    # (`q_x`), so every compared frame differs; what the sides saw is read from the reference's `q_d`.
    sides = "".join(
        f"module {name}(input clk, input rst, output q_d, output q_x);\n"
        f"  assign q_d = rst;\n  assign q_x = {x};\nendmodule\n"
        for name, x in ((names.gold, "1'b0"), (names.gate, "1'b1"))
    )
    inactive = 1 if active_low else 0
    bench = (
        "module tb;\n  reg clk = 0;\n  wire trigger;\n"
        f"  {names.top} dut(.rtlreward_clk(clk), .in_rst(1'b{inactive}), .trigger(trigger));\n"
        "  integer i;\n  initial begin\n"
        f"    for (i = 0; i < {frames}; i = i + 1) begin\n"
        '      #1 $display("%0d %0d", dut.rtlreward_gold.rst, trigger);\n'
        "      clk = 1; #1 clk = 0;\n    end\n  end\nendmodule\n"
    )
    (tmp_path / "w.v").write_text(top + sides + bench)
    subprocess.run(["iverilog", "-g2012", "-o", "w.vvp", "-s", "tb", "w.v"], cwd=tmp_path, check=True)
    out = subprocess.run(
        ["vvp", "-n", "w.vvp"], cwd=tmp_path, check=True, capture_output=True, text=True
    ).stdout
    return [tuple(int(v) for v in line.split()) for line in out.splitlines() if line.strip()]


@pytest.mark.parametrize("hold", [1, 2, 3, formal.SHIFT_HOLD, formal.SHIFT_HOLD + 1, 20, 256, 300])
@pytest.mark.parametrize("active_low", [False, True])
def test_the_reset_is_held_and_not_compared_for_exactly_reset_cycles_frames(tmp_path, hold, active_low):
    frames = hold + 12
    seen = _frames(tmp_path, hold, active_low, frames)
    active, inactive = (0, 1) if active_low else (1, 0)
    assert seen == [(active, 0)] * hold + [(inactive, 1)] * (frames - hold)


def test_up_to_shift_hold_frames_take_one_latch_each_and_no_adder():
    names = formal.Names.fresh()
    ins, outs = [PortInfo("rst", "input", 1, True)], [PortInfo("q", "output", 1, True)]
    short = formal.wrapper(ins, outs, Reset("rst", False), formal.SHIFT_HOLD, names, clocks=("clk",))
    assert f"reg [{formal.SHIFT_HOLD - 1}:0] rtlreward_frame" in short and "+" not in short
    long = formal.wrapper(ins, outs, Reset("rst", False), formal.SHIFT_HOLD + 1, names, clocks=("clk",))
    assert "reg [7:0] rtlreward_frame" in long
