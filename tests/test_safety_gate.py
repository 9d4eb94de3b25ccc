"""The safety gate: each unsafe construct is refused with its file and line; benign designs pass; an include of
/etc/passwd is refused and no line of that file appears in anything the stages output."""

from __future__ import annotations

import pytest
from format_helpers import PASSWD_LINES, all_output, run_stage

from rtlreward.model import Harness, Status, Task

TASK = Task(id="s", expected_files=["rtl/top.sv"], toplevel="top")
HEAD = "module top(input clk, output reg [7:0] q);\n"  # line 1; the construct under test is on line 3
TAIL = "\nendmodule\n"


def safety(tmp_path, files, task=TASK):
    return run_stage("safety", tmp_path, task, files=files)


UNSAFE = [
    ('  initial $system("rm -rf /");', "unsafe-system", "$system"),
    ('  initial $systemf("id");', "unsafe-system", "$systemf"),
    ('  initial $c("system(\\"id\\");");', "unsafe-c", "$c"),
    ('  initial $cpure("abort()");', "unsafe-c", "$cpure"),
    ('  always @(posedge clk) q <= $c32("rand()");', "unsafe-c", "$c32"),
    ('  import "DPI-C" function int system(input string cmd);', "unsafe-dpi", "DPI-C"),
    ('  import "DPI" function void f();', "unsafe-dpi", "DPI"),
    ('  export "DPI-C" function g;', "unsafe-dpi", "DPI-C"),
    ('  integer fd; initial fd = $fopen("/tmp/x", "w");', "unsafe-file-io", "$fopen"),
    ('  integer r; initial r = $fscanf(3, "%d", q);', "unsafe-file-io", "$fscanf"),
    ("  reg [7:0] s [0:3]; initial $fgets(s[0], 3);", "unsafe-file-io", "$fgets"),
    ('  reg [7:0] m [0:3]; initial $readmemh("/etc/shadow", m);', "unsafe-file-io", "$readmemh"),
    ('  reg [7:0] m [0:3]; initial $readmemb("../../secret.bin", m);', "unsafe-file-io", "$readmemb"),
    ('  reg [7:0] m [0:3]; initial $writememh("results.xml", m);', "unsafe-file-io", "$writememh"),
    ('  initial $dumpfile("/tmp/out.vcd");', "unsafe-file-io", "$dumpfile"),
    ('`include "/etc/hostname"', "unsafe-include", "/etc/hostname"),
    ('`include "../../harness/test_top.py"', "unsafe-include", ".."),
    ('`include "not_provided.vh"', "unsafe-include", "not_provided.vh"),
    ("`systemc_header", "unsafe-c", "systemc_header"),
]


@pytest.mark.parametrize(
    ("line", "code", "named"), UNSAFE, ids=[u[2] + "-" + str(i) for i, u in enumerate(UNSAFE)]
)
def test_unsafe_construct_rejected_with_line(tmp_path, line, code, named):
    src = HEAD + "  // the next line is the unsafe one\n" + line + TAIL
    r = safety(tmp_path, {"rtl/top.sv": src})
    assert r.status is Status.FAILED and r.score == 0.0
    hits = [d for d in r.diagnostics if d.code == code]
    assert hits, r.diagnostics
    assert any(d.file == "rtl/top.sv" and d.line == 3 and named in d.message for d in hits), hits
    assert "rtl/top.sv:3" in r.feedback


def test_macro_token_pasting_builds_system(tmp_path):
    src = HEAD + "`define S $sys``tem\n" + '  initial `S("id");' + TAIL
    r = safety(tmp_path, {"rtl/top.sv": src})
    assert r.status is Status.FAILED
    lines = {d.line for d in r.diagnostics if d.code == "unsafe-system"}
    assert 3 in lines  # slang's expanded token stream points at the use of the macro


def test_dpi_spec_through_macro_found_by_slang(tmp_path):
    src = (
        '`define DPI_KIND "DPI-C"\n' + HEAD + "  import `DPI_KIND function int system(input string c);" + TAIL
    )
    r = safety(tmp_path, {"rtl/top.sv": src})
    assert r.status is Status.FAILED
    assert any(d.code == "unsafe-dpi" and d.line == 3 for d in r.diagnostics)


def test_unparsable_file_cannot_hide_system(tmp_path):
    src = HEAD + "  this is not verilog ((( ;\n" + '  initial $system("id");' + TAIL
    r = safety(tmp_path, {"rtl/top.sv": src})
    assert r.status is Status.FAILED and any(d.code == "unsafe-system" and d.line == 3 for d in r.diagnostics)


def test_unsafe_construct_in_second_file(tmp_path):
    task = Task(id="two", expected_files=["rtl/top.sv", "rtl/leaf.sv"], toplevel="top")
    files = {"rtl/top.sv": HEAD + TAIL, "rtl/leaf.sv": 'module leaf;\n initial $system("id");\nendmodule\n'}
    r = safety(tmp_path, files, task)
    assert r.status is Status.FAILED
    assert [(d.file, d.line) for d in r.diagnostics] == [("rtl/leaf.sv", 2)]


