"""The interface stage and `expected_interface`: every missing/extra/mismatched port named, partial credit,
parameterised widths, and the expected interface derived from task / reference / spec / harness."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from format_helpers import run_stage

from rtlreward.model import Harness, Interface, Port, Status, Task
from rtlreward_interface import expected_interface, harness_signals, parse_modules

REF = """module fifo #(parameter WIDTH = 8, parameter DEPTH = 16) (
  input  logic             clk,
  input  logic             rst_n,
  input  logic             push,
  input  logic [WIDTH-1:0] din,
  input  logic             pop,
  output logic [WIDTH-1:0] dout,
  output logic             full,
  output logic             empty
);
endmodule
"""
TASK = Task(id="fifo", expected_files=["rtl/fifo.sv"], toplevel="fifo", reference={"rtl/fifo.sv": REF})


def iface(tmp_path, src, task=TASK):
    return run_stage("interface", tmp_path, task, files={"rtl/fifo.sv": src})


def test_reference_matches_itself(tmp_path):
    r = iface(tmp_path, REF)
    assert r.status is Status.PASSED and r.score == 1.0
    assert r.metrics["interface_source"] == "reference" and r.metrics["ports_matched"] == 8


def test_parse_modules_elaborates_default_parameters():
    ports = {p.name: p for p in parse_modules({"rtl/fifo.sv": REF})["fifo"].ports}
    assert ports["din"] == Port("din", "input", 8) and ports["dout"] == Port("dout", "output", 8)
    assert ports["clk"].width == 1 and ports["full"].direction == "output"


def test_renamed_ports_each_named(tmp_path):
    renamed = (
        REF.replace("rst_n", "reset")
        .replace("push", "wr_en")
        .replace("pop", "rd_en")
        .replace("dout", "data_out")
    )
    r = iface(tmp_path, renamed)
    assert r.status is Status.FAILED
    assert r.score == pytest.approx(4 / 8)
    missing = {
        re.match(r"missing port \w+ (\w+)", d.message).group(1)
        for d in r.diagnostics
        if d.code == "interface.port_missing"
    }
    assert missing == {"rst_n", "push", "pop", "dout"}
    extra = " ".join(d.message for d in r.diagnostics if d.code == "interface.port_extra")
    for name in ("reset", "wr_en", "rd_en", "data_out"):
        assert name in extra and name in r.feedback
    assert r.metrics["ports_missing"] == 4 and r.metrics["ports_extra"] == 4
    assert all(
        d.file == "rtl/fifo.sv" and d.line == 1 for d in r.diagnostics if d.code == "interface.port_missing"
    )


def test_width_mismatch_half_credit(tmp_path):
    r = iface(tmp_path, REF.replace("output logic [WIDTH-1:0] dout", "output logic [3:0] dout"))
    assert r.status is Status.FAILED and r.score == pytest.approx(7.5 / 8)
    (d,) = [d for d in r.diagnostics if d.code == "interface.width_mismatch"]
    assert "dout" in d.message and "width 4, expected 8" in d.message
    assert d.fields == {
        "port": "dout",
        "direction": "output",
        "width": 8,
        "actual_direction": "output",
        "actual_width": 4,
    }


def test_direction_mismatch_half_credit(tmp_path):
    r = iface(tmp_path, REF.replace("output logic             full", "input  logic             full"))
    assert r.score == pytest.approx(7.5 / 8)
    assert any("full" in d.message and "direction input, expected output" in d.message for d in r.diagnostics)
    (d,) = [d for d in r.diagnostics if d.code == "interface.direction_mismatch"]
    assert d.fields["port"] == "full" and (d.fields["direction"], d.fields["actual_direction"]) == (
        "output",
        "input",
    )


def test_both_wrong_no_credit(tmp_path):
    r = iface(tmp_path, REF.replace("output logic [WIDTH-1:0] dout", "input logic [1:0] dout"))
    assert r.score == pytest.approx(7 / 8)


def test_parameterised_candidate_with_other_default_is_a_width_mismatch(tmp_path):
    r = iface(tmp_path, REF.replace("WIDTH = 8", "WIDTH = 16"))
    assert {d.message.split(":")[0] for d in r.diagnostics if d.code == "interface.width_mismatch"} == {
        "port din",
        "port dout",
    }


def test_candidate_without_parameters_but_same_widths_passes(tmp_path):
    flat = REF.replace("#(parameter WIDTH = 8, parameter DEPTH = 16) ", "").replace("[WIDTH-1:0]", "[7:0]")
    assert iface(tmp_path, flat).status is Status.PASSED


def test_wrong_module_name_scores_zero_and_names_what_was_found(tmp_path):
    r = iface(tmp_path, REF.replace("module fifo", "module sync_fifo"))
    assert r.status is Status.FAILED and r.score == 0.0
    assert "no module named fifo" in r.feedback and "sync_fifo" in r.feedback


def test_syntax_error_reported_and_not_passed(tmp_path):
    """A design that does not parse earns no interface credit (a stub with the right header and a broken body
    must not earn what a working design does); the error is reported, not hidden."""
    broken = REF.replace("endmodule", "  assign x = ;\nendmodule")
    r = iface(tmp_path, broken)
    assert r.status is Status.FAILED and r.score == 0.0
    assert r.metrics["ports_matched"] == r.metrics["ports_expected"]  # the ports themselves were recovered
    assert r.metrics["parse_errors"] >= 1 and any(d.code == "interface.syntax" for d in r.diagnostics)


def test_task_interface_takes_precedence(tmp_path):
    declared = Interface("fifo", (Port("clk", "input", 1), Port("valid", "output", 1)))
    task = Task(
        id="t",
        expected_files=["rtl/fifo.sv"],
        toplevel="fifo",
        interface=declared,
        reference={"rtl/fifo.sv": REF},
    )
    assert expected_interface(task).source == "task"
    r = iface(tmp_path, REF, task)
    assert r.score == 0.5 and "missing port output valid" in r.feedback


SPEC = """Design a FIFO.

