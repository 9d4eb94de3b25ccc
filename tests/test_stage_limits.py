"""An answer that runs a stage's tool into a limit fails that stage, naming the limit; it never turns into `error`
nor takes the scoring process down (issue 20).

With the real tools, on the arbiter example: a flattened hierarchy of 10^7 cells runs Verilator (lint) and Icarus
(compile) out of a small memory limit, a constant function that recurses 10^8 deep crashes Icarus (stack), and
`define macros that double 30 times or nest 300 deep are refused before pyslang (which runs in this process, for
the interface stage, the equivalence stage's port list and the safety gate's stand-in view) expands them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hdl_stage_helpers import example_task, make_ctx
from sandbox_helpers import sim_docker_executor

from rtlreward.model import Status
from rtlreward.sandbox.local import LocalExecutor

needs_icarus = pytest.mark.skipif(shutil.which("iverilog") is None, reason="needs Icarus Verilog")
PATH = "rtl/fixed_priority_arbiter.sv"
HEADER = (
    "module fixed_priority_arbiter (input logic clk, input logic rst_n, input logic [3:0] req, "
    "output logic [3:0] grant);\n"
)
BODY = (
    "  always_ff @(posedge clk or negedge rst_n) begin\n"
    "    if (!rst_n) grant <= 4'b0000;\n"
    "    else grant <= req & (~req + 4'b0001);\n"
    "  end\n"
)


def design(line: str = "", before: str = "", after: str = "") -> str:
    return before + HEADER + line + BODY + "endmodule\n" + after


def _flatten() -> str:
    levels = []
    for k in range(7):  # 10^7 leaf assigns once elaborated
        inner = "".join(f"  lvl{k - 1} u{j} (.x(x), .y(t[{j}]));\n" for j in range(10)) if k else ""
        leaf = "" if k else "  assign t = {10{x}};\n"
        levels.append(
            f"module lvl{k} (input [3:0] x, output [3:0] y);\n  wire [3:0] t [0:9];\n{inner}{leaf}"
            "  assign y = t[0] ^ t[9];\nendmodule\n"
        )
    return design("  wire [3:0] fy;\n  lvl6 u_top (.x(req), .y(fy));\n", after="".join(levels))


RECURSION = design(
    "  function automatic integer deep(input integer n);\n"
    "    if (n <= 0) deep = 0; else deep = deep(n - 1) + 1;\n"
    "  endfunction\n"
    "  localparam integer P = deep(100000000);\n"
    "  wire [31:0] pw = P;\n"
)
DOUBLING = design(
    "  wire mw = `D30;\n",
    before="`define D0 1'b0\n" + "".join(f"`define D{i} (`D{i - 1} | `D{i - 1})\n" for i in range(1, 31)),
)
NESTED = design(
    "  wire mc = `C299;\n",
    before="`define C0 1'b0\n" + "".join(f"`define C{i} `C{i - 1}\n" for i in range(1, 300)),
)


def _run(stage, text: str, tmp: Path, executor=None, memory_mb: int | None = None):
    ctx = make_ctx(
        example_task("fixed_priority_arbiter"), {PATH: text}, tmp, executor or LocalExecutor(), timeout=20
    )
    if memory_mb is not None:
        ctx.memory_mb = memory_mb
    return stage.run(ctx)


def _limit(res, limit: str, words: str):
    assert res.status is Status.FAILED, (res.status, [d.message for d in res.diagnostics])
    found = [d for d in res.diagnostics if d.code == "resource-limit"]
    assert found, [(d.code, d.message) for d in res.diagnostics]
    assert found[0].fields["limit"] == limit
    assert words in found[0].message, found[0].message
    return found[0]


# -- lint (Verilator) and compile (Icarus) ------------------------------------------------------------------------
def test_lint_design_that_runs_verilator_out_of_memory_fails(tmp_path: Path):
    from rtlreward_lint import LintStage

    res = _run(LintStage(), _flatten(), tmp_path, memory_mb=256)
    _limit(res, "memory", "memory limit (256 MiB)")
    assert res.metrics["resource_limit"] == "memory"


@needs_icarus
def test_compile_design_that_runs_icarus_out_of_memory_names_the_limit(tmp_path: Path):
    from rtlreward_compile import CompileStage

    res = _run(CompileStage(), _flatten(), tmp_path, memory_mb=256)
    d = _limit(res, "memory", "memory limit (256 MiB)")
    assert "Icarus" in d.message


@needs_icarus
def test_compile_design_whose_recursion_crashes_icarus_names_the_stack(tmp_path: Path):
    from rtlreward_compile import CompileStage

    res = _run(CompileStage(), RECURSION, tmp_path)
    _limit(res, "stack", "stack limit")


@needs_icarus
def test_compile_reference_still_passes_under_the_small_limit(tmp_path: Path):
    from rtlreward_compile import CompileStage

    assert _run(CompileStage(), design(), tmp_path, memory_mb=256).status is Status.PASSED


@pytest.mark.docker
def test_compile_in_docker_design_whose_recursion_crashes_icarus_fails(tmp_path: Path):
    ex = sim_docker_executor()
    from rtlreward_compile import CompileStage

    try:
        res = _run(CompileStage(), RECURSION, tmp_path, executor=ex)
    finally:
        ex.close()
    _limit(res, "stack", "stack limit")


# -- pyslang in this process: interface, equivalence's port list, the safety gate's stand-in view ------------------
@pytest.mark.parametrize(
    ("text", "limit"), [(DOUBLING, "macro_expansion"), (NESTED, "macro_depth")], ids=["doubling", "nested"]
)
def test_interface_refuses_macros_past_the_limit(text, limit, tmp_path: Path):
    from rtlreward_interface import InterfaceStage

    res = _run(InterfaceStage(), text, tmp_path)
    _limit(res, limit, "macro")
    assert res.score == 0.0


@pytest.mark.parametrize(("text", "limit"), [(DOUBLING, "macro_expansion"), (NESTED, "macro_depth")])
def test_equivalence_refuses_macros_past_the_limit(text, limit, tmp_path: Path):
    from rtlreward_equivalence import EquivalenceStage

    res = _run(EquivalenceStage(), text, tmp_path)
    _limit(res, limit, "macro")
    assert res.metrics["equivalence"] == "unknown"


def test_slang_stand_in_view_refuses_macros_past_the_limit():
    from rtlreward_hdl.preprocess import slang_view

    view = slang_view({PATH: NESTED})
    assert not view.ok and "macro nesting limit" in view.problem
    assert slang_view({PATH: design()}).ok


def test_macro_bound_leaves_ordinary_macros_alone():
    from rtlreward_hdl.slang import MAX_MACRO_TOKENS, macro_expansion

    ordinary = design(
        "  wire [7:0] w = `C(1) + `C(`C(2));\n",
        before="`define A(x) (x+x)\n`define B(y) `A(`A(y))\n`define C(z) `B(`B(z))\n`define W 8\n",
    )
    tokens, depth = macro_expansion([ordinary])
    assert tokens < 5000 and depth <= 6
    assert macro_expansion([DOUBLING])[0] > MAX_MACRO_TOKENS
    # nested function-like calls double too
    calls = design("  wire w = " + "`DBL(" * 40 + "1" + ")" * 40 + ";\n", before="`define DBL(x) x x\n")
    assert macro_expansion([calls])[0] > MAX_MACRO_TOKENS


# A chain of 10,000 macros, each naming the next, used deepest first: the depth a macro reaches below its use must
# not be remembered as the depth it was first measured at (red-team: the bound read 100 where the chain is 10,001
# deep, and pyslang overflowed its stack in the scoring process: exit 139 under `equiv` and `shaped`).
DEEP_FIRST = design(
    "  wire mz = " + " | ".join(f"`c{i}" for i in range(9950, -1, -100)) + ";\n",
    before="".join(f"`define c{i} `c{i + 1}\n" for i in range(10_000)) + "`define c10000 1'b0\n",
)


def test_macro_depth_reused_deeper_down_is_counted_from_where_it_is_used():
    from rtlreward_hdl.slang import MAX_MACRO_DEPTH, ExpansionTooLarge, check_expansion, macro_expansion

    assert macro_expansion([DEEP_FIRST])[1] > MAX_MACRO_DEPTH
    with pytest.raises(ExpansionTooLarge) as refused:
        check_expansion([DEEP_FIRST])
    assert refused.value.limit == "macro_depth"


def test_macro_depth_is_exact_on_random_acyclic_macros():
    """Random macro graphs (each body names later macros or plain tokens), used in random order: the bound's depth
    is the true nesting depth, however the uses share macros."""
    import functools
    import random

    from rtlreward_hdl.slang import macro_expansion

    rng = random.Random(11)
    for _ in range(400):
        n = rng.randint(1, 40)
        bodies = [
            [
                f"`m{rng.randint(i + 1, n - 1)}" if i + 1 < n and rng.random() < 0.7 else "x"
                for _ in range(rng.randint(0, 4))
            ]
            for i in range(n)
        ]

        @functools.cache
        def depth(i: int, bodies=bodies) -> int:
            return 1 + max((depth(int(t[2:])) for t in bodies[i] if t.startswith("`")), default=0)

        uses = [rng.randrange(n) for _ in range(rng.randint(1, 6))]
        text = "".join(f"`define m{i} {' '.join(b)}\n" for i, b in enumerate(bodies))
        text += "module t; " + " ".join(f"`m{u}" for u in uses) + " endmodule\n"
        assert macro_expansion([text])[1] == max(depth(u) for u in uses), text


@needs_icarus
def test_equivalence_answer_that_crashes_icarus_fails_naming_the_stack(tmp_path: Path):
    from rtlreward_equivalence import EquivalenceStage

    res = _run(EquivalenceStage(), RECURSION, tmp_path)
    _limit(res, "stack", "crashed Icarus")
    assert res.metrics["equivalence"] == "unknown" and res.score == 0.0
