"""The safety gate decides on what Icarus and Verilator see after their own preprocessors (real `ivlpp`,
`verilator_bin -E`, in the sandbox): a hostile corpus of gate evasions, each refused with the construct and the
answer's line; what must keep passing (escaped identifiers, every bundled example's correct completion, the
VerilogEval, RTLLM and CVDP example references); the strict fallback when a preprocessor fails; and the
VerilogEval/RTLLM runner's own check on the same preprocessed names."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from format_helpers import PASSWD_LINES, all_output, gate_module, make_ctx
from verilog_eval_helpers import RTLLM_DATA, VE_DATA

from rtlreward.model import Harness, Status, Task
from rtlreward.plugins import get_registry
from rtlreward.sandbox.local import LocalExecutor
from rtlreward_hdl import preprocess as pp
from rtlreward_hdl.simrun import control_tasks

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TASK = Task(id="gate", expected_files=["rtl/top.sv"], toplevel="top")
MARK = "// <-"  # the line a case expects its diagnostic on


@pytest.fixture(scope="module")
def ex():
    return LocalExecutor()


@pytest.fixture(autouse=True)
def fresh_cache():
    pp.clear_cache()  # every test runs the tools itself


def gate(tmp_path: Path, ex, files: dict[str, str], task: Task = TASK):
    stage = get_registry().stages()["safety"]
    ctx = make_ctx(tmp_path, task, files=files)
    ctx.executor = ex
    return stage.run(ctx)


def marked_line(text: str) -> int:
    (n,) = [i for i, line in enumerate(text.splitlines(), 1) if MARK in line]
    return n


module = gate_module


# -- the hostile corpus ------------------------------------------------------------------------------------------
# (id, answer text, diagnostic code, construct named in the message)
EVASIONS = [
    (
        "paste-fgets",
        module("  initial $`N(m[0], fd); " + MARK + "\n", "`define N fgets\n"),
        "unsafe-file-io",
        "$fgets",
    ),
    (
        "paste-system",
        module('  initial $`S("id"); ' + MARK + "\n", "`define S sys``tem\n"),
        "unsafe-system",
        "$system",
    ),
    (
        "paste-fopen-arg",
        module('  initial fd = `D(fopen)("/etc/shadow", "r"); ' + MARK + "\n", "`define D(x) $``x\n"),
        "unsafe-file-io",
        "$fopen",
    ),
    (
        "paste-c",
        module('  initial `D(c)("system(\\"id\\");"); ' + MARK + "\n", "`define D(x) $``x\n"),
        "unsafe-c",
        "$c",
    ),
    (
        "paste-outside-macro-body",  # Verilator pastes `` at the use site too
        module("  initial `DOL``fgets(m[0], fd); " + MARK + "\n", "`define DOL $\n"),
        "unsafe-file-io",
        "$fgets",
    ),
    (
        "paste-dollar-argument",
        module('  initial `J($, fopen)("x", "w"); ' + MARK + "\n", "`define J(a, b) a``b\n"),
        "unsafe-file-io",
        "$fopen",
    ),
    (
        "paste-onto-write",  # $write is allowed; $write``memh is $writememh
        module('  initial `W($write)("results.xml", m); ' + MARK + "\n", "`define W(t) t``memh\n"),
        "unsafe-file-io",
        "$writememh",
    ),
    (
        "fopenw",
        module('  initial fd = $fopenw("_rtlreward/results.xml"); ' + MARK + "\n"),
        "unsafe-file-io",
        "$fopenw",
    ),
    ("fopenr", module('  initial fd = $fopenr("/etc/shadow"); ' + MARK + "\n"), "unsafe-file-io", "$fopenr"),
    ("fopena", module('  initial fd = $fopena("log.txt"); ' + MARK + "\n"), "unsafe-file-io", "$fopena"),
    (
        "fdisplay-to-fd-number",
        module('  initial $fdisplay(32\'h8000_0002, "<testsuite tests=\\"7\\"/>"); ' + MARK + "\n"),
        "unsafe-file-io",
        "$fdisplay",
    ),
    ("fwrite-to-stdout", module('  initial $fwrite(1, "PASS"); ' + MARK + "\n"), "unsafe-file-io", "$fwrite"),
    (
        "stringified-readmem-path",  # `" builds "/etc/shadow": the path the tools see is checked
        module("  initial $readmemh(`Q(/etc/shadow), m); " + MARK + "\n", '`define Q(x) `"x`"\n'),
        "unsafe-file-io",
        "$readmemh",
    ),
    (
        "dumpfile-into-verdict-folder",
        module('  initial $dumpfile("_rtlreward/results.xml"); ' + MARK + "\n"),
        "unsafe-file-io",
        "$dumpfile",
    ),
    (
        "dumpfile-vcd-into-verdict-folder",
        module('  initial $dumpfile("_rtlreward/waves.vcd"); ' + MARK + "\n"),
        "unsafe-file-io",
        "$dumpfile",
    ),
    (
        "dumpfile-of-__FILE__",
        module("  initial $dumpfile(`__FILE__); " + MARK + "\n"),
        "unsafe-file-io",
        "$dumpfile",
    ),
    (
        "dpi-import-via-macro",
        module("  `DPI function int system(input string c); " + MARK + "\n", '`define DPI import "DPI-C"\n'),
        "unsafe-dpi",
        "import",
    ),
    (
        "dpi-spec-via-macro",
        module("  import `K function int system(input string c); " + MARK + "\n", '`define K "DPI-C"\n'),
        "unsafe-dpi",
        "import",
    ),
    (
        "systemc-header-via-macro",
        module("`SC " + MARK + "\n  #include <cstdlib>\n`verilog\n", "`define SC `systemc_header\n"),
        "unsafe-c",
        "systemc_header",
    ),
    (
        "verilator-only-branch",
        module(
            '`ifdef VERILATOR\n  initial $`S("id"); ' + MARK + "\n`endif\n",
            "`define S system\n",
        ),
        "unsafe-system",
        "$system",
    ),
    (
        "icarus-only-branch",
        module(
            "`ifdef __ICARUS__\n  initial $`N(m[0], fd); " + MARK + "\n`else\n  initial q = 0;\n`endif\n",
            "`define N fgets\n",
        ),
        "unsafe-file-io",
        "$fgets",
    ),
    (
        "harness-define-branch",  # a branch only a harness's own define (SIMULATION) selects
        module("`ifdef SIMULATION\n  initial $`N(m[0], fd); " + MARK + "\n`endif\n", "`define N fgets\n"),
        "unsafe-macro",
        "$`N",
    ),
    (
        "icarus-expands-escaped-identifier",  # Icarus expands `E inside \`E; Verilator does not
        module("  initial \\`E (m[0], fd); " + MARK + "\n", "`define E x $fgets\n"),
        "unsafe-file-io",
        "$fgets",
    ),
    (
        "delay-glued-to-call",  # #1$`N: a number, then the call
        module("  initial #1$`N(m[0], fd); " + MARK + "\n", "`define N fgets\n"),
        "unsafe-file-io",
        "$fgets",
    ),
    (
        "time-literal-glued-to-call",  # Verilator: a 1ns delay, then $fopen
        module('  initial #1ns$fopen("x"); ' + MARK + "\n"),
        "unsafe-file-io",
        "$fopen",
    ),
    (
        "multi-line-macro",  # Icarus prints the expansion on several lines, then resyncs to the use
        module("  initial begin `M end " + MARK + "\n", '`define M \\\n  q = 0; \\\n  fd = $fopen("x");\n'),
        "unsafe-file-io",
        "$fopen",
    ),
    (
        "undef-and-redefine",
        module("  initial $`N(m[0], fd); " + MARK + "\n", "`define N display\n`undef N\n`define N fgets\n"),
        "unsafe-file-io",
        "$fgets",
    ),
    (
        "ifdef-chosen-definition",
        module(
            "  initial $`N(m[0], fd); " + MARK + "\n",
            "`ifndef NEVER_DEFINED\n`define N fgets\n`else\n`define N display\n`endif\n",
        ),
        "unsafe-file-io",
        "$fgets",
    ),
    (
        "pasted-import-in-harness-branch",  # `import` glued together where only a harness define looks
        module(
            '`ifdef SIMULATION\n  `I "DPI-C" function int system(input string c); ' + MARK + "\n`endif\n",
            "`define I im``port\n",
        ),
        "unsafe-dpi",
        "DPI-C",
    ),
    (
        "unknown-vendor-task",
        module('  initial $sdf_annotate("timing.sdf", top); ' + MARK + "\n"),
        "unsafe-file-io",
        "$sdf_annotate",
    ),
    (
        "not-on-the-list",
        module('  initial $save("state"); ' + MARK + "\n"),
        "unsafe-file-io",
        "$save",
    ),
    (
        "getenv",
        module('  initial $display("%s", $getenv("HOME")); ' + MARK + "\n"),
        "unsafe-env",
        "$getenv",
    ),
    (
        "forged-line-directive",
        module('`line 1 "harness.sv" 0 ' + MARK + "\n  initial $fgets(m[0], fd);\n"),
        "unsafe-directive",
        "`line",
    ),
    (
        # Verilator 5.49 reads `"""a"b"""` as one string (SystemVerilog 2023); every other lexer as three, so the
        # call between two of them is inside a string to the gate and code to Verilator (a red-team pass; it ran)
        "triple-quoted-strings",
        module(
            '  reg [15:0] s;\n  initial begin s = "id"; $display("""a"b"""); $system(s); $display("""c"d"""); end '
            + MARK
            + "\n"
        ),
        "unsafe-string",
        '"""',
    ),
]


@pytest.mark.parametrize(("text", "code", "named"), [e[1:] for e in EVASIONS], ids=[e[0] for e in EVASIONS])
def test_evasion_refused_with_construct_and_line(tmp_path, ex, text, code, named):
    r = gate(tmp_path, ex, {"rtl/top.sv": text})
    assert r.status is Status.FAILED and r.score == 0.0, r.diagnostics
    line = marked_line(text)
    hits = [d for d in r.diagnostics if d.code == code and d.file == "rtl/top.sv" and d.line == line]
    assert any(named in d.message for d in hits), r.diagnostics
    assert f"rtl/top.sv:{line}" in r.feedback


def test_each_tool_sees_its_own_branch(tmp_path, ex):
    """`ifdef VERILATOR / `ifdef __ICARUS__: the branch each tool takes is what it is checked on."""
    text = module(
        '`ifdef VERILATOR\n  initial $`A(m[0], fd);\n`endif\n`ifdef __ICARUS__\n  initial $`B("x");\n`endif\n',
        "`define A fgets\n`define B fopen\n",
    )
    ctx = make_ctx(tmp_path, TASK, files={"rtl/top.sv": text})
    ctx.executor = ex
    icarus, verilator = pp.preprocess(ctx, {"rtl/top.sv": text})
    assert icarus.ok and verilator.ok
    names = {v.tool: {(u.name, u.line) for u in v.uses if u.kind == "system"} for v in (icarus, verilator)}
    assert ("$fopen", 9) in names["icarus"] and not any(n == "$fgets" for n, _ in names["icarus"])
    assert ("$fgets", 6) in names["verilator"] and not any(n == "$fopen" for n, _ in names["verilator"])


def test_macro_from_nested_task_header(tmp_path, ex):
    """A task header (itself including another) defines the macro the answer pastes a name with."""
    task = Task(
        id="hdr",
        expected_files=["rtl/top.sv"],
        toplevel="top",
        context={"rtl/defs.vh": '`include "inner.vh"\n', "rtl/inner.vh": "`define RD fgets\n"},
    )
    text = module("  initial $`RD(m[0], fd); " + MARK + "\n", '`include "defs.vh"\n')
    r = gate(tmp_path, ex, {"rtl/top.sv": text}, task)
    line = marked_line(text)
    assert r.status is Status.FAILED
    assert any(d.code == "unsafe-file-io" and d.line == line and "$fgets" in d.message for d in r.diagnostics)


