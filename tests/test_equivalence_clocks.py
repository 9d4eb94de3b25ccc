"""Designs with several clocks in the `equivalence` stage's differential simulation (rtlreward_equivalence.diffsim):
the first clock rises every cycle, each further clock only in the cycles a random bit of the stimulus says, so an
answer that clocks both domains of RTLLM's `asyn_fifo` from one clock is refuted (several clocks get no formal
proof: simulation alone decides). Real Icarus under the `equiv` profile; skipped without the RTLLM data."""

from __future__ import annotations

import hashlib
import random
import shutil

import pytest
from verilog_eval_helpers import RTLLM_DATA, needs_rtllm

from rtlreward.model import Candidate
from rtlreward_equivalence import diffsim
from rtlreward_equivalence.design import PortInfo, Reset

needs_tools = pytest.mark.skipif(
    not (shutil.which("yosys") and shutil.which("iverilog")),
    reason="needs Yosys (apt-get install yosys) and Icarus Verilog",
)


@pytest.fixture(scope="module")
def rtllm_tasks():
    from rtlreward_rtllm.dataset import RtllmDataset

    return {t.id: t for t in RtllmDataset().load(RTLLM_DATA, ids="asyn_fifo,synchronizer")}


def _one_clock(task, slow: str, fast: str, count: int) -> dict[str, str]:
    """The task's reference with every `posedge <slow>` turned into `posedge <fast>`: one clock for both
    domains."""
    ((name, text),) = task.reference.items()
    assert text.count(f"posedge {slow}") == count
    return {name: text.replace(f"posedge {slow}", f"posedge {fast}")}


def _score(items):
    from rtlreward.engine import Engine

    with Engine("equiv", cache=False) as engine:
        return engine.score_batch(items)


@needs_rtllm
@needs_tools
def test_a_one_clock_asyn_fifo_is_refuted(rtllm_tasks):
    """The red-team answer: the reference `asyn_fifo` with its read side on `wclk` (`posedge rclk` -> `posedge
    wclk`, 4 places, `rrstn` kept) earned 1.0 while every clock rose every cycle."""
    task = rtllm_tasks["asyn_fifo"]
    (r,) = _score([(task, Candidate(files=_one_clock(task, "rclk", "wclk", 4)))])
    eq = r.stages["equivalence"]
    assert eq.metrics["clock"] == "wclk,rclk" and eq.metrics["formal"] == "skipped"
    assert not r.passed and r.total < 0.5, r.feedback()
    assert eq.metrics["equivalence"] == "refuted" and eq.score == 0.0
    assert "rclk does not rise" in eq.feedback  # the counterexample shows the clock pattern


@needs_rtllm
@needs_tools
@pytest.mark.parametrize(
    ("task_id", "slow", "fast", "count"),
    [("asyn_fifo", "wclk", "rclk", 4), ("synchronizer", "clk_b", "clk_a", 3)],
)
def test_two_clock_references_pass_and_their_one_clock_variants_do_not(
    rtllm_tasks, task_id, slow, fast, count
):
    """The references still pass against themselves (the gated clock is the same for both designs); the
    reference run from one clock (here the other direction for `asyn_fifo`) is refuted."""
    task = rtllm_tasks[task_id]
    ref, one = _score(
        [
            (task, Candidate(files=dict(task.reference))),
            (task, Candidate(files=_one_clock(task, slow, fast, count))),
        ]
    )
    assert ref.passed and ref.total == pytest.approx(1.0), ref.feedback()
    assert ref.stages["equivalence"].metrics["simulation_only"] is True
    assert not one.passed and one.total < 0.5, one.feedback()
    assert one.stages["equivalence"].metrics["equivalence"] == "refuted"


# -- the stimulus itself ------------------------------------------------------------------------------------------
INPUTS = (
    PortInfo("rst_n", "input", None, True),
    PortInfo("a", "input", 8, True),
    PortInfo("b", "input", 3, True),
)
OUTPUTS = (PortInfo("q", "output", 8, True),)