```systemverilog
module fifo #(parameter WIDTH = 4) (
    input  logic             clk,
    input  logic             rst_n,
    input  logic [WIDTH-1:0] din,
    output logic [WIDTH-1:0] dout
);
```
Example instantiation:
```verilog
fifo #(.WIDTH(4)) u_fifo (.clk(clk), .rst_n(rst_n), .din(d), .dout(q));
```
"""


def test_expected_interface_from_spec_header_block():
    task = Task(id="spec", prompt=SPEC, expected_files=["rtl/fifo.sv"], toplevel="fifo")
    exp = expected_interface(task)
    assert exp.source == "spec" and exp.module == "fifo"
    assert {p.name: (p.direction, p.width) for p in exp.ports} == {
        "clk": ("input", 1),
        "rst_n": ("input", 1),
        "din": ("input", 4),
        "dout": ("output", 4),
    }


def test_reference_beats_spec():
    task = Task(
        id="both",
        prompt=SPEC,
        expected_files=["rtl/fifo.sv"],
        toplevel="fifo",
        reference={"rtl/fifo.sv": REF},
    )
    assert expected_interface(task).source == "reference"


HARNESS_PY = """
import cocotb
from cocotb.triggers import RisingEdge

@cocotb.test()
async def test_fifo(dut):
    dut._log.info("start")
    dut.rst_n.value = 0
    dut.push.value = 1
    dut["din"].value = 3
    await RisingEdge(dut.clk)
    assert getattr(dut, "dout").value == 3
    assert dut.count.value == 1   # an internal signal, read by hierarchy
    assert dut.empty.value.is_resolvable
