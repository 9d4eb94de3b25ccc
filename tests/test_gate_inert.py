"""The safety gate reads an answer no preprocessor would change (no macro, `ifdef or `include; comments and
strings every lexer reads alike) in process instead of running Icarus' and Verilator's preprocessors: the same
findings as the tools' own views, on texts built to make the two readings differ, and no command run."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from format_helpers import gate_module, make_ctx

from rtlreward.model import Task
from rtlreward.plugins import get_registry
from rtlreward.sandbox.local import LocalExecutor
from rtlreward_hdl import preprocess as pp

TASK = Task(id="gate", expected_files=["rtl/top.sv"], toplevel="top")


module = gate_module


class Counting(LocalExecutor):
    def __init__(self) -> None:
        super().__init__()
        self.commands = 0

    def run(self, argv, **kw):
        self.commands += 1
        return super().run(argv, **kw)


def gate(tmp_path: Path, ex, text: str, monkeypatch=None, tools: bool = False):
    pp.clear_cache()
    if tools:
        monkeypatch.setattr(pp, "inert", lambda texts: False)
    ctx = make_ctx(tmp_path, TASK, files={"rtl/top.sv": text})
    ctx.executor = ex
    r = get_registry().stages()["safety"].run(ctx)
    if tools:
        monkeypatch.undo()
    return r.status.value, sorted({(d.code, d.message) for d in r.diagnostics if d.severity != "info"})


@pytest.mark.parametrize(
    ("text", "plain"),
    [
        ("module a; endmodule\n", True),
        (
            '`timescale 1ns/1ps\n`default_nettype none\nmodule a; initial $display("x // y"); endmodule\n',
            True,
        ),
        ("/* c */ module a; // d\nendmodule\n", True),
        ("\\q$x a; \\b/* ; endmodule\n", True),  # escaped identifiers hold what looks like a comment
        ("`define X 1\nmodule a; endmodule\n", False),
        ("`timescale$x\n", False),  # a macro named timescale$x
        ("`ifdef A\n`endif\n", False),
        ('module a; initial $display("abc\\\n"); endmodule\n', False),  # a string continued on the next line
        ('module a; initial $display("abc); endmodule\n', False),  # a string that does not close
        ("module a; /* open\nendmodule\n", False),
        ("module a;\r\nendmodule\r\n", False),
        ("module a; endmodule\x00", False),
        ("module a; // é\nendmodule\n", False),
        # the quote belongs to an escaped identifier: the last string is open
        ('\\q" $getenv("H")$"x\n', False),
        ('module a; initial $display("""a"b"""); endmodule\n', False),  # a triple-quoted string (Verilator)
    ],
)
def test_inert_text(text, plain):
    assert pp.inert([text]) is plain


def test_a_plain_answer_runs_no_preprocessor(tmp_path):
    ex = Counting()
    clean = module('  always @(posedge clk) q <= q + 1;  // "quoted" $system in a comment\n')
    assert gate(tmp_path, ex, clean) == ("passed", [])
    bad = module('  initial begin $display("a"); fd = $fopen("/etc/passwd", "r"); end\n')
    status, found = gate(tmp_path, ex, bad)
    assert status == "failed" and any("$fopen" in m for _, m in found)
    assert ex.commands == 0
    gate(tmp_path, ex, module("  initial q = `W;\n", pre="`define W 8'd1\n"))
    assert ex.commands == 1  # a macro: the tools' own preprocessors read it


# Texts where a preprocessor's reading and a plain lexer's could part: strings, comments and escaped identifiers
# run into each other, names split by odd characters. Each must get the same findings both ways.
FRAGMENTS = [
    '$system("x");',
    '$display("a");',
    '"',
    "\\",
    "\n",
    "\r",
    "//",
    "/*",
    "*/",
    " ",
    "a",
    "$",
    "`timescale 1ns/1ps\n",
    "\\$system ",
    '$fopen("f");',
    'import "DPI-C" function void f();',
    "'h",
    "1",
    "#1",
    "\t",
    '$readmemh("x", m);',
    "(*",
    "*)",
    "$finish;",
    "fd = ",
    "\\a$fgets ",
    '"\\n"',
    "$write",
    'memh("x",m);',
    "\x00",
    "\x0c",
    "\\\n",
    "'",
    "`default_nettype none\n",
    "begin",
    "end",
    ";",
    '$c("x");',
    '$getenv("H")',
    "`resetall",
    "\\x/* ",
    "\\y// ",
    '\\q" ',
    '"//"',
    '"/*"',
    "memh",
    "\\$fopen ",
    '$display("\\"");',
    '// " ',
    '$dumpfile("a.vcd");',
]
EDGES = [
    module('  initial begin $display("abc\\\n/*");  $system("echo x"); //*/\n  end\n'),
    module('  initial begin // hi\r $system("echo x"); end\n'),
    module('  initial begin \\q" $getenv("H")$"begin#11\n  end\n'),
    module(
        '  initial begin "\\\n\\$system \\a$fgets begin(*import "DPI-C" function void f();//\n"$writememh("x",m);\n  end\n'
    ),
    module('  initial begin $write\x00memh("x", m); end\n'),
    module('  initial begin \\a//b $system("x"); end\n'),
    module('  initial begin \\a/* $system("x"); */ end\n'),
    module('  initial begin fd = "id"; $display("""a"b"""); $system(fd); // "\n  end\n'),
    module('  initial begin fd = "id"; $display("""a"b"""); $system(fd); $display("""c"d"""); end\n'),
]


def _fuzz(n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    out = []
    while len(out) < n:
        body = "".join(rnd.choice(FRAGMENTS) for _ in range(rnd.randint(1, 14)))
        text = module(f"  initial begin\n{body}\n  end\n")
        if pp.inert([text]):
            out.append(text)
    return out


def test_in_process_reading_finds_what_the_tools_find(tmp_path, monkeypatch):
    ex = LocalExecutor()
    cases = EDGES + _fuzz(60, 20261128)
    differ = []
    for i, text in enumerate(cases):
        fast = gate(tmp_path / f"f{i}", ex, text)
        slow = gate(tmp_path / f"s{i}", ex, text, monkeypatch, tools=True)
        if fast != slow:
            differ.append((text, fast, slow))
    assert not differ, differ[:3]
