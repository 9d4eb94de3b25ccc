"""A synthetic reference-carrying corpus in a public corpus's shape, for tests, docs and the bench: parametrised
small designs (counters, muxes, adders, shifters, comparators, parity, sequence-detector FSMs) with varied widths,
names, reset styles and prompts. Written here from scratch; no public corpus's data is copied.

    python3 tests/corpus_gen.py -n 2000 --schema rtlcoder -o /tmp/corpus.jsonl [--seed 0] [--parquet]

About 3% of the problems are reworded copies of an earlier design (same text) and about 3% equivalent rewrites
(another text, same behaviour), so dedup has something to find.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

NAMES = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "omega",
    "sigma",
    "kappa",
    "zeta",
    "theta",
    "lambda_",
    "core",
    "unit",
]


def _clk(r: random.Random) -> str:
    return r.choice(["clk", "clock", "clk_i"])


def counter(r: random.Random, name: str) -> tuple[str, str, str]:
    w = r.randint(2, 16)
    clk = _clk(r)
    low = r.random() < 0.4
    rst = r.choice(["rst_n", "reset_n", "arst_n"]) if low else r.choice(["rst", "reset", "srst"])
    asyn = r.random() < 0.5
    en = r.choice(["en", "enable", "ce"]) if r.random() < 0.6 else None
    q = r.choice(["q", "count", "cnt"])
    down = r.random() < 0.25
    cond = f"!{rst}" if low else rst
    edge = f" or {'negedge' if low else 'posedge'} {rst}" if asyn else ""
    step = f"{q} - 1'b1" if down else f"{q} + 1'b1"
    inc = f"else if ({en}) {q} <= {step};" if en else f"else {q} <= {step};"
    ports = (
        [f"input {clk}", f"input {rst}"] + ([f"input {en}"] if en else []) + [f"output reg [{w - 1}:0] {q}"]
    )
    design = (
        f"module {name} ({', '.join(ports)});\n"
        f"  always @(posedge {clk}{edge}) begin\n    if ({cond}) {q} <= {w}'d0;\n    {inc}\n  end\nendmodule\n"
    )
    prompt = (
        f"Write a Verilog module `{name}` implementing a {w}-bit {'down' if down else 'up'} counter `{q}` clocked "
        f"on the rising edge of `{clk}`, with an {'asynchronous' if asyn else 'synchronous'} active-"
        f"{'low' if low else 'high'} reset `{rst}` that clears it to zero"
        + (f" and a count enable `{en}`." if en else ".")
    )
    return prompt, design, "easy" if w < 8 else "medium"


def mux(r: random.Random, name: str) -> tuple[str, str, str]:
    w = r.randint(1, 16)
    n = r.choice([2, 4])
    ins = [f"{r.choice(['in', 'd', 'a'])}{i}" for i in range(n)]
    sel = r.choice(["sel", "s", "select"])
    y = r.choice(["y", "out", "dout"])
    sw = 1 if n == 2 else 2
    rng = f"[{w - 1}:0] " if w > 1 else ""
    srng = f"[{sw - 1}:0] " if sw > 1 else ""
    ports = [f"input {rng}{i}" for i in ins] + [f"input {srng}{sel}", f"output {rng}{y}"]
    if n == 2:
        body = f"  assign {y} = {sel} ? {ins[1]} : {ins[0]};\n"
        if r.random() < 0.3:  # an equivalent rewrite
            ports[-1] = f"output reg {rng}{y}"
            body = f"  always @(*) begin\n    if ({sel}) {y} = {ins[1]};\n    else {y} = {ins[0]};\n  end\n"
    else:
        ports[-1] = f"output reg {rng}{y}"
        cases = "".join(f"      2'd{i}: {y} = {ins[i]};\n" for i in range(4))
        body = f"  always @(*) begin\n    case ({sel})\n{cases}    endcase\n  end\n"
    design = f"module {name} ({', '.join(ports)});\n{body}endmodule\n"
    prompt = (
        f"Implement `{name}`, a {n}-to-1 multiplexer of {w}-bit inputs {', '.join(ins)}: output `{y}` is the "
        f"input selected by `{sel}` (0 selects {ins[0]})."
    )
    return prompt, design, "easy"


def adder(r: random.Random, name: str) -> tuple[str, str, str]:
    w = r.randint(2, 24)
    a, b = r.choice([("a", "b"), ("x", "y"), ("op_a", "op_b")])
    s = r.choice(["sum", "s", "result"])
    co = r.choice(["cout", "carry", "co"]) if r.random() < 0.6 else None
    sub = r.random() < 0.2
    op = "-" if sub else "+"
    ports = [f"input [{w - 1}:0] {a}", f"input [{w - 1}:0] {b}", f"output [{w - 1}:0] {s}"]
    if co:
        ports.append(f"output {co}")
        if r.random() < 0.5:
            body = f"  assign {{{co}, {s}}} = {a} {op} {b};\n"
        else:
            body = f"  wire [{w}:0] full = {{1'b0, {a}}} {op} {{1'b0, {b}}};\n  assign {s} = full[{w - 1}:0];\n  assign {co} = full[{w}];\n"
    else:
        body = f"  assign {s} = {a} {op} {b};\n"
    design = f"module {name} ({', '.join(ports)});\n{body}endmodule\n"
    what = "subtractor" if sub else "adder"
    prompt = f"Design a {w}-bit {what} `{name}`: `{s}` = `{a}` {op} `{b}` (modulo 2^{w})" + (
        f", with the {'borrow' if sub else 'carry'} out of bit {w - 1} on `{co}`." if co else "."
    )
    return prompt, design, "easy" if w <= 8 else "medium"


def shifter(r: random.Random, name: str) -> tuple[str, str, str]:
    w = r.randint(3, 16)
    clk = _clk(r)
    load = r.choice(["load", "ld"])
    d = r.choice(["d", "data", "din"])
    si = r.choice(["si", "serial_in", "sin"])
    q = r.choice(["q", "sr", "shreg"])
    left = r.random() < 0.5
    nxt = f"{{{q}[{w - 2}:0], {si}}}" if left else f"{{{si}, {q}[{w - 1}:1]}}"
    design = (
        f"module {name} (input {clk}, input {load}, input [{w - 1}:0] {d}, input {si}, output reg [{w - 1}:0] {q});\n"
        f"  always @(posedge {clk}) begin\n    if ({load}) {q} <= {d};\n    else {q} <= {nxt};\n  end\nendmodule\n"
    )
    prompt = (
        f"Write `{name}`, a {w}-bit shift register `{q}`: on each rising edge of `{clk}`, when `{load}` is high "
        f"it loads `{d}`, otherwise it shifts {'left' if left else 'right'} by one, taking `{si}` into the "
        f"{'least' if left else 'most'} significant bit."
    )
    return prompt, design, "medium"


def compare(r: random.Random, name: str) -> tuple[str, str, str]:
    w = r.randint(2, 16)
    eq, gt, lt = r.choice([("eq", "gt", "lt"), ("equal", "greater", "less"), ("a_eq_b", "a_gt_b", "a_lt_b")])
    design = (
        f"module {name} (input [{w - 1}:0] a, input [{w - 1}:0] b, output {eq}, output {gt}, output {lt});\n"
        f"  assign {eq} = (a == b);\n  assign {gt} = (a > b);\n  assign {lt} = (a < b);\nendmodule\n"
    )
    prompt = f"Create `{name}`, an unsigned {w}-bit magnitude comparator of `a` and `b` with outputs `{eq}`, `{gt}` and `{lt}`."
    return prompt, design, "easy"


def parity(r: random.Random, name: str) -> tuple[str, str, str]:
    w = r.randint(2, 32)
    odd = r.random() < 0.5
    d = r.choice(["data", "d", "in"])
    p = r.choice(["parity", "p", "par"])
    expr = f"^{d}" if not odd else f"~^{d}"
    design = f"module {name} (input [{w - 1}:0] {d}, output {p});\n  assign {p} = {expr};\nendmodule\n"
    prompt = (
        f"Write `{name}`: `{p}` is the {'odd' if odd else 'even'} parity bit of the {w}-bit input `{d}` "
        f"(1 when the number of ones in `{d}` is {'even' if odd else 'odd'})."
    )
    return prompt, design, "easy"


def fsm(r: random.Random, name: str) -> tuple[str, str, str]:
    n = r.randint(2, 4)
    pattern = [r.randint(0, 1) for _ in range(n)]
    clk = _clk(r)
    rst = r.choice(["rst", "reset"])
    x = r.choice(["x", "din", "bit_in"])
    z = r.choice(["z", "found", "match"])
    sw = max(1, n.bit_length())
    lines = []
    for s in range(n + 1):
        bit = pattern[s] if s < n else pattern[0]
        # Moore detector without overlap: state s has matched s bits; state n raises z.
        nxt_hit = s + 1 if s < n else 1
        fallback = 1 if pattern[0] == (1 - bit) else 0
        lines.append(f"      {sw}'d{s}: state <= ({x} == 1'b{bit}) ? {sw}'d{nxt_hit} : {sw}'d{fallback};\n")
    pat = "".join(map(str, pattern))
    design = (
        f"module {name} (input {clk}, input {rst}, input {x}, output {z});\n"
        f"  reg [{sw - 1}:0] state;\n"
        f"  always @(posedge {clk}) begin\n    if ({rst}) state <= {sw}'d0;\n    else case (state)\n"
        + "".join(lines)
        + f"      default: state <= {sw}'d0;\n    endcase\n  end\n"
        f"  assign {z} = (state == {sw}'d{n});\nendmodule\n"
    )
    prompt = (
        f"Implement `{name}`, a Moore FSM that watches serial input `{x}` (one bit per rising edge of `{clk}`) "
        f"and raises `{z}` for one cycle after it has seen the pattern {pat}; synchronous active-high reset "
        f"`{rst}`."
    )
    return prompt, design, "hard"


KINDS = {
    "counter": counter,
    "mux": mux,
    "adder": adder,
    "shifter": shifter,
    "compare": compare,
    "parity": parity,
    "fsm": fsm,
}
WEIGHTS = {"counter": 3, "mux": 3, "adder": 3, "shifter": 2, "compare": 1, "parity": 1, "fsm": 2}


def problems(n: int, seed: int = 0) -> list[dict]:
    """n problems as generic records: id, prompt, reference, difficulty, tags."""
    r = random.Random(seed)
    kinds = [k for k, w in WEIGHTS.items() for _ in range(w)]
    out: list[dict] = []
    for i in range(n):
        if out and r.random() < 0.03:  # a reworded copy of an earlier problem
            src = r.choice(out)
            out.append({**src, "id": f"p{i:05d}", "prompt": "Please design the following. " + src["prompt"]})
            continue
        kind = r.choice(kinds)
        name = f"{r.choice(NAMES)}_{kind}_{i}"
        prompt, design, difficulty = KINDS[kind](r, name)
        out.append(
            {
                "id": f"p{i:05d}",
                "prompt": prompt,
                "reference": design,
                "difficulty": difficulty,
                "tags": [kind],
            }
        )
    return out


def in_schema(rec: dict, schema: str) -> dict:
    """A generic record in a public corpus's field names (docs/corpora.md)."""
    if schema == "generic":
        return rec
    if schema == "rtlcoder":
        header = rec["reference"].split(";", 1)[0] + ";"
        return {"Instruction": rec["prompt"], "Input": header, "Response": [rec["reference"]]}
    if schema == "verithoughts":
        return {
            "question": rec["prompt"],
            "ground_truth": f"CODE BEGIN\n{rec['reference']}CODE END",
            "verified": True,
        }
    if schema == "codev-r1":
        return {
            "data_source": "codev",
            "prompt": [
                {"role": "system", "content": "You write Verilog."},
                {"role": "user", "content": rec["prompt"]},
            ],
            "ability": "verilog",
            "reward_model": {"style": "rule", "ground_truth": rec["reference"]},
            "extra_info": {"split": "train", "index": rec["id"]},
        }
    raise ValueError(f"unknown schema {schema}")


def write(path: str | Path, records: list[dict], schema: str = "generic") -> Path:
    path = Path(path)
    rows = [in_schema(r, schema) for r in records]
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--schema", default="generic", choices=["generic", "rtlcoder", "verithoughts", "codev-r1"]
    )
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args()
    write(args.out, problems(args.n, args.seed), args.schema)


if __name__ == "__main__":
    main()