def test_construct_in_an_included_task_file_is_reported_at_the_include_without_its_text(tmp_path, ex):
    secret = "$zz_hidden_harness_token"
    task = Task(
        id="hdr2",
        expected_files=["rtl/top.sv"],
        toplevel="top",
        harness=Harness(kind="cocotb", files={"verif/hidden.svh": f"initial {secret};\n"}),
    )
    text = module('`include "verif/hidden.svh" ' + MARK + "\n")
    r = gate(tmp_path, ex, {"rtl/top.sv": text}, task)
    assert r.status is Status.FAILED
    assert any(d.line == marked_line(text) and d.file == "rtl/top.sv" for d in r.diagnostics), r.diagnostics
    assert "zz_hidden" not in all_output(r)


def test_task_header_macro_used_by_the_answer_is_fine(tmp_path, ex):
    task = Task(
        id="hdr3",
        expected_files=["rtl/top.sv"],
        toplevel="top",
        context={"rtl/defs.vh": '`define W 8\n`define SHOW(x) $display("%0d", x)\n'},
    )
    text = module("  always @(posedge clk) `SHOW(q);\n  localparam [`W-1:0] Z = 0;\n", '`include "defs.vh"\n')
    r = gate(tmp_path, ex, {"rtl/top.sv": text}, task)
    assert r.status is Status.PASSED, r.diagnostics