def _old_stimulus(seed: int, seeds: int, cycles: int, p_reset: float, hold: int) -> list[tuple[int, ...]]:
    """The stimulus of `INPUTS` (reset `rst_n`, active low) as it was before further clocks were gated: per seed
    s a `random.Random(f"{seed}:{s}")`, per cycle each input in order (the reset: held, then with `p_reset` after
    the first run; others: corners over-weighted)."""
    rows = []
    for s in range(seeds):
        rng = random.Random(f"{seed}:{s}")
        for c in range(cycles):
            row = []
            for name, width in (("rst_n", 1), ("a", 8), ("b", 3)):
                if name == "rst_n":
                    row.append(0 if c < hold or (s > 0 and rng.random() < p_reset) else 1)
                elif width == 1:
                    row.append(rng.getrandbits(1))
                else:
                    r, full = rng.random(), (1 << width) - 1
                    if r < 0.1:
                        row.append(0)
                    elif r < 0.2:
                        row.append(full)
                    elif r < 0.3:
                        row.append(rng.randint(0, min(full, 3)))
                    else:
                        row.append(rng.getrandbits(width))
            rows.append(tuple(row))
    return rows


def test_random_stimulus_gates_further_clocks_and_leaves_one_clock_alone():
    """Two clocks: the second rises in some cycles and is held in others (always during the first reset), the
    same for the same seed, its bit the low bit of each stimulus line; one clock: the stimulus and its file are
    byte for byte what they were."""
    reset = Reset("rst_n", True)
    two = diffsim.SimPlan("top", INPUTS, OUTPUTS, ("wclk", "rclk"), reset, 2)
    stim = diffsim.random_stimulus(two, 77, seeds=2, cycles=100)
    bits = [r for (r,) in stim.rises]
    assert len(bits) == len(stim) == 200
    assert bits[:2] == [1, 1] and bits[100:102] == [1, 1]  # each run's reset cycles
    assert 60 < sum(bits) < 150 and 0 in bits[2:100] and 0 in bits[102:]
    again = diffsim.random_stimulus(two, 77, seeds=2, cycles=100)
    assert again == stim and diffsim.random_stimulus(two, 78, seeds=2, cycles=100).rises != stim.rises
    lines = diffsim.stimulus_hex(two, stim).split()
    assert diffsim.stimulus_width(two) == 13 and all(len(x) == 4 for x in lines)
    assert [int(x, 16) & 1 for x in lines] == bits
    assert [int(x, 16) >> 1 for x in lines] == [(r << 11) | (a << 3) | b for r, a, b in stim.vectors]
    _, tb = diffsim.testbench(two, "0" * 16, len(stim), "stim.hex")
    assert "{in_rst_n, in_a, in_b, en_rclk} = rtlreward_stim[rtlreward_i];" in tb
    assert "if (en_rclk) clk_rclk = 1'b1;" in tb and "\n      clk_wclk = 1'b1;" in tb
    # A formal counterexample's replay raises every clock every frame, also before the random runs.
    replay = diffsim.directed_stimulus(two, [{"a": 1}] * 3)
    both = diffsim.concat(replay, stim)
    assert replay.rises == () and both.rises == ((1,),) * 3 + stim.rises
    assert [int(x, 16) & 1 for x in diffsim.stimulus_hex(two, both).split()] == [1, 1, 1, *bits]

    one = diffsim.SimPlan("top", INPUTS, OUTPUTS, ("clk",), reset, 2)
    single = diffsim.random_stimulus(one, 77, seeds=2, cycles=50, reset_probability=0.2)
    assert single.rises == ()
    assert list(single.vectors) == _old_stimulus(77, 2, 50, 0.2, 2)
    text = diffsim.stimulus_hex(one, single)
    assert text == "".join(
        f"{(r << 11) | (a << 3) | b:03x}\n" for r, a, b in _old_stimulus(77, 2, 50, 0.2, 2)
    )
    # the file the code before this change wrote for this plan and seed
    assert hashlib.sha256(text.encode()).hexdigest() == (
        "0ff8aa2070fdc06136654c2ce6df9626f133d14369f72e5dc75348f99b70848e"
    )
    _, tb = diffsim.testbench(one, "0" * 16, len(single), "stim.hex")
    assert "en_" not in tb and "reg [11:0] rtlreward_stim" in tb
