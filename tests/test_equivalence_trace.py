"""The differential simulation's reading of a run's output and its comparison (rtlreward_equivalence.diffsim):
only the testbench's own lines count, at their declared widths, the first per cycle and phase; a cycle without a
sample mismatches every defined bit; an x of the reference is a don't-care."""

from __future__ import annotations

from rtlreward_equivalence import diffsim
from rtlreward_equivalence.design import PortInfo

NONCE = "0123456789abcdef"
PLAN = diffsim.SimPlan(
    "t",
    (PortInfo("a", "input", 4, True),),
    (PortInfo("q", "output", 4, True), PortInfo("z", "output", 1, True)),
    ("clk",),
    None,
    1,
)
STIM = diffsim.Stimulus(tuple((i,) for i in range(4)))


def test_only_the_testbenchs_lines_at_their_widths_are_read():
    out = "\r\n".join(
        [
            f"@{NONCE} 0 0101 1",
            f"@{NONCE}h 0 0110 0   ",
            f"@{NONCE} 0 1111 1",  # a second sample of cycle 0: the first counts
            f"@{NONCE} 1 010 1",  # 3 bits where 4 are declared: not the testbench's
            f"@{NONCE} 1 0101 1 0",  # one value too many
            "@fedcba9876543210 1 0000 0",  # another nonce
            f"the design wrote this first @{NONCE} 1 10X1 Z",  # a line the design began: the tail counts, in lower case
            f"@{NONCE} 2 0101",  # one value too few
            f"@{NONCE} 9 0000 0",  # past the stimulus
            f"@{NONCE}h end",  # the high phase's end does not complete the run
        ]
    )
    low, high = diffsim.parse_phases(out, NONCE, PLAN, len(STIM))
    assert low.samples == (("0101", "1"), ("10x1", "z"), None, None)
    assert high is not None and high.samples == (("0110", "0"), None, None, None)
    assert not low.complete and not high.complete
    low, high = diffsim.parse_phases(out + f"\n@{NONCE} end\n", NONCE, PLAN, len(STIM))
    assert low.complete and high.complete


def test_a_plan_without_a_clock_has_no_high_phase():
    plan = diffsim.SimPlan("t", PLAN.inputs, PLAN.outputs[1:], (), None, 1)
    low, high = diffsim.parse_phases(f"@{NONCE} 0 1\n@{NONCE}h 1 1\n@{NONCE} end", NONCE, plan, 2)
    assert low.samples == (("1",), None) and low.complete and high is None


def test_comparison_counts_defined_bits_and_treats_reference_x_as_dont_care():
    gold = diffsim.Trace((("01x1", "1"), ("0101", "0"), ("0000", "z"), ("1111", "1")), True)
    gate = diffsim.Trace((("0111", "1"), ("0101", "0"), ("0001", "1"), None), False)
    c = diffsim.compare(PLAN, STIM, gold, gate)
    # cycle 0: only the reference's x differs (a don't-care); 1: the same text; 2: q[0] differs, z is a
    # don't-care; 3: no sample, so every defined bit differs
    assert c.first is not None and c.first.cycle == 2 and c.first.differing == ("q",)
    assert c.mismatched_bits == {"q": frozenset({0, 1, 2, 3}), "z": frozenset({0})}
    assert c.compared_cycles == 4 and c.defined_bits == 4 + 5 + 4 + 5
    same = diffsim.compare(PLAN, STIM, gold, gold)
    assert same.first is None and same.defined_bits == c.defined_bits
    assert all(not bits for bits in same.mismatched_bits.values())


def _per_bit(plan, stim, gold, gate):
    """The comparison's rule, bit by bit: (bits that ever differed per output, first differing cycle and outputs,
    cycles compared, reference bits that were 0/1), and the constant stub's share."""
    bad = {p.name: set() for p in plan.outputs}
    first, compared, defined = None, 0, 0
    seen = [set() for _ in range(plan.output_bits)]
    for c in range(stim.compare_from, len(stim)):
        g = gold.samples[c] if c < len(gold.samples) else None
        if g is None:
            continue
        a = gate.samples[c] if c < len(gate.samples) else None
        compared += 1
        differing, k = [], 0
        for i, p in enumerate(plan.outputs):
            w = len(g[i])
            for j, gb in enumerate(g[i]):
                if gb in "01":
                    defined += 1
                    seen[k].add(gb)
                    if a is None or a[i][j] != gb:
                        bad[p.name].add(w - 1 - j)
                        if p.name not in differing:
                            differing.append(p.name)
                k += 1
        if differing and first is None:
            first = (c, tuple(differing))
    share = sum(1 for s in seen if len(s) < 2) / plan.output_bits
    return {k: frozenset(v) for k, v in bad.items()}, first, compared, defined, share


def test_the_integer_comparison_is_the_per_bit_rule():
    """`compare` and `constant_share` read each sample as integers; on random traces (x and z in both, missing
    samples, traces shorter or longer than the stimulus) they give what the per-bit rule gives."""
    import random

    rng = random.Random(7)
    for _ in range(1500):
        outs = tuple(
            PortInfo(f"o{i}", "output", rng.choice([None, 1, 2, 3, 8, 33, 65]), True)
            for i in range(rng.randint(1, 4))
        )
        plan = diffsim.SimPlan("t", (), outs, (), None, 1)
        n = rng.randint(1, 30)
        stim = diffsim.Stimulus(tuple(() for _ in range(n)), (0,), compare_from=rng.randint(0, 2))

        def row(alphabet, outs=outs):
            return tuple("".join(rng.choice(alphabet) for _ in range(p.width or 1)) for p in outs)

        gold_alphabet = rng.choice(["01", "01xz", "0", "1x"])
        gold = diffsim.Trace(
            tuple(None if rng.random() < 0.05 else row(gold_alphabet) for _ in range(rng.randint(0, n + 2))),
            True,
        )
        gate_samples = []
        for c in range(rng.randint(0, n + 2)):
            r = rng.random()
            if r < 0.05:
                gate_samples.append(None)
            elif r < 0.5 and c < len(gold.samples) and gold.samples[c] is not None:
                gate_samples.append(gold.samples[c])
            else:
                gate_samples.append(row(rng.choice(["01", "01xz", "10"])))
        gate = diffsim.Trace(tuple(gate_samples), True)
        bad, first, compared, defined, share = _per_bit(plan, stim, gold, gate)
        got = diffsim.compare(plan, stim, gold, gate)
        assert (got.mismatched_bits, got.compared_cycles, got.defined_bits) == (bad, compared, defined)
        assert (got.first.cycle, got.first.differing) == first if first else got.first is None
        if got.first is not None:
            c = got.first.cycle
            assert got.first.expected == {p.name: gold.samples[c][i] for i, p in enumerate(outs)}
        assert diffsim.constant_share(plan, stim, gold) == share