@pytest.mark.parametrize(
    "body",
    [
        "  wire \\$system ;\n  wire \\$fopen = clk;\n  always @(posedge clk) q <= {7'b0, \\$fopen };\n",
        "  wire \\bus[0] ;\n  wire \\a+b = clk;\n",
        '  initial $display("not a call: $system $fopen `N");\n',
        "  // $fgets in a comment\n  /* $`N */\n",
        "  initial q = 8'hff;\n  initial #1 q = q + 1;\n  localparam N = $clog2(8) + $bits(q);\n",
        "  int d[$];\n  initial d.push_back(1);\n  initial q = d[$];\n  initial q = d[$-1];\n",
        '  initial begin $dumpfile("waves.vcd"); $dumpvars(0, top); end\n',
        '  initial if ($test$plusargs("v")) $display("%t", $realtime);\n  initial $finish;\n',
        "`define CAT(a, b) a``b\n  wire `CAT(my, _wire);\n  wire [1:0] `CAT(x, y) = 0;\n",
        '`define STR(x) `"x`"\n  initial $display(`STR(hello));\n',
    ],
    ids=[
        "escaped-system",
        "escaped-other",
        "names-in-strings",
        "comments",
        "numbers-and-functions",
        "queue-dollar",
        "waves",
        "plusargs-finish",
        "ordinary-pasting",
        "stringify",
    ],
)
def test_harmless_constructs_pass(tmp_path, ex, body):
    r = gate(tmp_path, ex, {"rtl/top.sv": module(body)})
    assert r.status is Status.PASSED, r.diagnostics
    assert r.metrics["preprocessors_failed"] == 0