BENIGN = """`timescale 1ns/1ps
module top #(parameter W = 8) (input clk, input rst, output reg [W-1:0] q);
  // $system("ls") in a comment is not a call; neither is a string:
  initial $display("do not call $system or $fopen here");
  /* import "DPI-C" function void f(); */
  always @(posedge clk) begin
    if (rst) q <= '0; else q <= q + 1;
    if (q == 8'hff) begin
      $display("wrapped at %0t", $time);
      $write("%0d\\n", q); $strobe("q=%h", q);
      $finish;
    end
    if ($isunknown(q)) $stop;
  end
  initial begin $dumpfile("waves.vcd"); $dumpvars(0, top); end
  localparam L = $clog2(W);
endmodule
"""


def test_benign_design_passes(tmp_path):
    r = safety(tmp_path, {"rtl/top.sv": BENIGN})
    assert r.status is Status.PASSED and r.score == 1.0, r.diagnostics
    assert r.diagnostics == () and r.metrics["unsafe_constructs"] == 0


def test_include_and_readmem_of_provided_files_pass(tmp_path):
    task = Task(
        id="inc",
        expected_files=["rtl/top.sv"],
        toplevel="top",
        context={"rtl/defs.vh": "`define W 8\n", "rtl/rom.mem": "00\n01\n"},
    )
    src = '`include "defs.vh"\n' + HEAD + '  reg [7:0] m [0:1];\n  initial $readmemh("rom.mem", m);' + TAIL
    r = safety(tmp_path, {"rtl/top.sv": src}, task)
    assert r.status is Status.PASSED, r.diagnostics


def test_include_of_another_answer_file_passes(tmp_path):
    task = Task(id="inc2", expected_files=["rtl/top.sv", "rtl/pkg.svh"], toplevel="top")
    files = {"rtl/top.sv": '`include "rtl/pkg.svh"\n' + HEAD + TAIL, "rtl/pkg.svh": "`define X 1\n"}
    assert safety(tmp_path, files, task).status is Status.PASSED


def test_include_of_passwd_rejected_and_never_echoed(tmp_path):
    """Slang and Verilator quote an included file's lines in their errors; nothing we output may."""
    assert PASSWD_LINES, "the test needs a non-empty /etc/passwd"
    src = '`include "/etc/passwd"\n' + HEAD + TAIL
    files = {"rtl/top.sv": src}
    r = safety(tmp_path, files)
    assert r.status is Status.FAILED
    assert any(d.code == "unsafe-include" and d.line == 1 for d in r.diagnostics)
    outputs = [all_output(r)]
    # The interface stage parses the same file (it would run only after the gate, but must be safe anyway).
    task = Task(id="p", expected_files=["rtl/top.sv"], toplevel="top", reference={"rtl/top.sv": HEAD + TAIL})
    outputs.append(all_output(run_stage("interface", tmp_path, task, files=files)))
    # And the whole reply through format.
    outputs.append(all_output(run_stage("format", tmp_path, task, text=f"```verilog\n{src}```")))
    text = "\n".join(outputs)
    for line in PASSWD_LINES:
        assert line not in text
    assert "root:" not in text


def test_slang_never_reads_included_paths(tmp_path):
    """Even with errors, the parse helper opens nothing from disk: an include of a real file behaves exactly
    like an include of a missing one."""
    from rtlreward_hdl.slang import parse

    secret = tmp_path / "secret.vh"
    secret.write_text("`define LEAK 1\nmodule leaked_module; endmodule\n")
    src = f'`include "{secret}"\nmodule top; endmodule\n'
    parsed = parse({"rtl/top.sv": src})
    paths = {str(parsed.source_manager.getFullPath(b)) for b in parsed.source_manager.getAllBuffers()}
    assert str(secret) not in paths
    from rtlreward_interface import parse_modules

    assert set(parse_modules({"rtl/top.sv": src})) == {"top"}


def test_harness_files_count_as_provided(tmp_path):
    task = Task(
        id="h",
        expected_files=["rtl/top.sv"],
        toplevel="top",
        harness=Harness(kind="cocotb", files={"verif/tb_defs.svh": "`define T 1\n"}),
    )
    r = safety(tmp_path, {"rtl/top.sv": '`include "verif/tb_defs.svh"\n' + HEAD + TAIL}, task)
    assert r.status is Status.PASSED


def test_stage_metadata():
    from rtlreward.plugins import get_registry

    stage = get_registry().stages()["safety"]
    assert stage.requires == ("format",) and not hasattr(stage, "weight")
    assert set(stage.tool_versions()) == {"iverilog", "verilator"}


@pytest.mark.parametrize(
    "src",
    [
        '`define X `in``clude "/etc/passwd"\n`X\nmodule top; endmodule\n',
        '`define CAT(a, b) a``b\n`CAT(`in, clude) "/etc/passwd"\nmodule top; endmodule\n',
        '`define P "/etc/passwd"\n`include `P\nmodule top; endmodule\n',
    ],
    ids=["pasted-directive", "pasted-macro-args", "macro-path"],
)
def test_include_built_by_macros_is_refused_and_not_read(tmp_path, src):
    from rtlreward_hdl.slang import parse

    r = safety(tmp_path, {"rtl/top.sv": src})
    assert r.status is Status.FAILED
    assert any(d.code in ("unsafe-include", "unsafe-macro") and d.line in (1, 2) for d in r.diagnostics)
    parsed = parse({"rtl/top.sv": src})
    paths = {str(parsed.source_manager.getFullPath(b)) for b in parsed.source_manager.getAllBuffers()}
    assert "/etc/passwd" not in paths
    text = all_output(r)
    assert not any(line in text for line in PASSWD_LINES)