"""


def harness_task(**kw):
    return Task(
        id="h",
        expected_files=["rtl/fifo.sv"],
        toplevel="fifo",
        harness=Harness(
            kind="cocotb", files={"tests/test_fifo.py": HARNESS_PY, "tests/runner.py": "x = 1\n"}
        ),
        **kw,
    )


def test_harness_signals_from_cocotb_tests():
    assert harness_signals(harness_task()) == ["rst_n", "push", "din", "clk", "dout", "count", "empty"]


def test_expected_interface_from_harness_compares_names(tmp_path):
    task = harness_task()
    exp = expected_interface(task)
    assert exp.source == "harness" and all(p.direction == "unknown" for p in exp.ports)
    cand = REF.replace("endmodule", "  logic [4:0] count;\nendmodule").replace("rst_n", "rstn")
    r = iface(tmp_path, cand, task)
    assert r.score == pytest.approx(6 / 7)
    assert [d.message for d in r.diagnostics if d.code == "interface.port_missing"] == [
        "missing port rst_n (the answer has rstn)"
    ]
    assert any(d.code == "interface.internal_signal" and "count" in d.message for d in r.diagnostics)
    assert r.metrics["ports_extra"] == 0  # the harness touches a subset: other ports are not "extra"


def test_no_expected_interface_passes_and_says_so(tmp_path):
    task = Task(
        id="none", expected_files=["rtl/fifo.sv"], toplevel="fifo", prompt="Design a FIFO, any ports."
    )
    assert expected_interface(task) is None
    r = iface(tmp_path, REF, task)
    assert r.status is Status.PASSED and r.score == 1.0 and r.metrics["interface_known"] == 0
    assert any(d.code == "interface.unknown" for d in r.diagnostics)


def test_context_header_defines_widths(tmp_path):
    task = Task(
        id="ctx",
        expected_files=["rtl/top.sv"],
        toplevel="top",
        context={"rtl/defs.vh": "`define W 12\n"},
        reference={"rtl/top.sv": '`include "defs.vh"\nmodule top(input [`W-1:0] a, output y); endmodule\n'},
    )
    assert expected_interface(task).ports[0] == Port("a", "input", 12)
    cand = '`include "defs.vh"\nmodule top(input [`W-1:0] a, output y); endmodule\n'
    assert run_stage("interface", tmp_path, task, files={"rtl/top.sv": cand}).status is Status.PASSED


def test_multi_module_answer_top_found_in_second_file(tmp_path):
    task = Task(
        id="mm",
        expected_files=["rtl/a.sv", "rtl/b.sv"],
        toplevel="top",
        reference={
            "rtl/a.sv": "module top(input x, output y); leaf l(.x(x), .y(y)); endmodule\n",
            "rtl/b.sv": "module leaf(input x, output y); assign y = x; endmodule\n",
        },
    )
    files = {
        "rtl/a.sv": "module leaf(input x, output y); assign y = x; endmodule\n",
        "rtl/b.sv": "module top(input x, output y); leaf l(.x(x), .y(y)); endmodule\n",
    }
    r = run_stage("interface", tmp_path, task, files=files)
    assert r.status is Status.PASSED


CVDP = Path(__file__).parents[1].parent / "shared" / "data" / "cvdp"


def test_cvdp_example_reference_and_harness():
    """The official v1.1.0 non-agentic example: the reference's module is found by the harness's TOPLEVEL, and
    the names its cocotb tests touch are all ports of that reference."""
    import json

    path = CVDP / "cvdp_v1.1.0_example_nonagentic_code_generation_no_commercial_with_solutions.jsonl"
    if not path.exists():
        pytest.skip("../shared/data/cvdp is absent")
    rec = json.loads(path.read_text().splitlines()[0])
    env = rec["harness"]["files"].get("src/.env", "")
    top = next(
        v.strip() for k, _, v in (ln.partition("=") for ln in env.splitlines()) if k.strip() == "TOPLEVEL"
    )
    ref = {k: v for k, v in rec["output"]["context"].items() if k.endswith((".sv", ".v"))}
    harness = Harness(kind="cvdp", files=rec["harness"]["files"])
    from_ref = expected_interface(Task(id=rec["id"], toplevel=top, reference=ref, harness=harness))
    from_harness = expected_interface(Task(id=rec["id"], toplevel=top, harness=harness))
    assert from_ref.source == "reference" and from_ref.module == top and from_ref.ports
    assert from_harness is not None and from_harness.source == "harness"
    ref_names = {p.name for p in from_ref.ports}
    assert {p.name for p in from_harness.ports} <= ref_names


def test_stage_metadata():
    from rtlreward.plugins import get_registry

    stage = get_registry().stages()["interface"]
    assert stage.requires == ("safety",) and not hasattr(stage, "weight")
    assert "pyslang" in stage.tool_versions()


def test_harness_comments_strings_and_helper_libraries_do_not_count():
    files = {
        "src/test_top.py": "# drive dut.Clk here\nasync def t(dut):\n    x = 'dut.bogus'\n    dut.clk.value = 1\n",
        "src/harness_library.py": "async def reset_dut(dut):\n    dut.reset.value = 1\n",
        "src/test_runner.py": "import os\n",
        "src/.env": "TOPLEVEL = top\nMODULE = test_top\n",
    }
    task = Task(id="lib", toplevel="top", harness=Harness(kind="cvdp", files=files))
    assert harness_signals(task) == ["clk"]


SPEC_STALE = """Design the controller.
```verilog
module ctrl (input clk, input rst_n, output m0_read, input [31:0] m0_data);
```
"""


def test_spec_out_of_step_with_harness_defers_to_harness_names():
    """A spec whose header names `m0_read` while its harness drives `m0_ready`: the harness is the judge, with
    the spec's widths and directions kept where the names agree."""
    py = "async def t(dut):\n    dut.rst_n.value = 0\n    await RisingEdge(dut.clk)\n    dut.m0_ready.value\n"
    py += "    dut.m0_data.value = 5\n"
    task = Task(
        id="stale",
        prompt=SPEC_STALE,
        toplevel="ctrl",
        harness=Harness(kind="cocotb", files={"tests/test_ctrl.py": py}),
    )
    exp = expected_interface(task)
    assert exp.source == "spec+harness"
    assert {p.name: (p.direction, p.width) for p in exp.ports} == {
        "rst_n": ("input", 1),
        "clk": ("input", 1),
        "m0_ready": ("unknown", None),
        "m0_data": ("input", 32),
    }
    consistent = Task(
        id="ok",
        prompt=SPEC_STALE.replace("m0_read", "m0_ready"),
        toplevel="ctrl",
        harness=Harness(kind="cocotb", files={"tests/test_ctrl.py": py}),
    )
    assert expected_interface(consistent).source == "spec"