# -- before any preprocessor runs --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        '`include "/etc/passwd"\nmodule top; endmodule\n',
        '`define CAT(a, b) a``b\n`CAT(`in, clude) "/etc/passwd"\nmodule top; endmodule\n',
        '`define CAT(a, b) a``b\n`CAT(`, include) "/etc/passwd"\nmodule top; endmodule\n',
        '`define P "/etc/passwd"\n`include `P\nmodule top; endmodule\n',
        '`define X `in``clude "/etc/passwd"\n`X\nmodule top; endmodule\n',
    ],
    ids=["literal", "pasted-macro-args", "lone-backtick", "macro-path", "pasted-directive"],
)
def test_outside_include_refused_before_any_preprocessor(tmp_path, ex, text):
    r = gate(tmp_path, ex, {"rtl/top.sv": text})
    assert r.status is Status.FAILED
    assert any(d.code == "unsafe-include" for d in r.diagnostics), r.diagnostics
    assert not (tmp_path / "_preprocess").exists()  # no preprocessor was run
    out = all_output(r)
    assert not any(line in out for line in PASSWD_LINES)


def test_an_include_built_past_the_text_check_is_still_refused(tmp_path, ex):
    """Defence in depth: if macros build an include the text check missed, the tools' `line directives show
    the file they entered; it is refused and nothing of it is shown."""
    text = "module top; endmodule\n"
    out = '`line 1 "rtl/top.sv" 0\nmodule top;\n`line 1 "/etc/hostname" 1\nsecret\n`line 2 "rtl/top.sv" 2\n'
    uses = pp.tokenize_output(out, pp.VERILATOR, {"rtl/top.sv": text})
    assert [(u.kind, u.file, u.line) for u in uses] == [("include", "rtl/top.sv", 1)]


# -- a preprocessor fails: the strictest reading -----------------------------------------------------------------
def test_failed_preprocessor_falls_back_to_strict_and_says_so(tmp_path, ex):
    text = module(
        "  initial q = `NOT_DEFINED;\n  wire `CAT(a, b); " + MARK + '\n  initial $display("`CAT");\n',
        "`define CAT(x, y) x``y\n",
    )
    r = gate(tmp_path, ex, {"rtl/top.sv": text})
    assert r.status is Status.FAILED
    line = marked_line(text)
    assert any(d.code == "unsafe-macro" and "pasting" in d.message and d.line == 1 for d in r.diagnostics)
    assert any(
        d.code == "unsafe-macro" and "string" in d.message and d.line == line + 1 for d in r.diagnostics
    )
    info = [d for d in r.diagnostics if d.severity == "info"]
    assert info and "Verilator" in info[0].message and "strictly" in info[0].message
    assert "NOT_DEFINED" not in info[0].message  # our words, not the tool's


def test_failed_preprocessor_without_hidden_names_still_passes(tmp_path, ex):
    """An undefined macro is the compile stage's business (it earns the format credit there)."""
    r = gate(tmp_path, ex, {"rtl/top.sv": module("  initial q = `NOT_DEFINED;\n")})
    assert r.status is Status.PASSED, r.diagnostics
    assert r.metrics["preprocessors_failed"] >= 1
    assert any(d.severity == "info" for d in r.diagnostics)


# -- the bundled replies ----------------------------------------------------------------------------------------
def test_bundled_completions(tmp_path, ex):
    tasks = {t.id: t for t in get_registry().datasets()["folder"].load(str(EXAMPLES))}
    fmt = get_registry().stages()["format"]
    expect = {"system_call": "unsafe-system", "include_passwd": "unsafe-include"}
    for tid, task in tasks.items():
        for reply in sorted((EXAMPLES / tid / "completions").glob("*.txt")):
            ctx = make_ctx(tmp_path / tid / reply.stem, task, text=reply.read_text())
            files = fmt.run(ctx).artifacts.get("files") or {}
            if not files:
                continue  # prose only
            r = gate(tmp_path / tid / (reply.stem + "-gate"), ex, dict(files), task)
            if reply.stem in expect:
                assert r.status is Status.FAILED and any(d.code == expect[reply.stem] for d in r.diagnostics)
                if reply.stem == "include_passwd":
                    assert not (tmp_path / tid / (reply.stem + "-gate") / "_preprocess").exists()
            else:  # correct, syntax_error (it must fail later, in compile), wrong designs
                assert r.status is Status.PASSED, (tid, reply.stem, r.diagnostics)


# -- every reference still passes ---------------------------------------------------------------------------------
def _reference_tasks() -> list[Task]:
    ds = get_registry().datasets()
    tasks = list(ds["folder"].load(str(EXAMPLES)))
    if (VE_DATA / "dataset_spec-to-rtl").is_dir():
        tasks += ds["verilog-eval"].load(VE_DATA)
    if RTLLM_DATA.is_dir():
        tasks += ds["rtllm"].load(RTLLM_DATA)
    return tasks


def test_every_reference_passes_the_gate(tmp_path, ex):
    """All bundled examples, 156 VerilogEval and 50 RTLLM references, the two CVDP examples: two at a time (the
    machine has 2 cores); about 0.1-0.2 s each, one sandboxed command per candidate."""
    from cvdp_harness_helpers import EXAMPLE_AGENTIC, EXAMPLE_NONAGENTIC, problem

    items = [(t, dict(t.reference)) for t in _reference_tasks()]
    for path in (EXAMPLE_NONAGENTIC, EXAMPLE_AGENTIC):
        if path.exists():
            items.append(problem(path))
    if len(items) < 150 and os.environ.get("CI"):
        pytest.fail("benchmark data missing")

    def one(i_item):
        i, (task, files) = i_item
        return task.id, gate(tmp_path / str(i), ex, files, task)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, enumerate(items)))
    failed = [(tid, r.diagnostics) for tid, r in results if r.status is not Status.PASSED]
    assert not failed, failed[:5]
    assert sum(r.metrics["preprocessors_failed"] for _, r in results) == 0