VE_PROMPT = """I would like you to implement a module named TopModule with the following
interface. All input and output ports are one bit unless otherwise
specified.

 - input  clk
 - input  in   (8 bits)
 - output anyedge ( 8 bits)
 - output done

The module should detect edges.
"""


def test_expected_interface_from_verilog_eval_prose():
    exp = expected_interface(Task(id="ve", prompt=VE_PROMPT, toplevel="TopModule"))
    assert exp.source == "spec" and exp.module == "TopModule"
    assert [(p.name, p.direction, p.width) for p in exp.ports] == [
        ("clk", "input", 1),
        ("in", "input", 8),
        ("anyedge", "output", 8),
        ("done", "output", 1),
    ]


VE = Path(__file__).parents[1].parent / "shared" / "data" / "verilog-eval" / "dataset_spec-to-rtl"


def test_verilog_eval_references_match_their_prose_interfaces():
    """Across VerilogEval, the interface read from the prose spec agrees with the reference (renamed to
    TopModule) except for Prob031, whose spec lists `q` as an input while the reference makes it an output."""
    if not VE.exists():
        pytest.skip("../shared/data/verilog-eval is absent")
    mismatched = []
    for prompt in sorted(VE.glob("*_prompt.txt")):
        pid = prompt.name.removesuffix("_prompt.txt")
        exp = expected_interface(Task(id=pid, prompt=prompt.read_text(), toplevel="TopModule"))
        if exp is None:
            continue
        ref = (VE / f"{pid}_ref.sv").read_text().replace("RefModule", "TopModule")
        got = parse_modules({"ref.sv": ref})["TopModule"]
        if {(p.name, p.direction, p.width) for p in exp.ports} != {
            (p.name, p.direction, p.width) for p in got.ports
        }:
            mismatched.append(pid)
    assert mismatched == ["Prob031_dff"]


def test_answer_is_a_submodule_of_a_context_top(tmp_path):
    """CVDP-style: the toplevel lives in the task's context and the answer provides a submodule."""
    top = "module soc(input clk, input [7:0] d, output [7:0] q);\n  filt u(.clk(clk), .d(d), .q(q));\nendmodule\n"
    filt = "module filt(input clk, input [7:0] d, output reg [7:0] q);\nendmodule\n"
    task = Task(
        id="sub",
        expected_files=["rtl/filt.sv"],
        toplevel="soc",
        context={"rtl/soc.sv": top},
        reference={"rtl/filt.sv": filt},
    )
    exp = expected_interface(task)
    assert exp.module == "filt" and exp.source == "reference"
    bad = filt.replace("input [7:0] d", "input [3:0] d")
    r = run_stage("interface", tmp_path, task, files={"rtl/filt.sv": bad})
    assert r.score == pytest.approx(2.5 / 3) and "port d: width 4, expected 8" in r.feedback
    # Known only through the harness: the context's top is checked with the answer in place.
    htask = Task(
        id="sub2",
        expected_files=["rtl/filt.sv"],
        toplevel="soc",
        context={"rtl/soc.sv": top},
        harness=Harness(kind="cocotb", files={"t/test_soc.py": "async def t(dut):\n    dut.d.value = 1\n"}),
    )
    r = run_stage("interface", tmp_path, htask, files={"rtl/filt.sv": filt})
    assert r.status is Status.PASSED and any(d.code == "interface.context_top" for d in r.diagnostics)


def test_cvdp_agentic_example_spec_in_context_docs_matches_reference():
    """Agentic CVDP tasks ship their spec as docs/specification.md in the context: its module header gives the
    same interface as the reference patch."""
    import json

    path = CVDP / "cvdp_v1.1.0_example_agentic_code_generation_no_commercial_with_solutions.jsonl"
    if not path.exists():
        pytest.skip("../shared/data/cvdp is absent")
    rec = json.loads(path.read_text().splitlines()[0])
    harness = Harness(kind="cvdp", files=rec["harness"])
    ref = {
        p: "\n".join(ln[1:] for ln in hunk.splitlines() if ln.startswith("+") and not ln.startswith("+++"))
        for p, hunk in rec["patch"].items()
    }
    common = {"toplevel": "fixed_priority_arbiter", "harness": harness, "context": rec["context"]}
    from_spec = expected_interface(Task(id="spec", prompt=rec["prompt"], **common))
    from_ref = expected_interface(Task(id="ref", reference=ref, **common))
    assert from_spec.source == "spec" and from_ref.source == "reference"
    assert set(from_spec.ports) == set(from_ref.ports) and len(from_ref.ports) == 7


def test_syntax_error_in_port_list_gives_no_credit(tmp_path):
    broken = REF.replace("input  logic             push,", "input  logic  [ push,")
    r = iface(tmp_path, broken)
    assert r.status is Status.FAILED and r.score == 0.0
    assert any(d.code == "interface.header_syntax" and d.file == "rtl/fifo.sv" for d in r.diagnostics)