# -- the VerilogEval/RTLLM runner's own check ---------------------------------------------------------------------
def test_control_tasks_read_the_preprocessed_text(tmp_path, ex):
    ctx = make_ctx(tmp_path, TASK, files={})
    ctx.executor = ex
    files = {"TopModule.sv": "`define F finish\nmodule TopModule;\ninitial #5 $`F;\nendmodule\n"}
    found = control_tasks(files, ctx)
    assert [(d.file, d.line, d.code) for d in found] == [("TopModule.sv", 3, "sim-control")]
    assert "$finish" in found[0].message
    # An Icarus-only route to a file task: Icarus expands the macro inside the escaped identifier.
    files = {"TopModule.sv": '`define E x $fopen\nmodule TopModule;\ninitial \\`E ("ref.sv");\nendmodule\n'}
    found = control_tasks(files, ctx)
    assert ("TopModule.sv", 3, "file-access") in [(d.file, d.line, d.code) for d in found]
    # Without an executor slang's preprocessor stands in.
    found = control_tasks(
        {"TopModule.sv": "`define F finish\nmodule TopModule;\ninitial #5 $`F;\nendmodule\n"}
    )
    assert [(d.file, d.line) for d in found] == [("TopModule.sv", 3)]


@pytest.mark.skipif(
    not (VE_DATA / "dataset_spec-to-rtl").is_dir(), reason="VerilogEval data not in ../shared"
)
def test_verilog_eval_runner_refuses_a_pasted_finish(tmp_path):
    from verilog_eval_helpers import run_harness

    from rtlreward_verilog_eval.dataset import VerilogEvalDataset

    task = VerilogEvalDataset().load(VE_DATA, ids="Prob001_zero")[0]
    text = "`define F fin``ish\nmodule TopModule(output zero); assign zero = 1; initial #1 $`F; endmodule\n"
    r = run_harness(task, {"TopModule.sv": text}, tmp_path)
    assert r.status is Status.FAILED and r.score == 0.0
    assert any(d.code in ("sim-control", "macro-built") for d in r.diagnostics), r.diagnostics


# -- the docker executor ------------------------------------------------------------------------------------------
@pytest.mark.docker
def test_gate_under_docker_where_verilator_is_not_installed(tmp_path):
    """The default sim image has Icarus but no Verilator: Icarus' own preprocessor runs in the container and
    slang reads the answer with Verilator's defines in its place (said in an info diagnostic); a hostile
    answer is refused with its construct and line, an ordinary one with token pasting passes."""
    pytest.importorskip("docker")
    from rtlreward.sandbox.docker import DockerExecutor, DockerUnavailable

    try:
        dex = DockerExecutor()
    except DockerUnavailable as e:
        pytest.skip(str(e))
    hostile = module(
        "  initial $`N(m[0], fd); " + MARK + '\n`ifdef VERILATOR\n  initial $`S("id");\n`endif\n',
        "`define N fgets\n`define S system\n",
    )
    r = gate(tmp_path / "hostile", dex, {"rtl/top.sv": hostile})
    assert r.status is Status.FAILED
    line = marked_line(hostile)
    assert any(d.code == "unsafe-file-io" and d.line == line and "$fgets" in d.message for d in r.diagnostics)
    # slang glues no `$` to a macro (two tokens, as the standard says): the source-text rule refuses it there.
    assert any(d.code in ("unsafe-system", "unsafe-macro") and d.line == line + 2 for d in r.diagnostics)
    fine = module("  wire `CAT(my, _wire);\n", "`define CAT(a, b) a``b\n")
    r = gate(tmp_path / "fine", dex, {"rtl/top.sv": fine})
    assert r.status is Status.PASSED, r.diagnostics
    notes = [d.message for d in r.diagnostics if d.severity == "info"]
    assert r.metrics["preprocessors_failed"] == 0 or not notes or "slang" in " ".join(notes)
