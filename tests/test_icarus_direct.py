"""The compile stage runs Icarus's compiler (`ivl`) itself for an answer no preprocessor would change, without the
`iverilog` launcher, its shell and its preprocessor (`rtlreward_hdl.icarus.direct_elaboration`): the launcher's
own configuration, the preprocessor's own output, and the same verdicts and messages as the launcher on the
references, mutants, stubs and broken answers of VerilogEval and on the safety gate's edge cases."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from format_helpers import make_ctx
from test_gate_inert import EDGES, _fuzz

import rtlreward_compile
from rtlreward.model import Task
from rtlreward.plugins import get_registry
from rtlreward.sandbox.local import LocalExecutor
from rtlreward_hdl import icarus
from rtlreward_hdl.preprocess import inert

LAUNCHER = shutil.which("iverilog")
BASE = icarus._ivl_base(LAUNCHER)
pytestmark = pytest.mark.skipif(
    BASE is None, reason="not the Icarus (11.0) whose configuration is known here"
)


def _launcher_config(tmp_path: Path, args: list[str], files: dict[str, str]) -> tuple[str, str]:
    """(the configuration `iverilog <args>` hands to `ivl`, what its preprocessor hands to `ivl`), read by
    pointing the launcher (-B) at a copy of Icarus's folder whose `ivl` records its arguments and input."""
    fake = tmp_path / "base"
    fake.mkdir()
    for name in os.listdir(BASE):
        if name != "ivl":
            (fake / name).symlink_to(os.path.join(BASE, name))
    record = tmp_path / "record"
    script = fake / "ivl"
    script.write_text(
        "#!/bin/sh\n"
        f'for a in "$@"; do case "$a" in -C*base/*) ;; -C*) cat "${{a#-C}}" > {record}.conf;; esac; done\n'
        f"cat > {record}.in\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    work = tmp_path / "work"
    work.mkdir()
    for name, text in files.items():
        (work / name).write_text(text)
    subprocess.run(["iverilog", "-B", str(fake), *args], cwd=work, check=True, capture_output=True)
    conf = Path(f"{record}.conf").read_text().replace(str(fake), BASE)
    return conf, Path(f"{record}.in").read_text()


@pytest.mark.parametrize(("top", "target"), [(None, "null"), ("TopModule", "null"), ("TopModule", "vvp")])
def test_the_configuration_and_input_are_the_launchers(tmp_path, top, target):
    files = {
        "a.sv": '`timescale 1ns/1ps\nmodule TopModule(input a, output y);\n  assign y = ~a; // "x\n endmodule\n',
        "b.v": "module b; /* two\nlines */ endmodule",  # no newline at the end
        "c.v": "",
        "d.v": "\n\nmodule d; endmodule\n\n",
    }
    sources = list(files)
    out = {"null": [], "vvp": ["-o", "sim/tb.vvp"]}[target]
    args = ["-g2012", "-t", target, *(["-s", top] if top else []), *out, *sources]
    conf, text = _launcher_config(tmp_path, args, files)
    argv, written = icarus.direct_elaboration(
        sources, files, top, LAUNCHER, target=target, out=out[-1] if out else "a.out"
    )
    # The launcher's last line names its preprocessor and temporary files, which `ivl` reads only for library
    # folders (-y), which this command never has.
    assert [ln for ln in conf.splitlines() if not ln.startswith("ivlpp:")] == written[
        icarus.CONFIG_FILE
    ].splitlines()
    assert written[icarus.INPUT_FILE] == text
    assert argv[0] == os.path.join(BASE, "ivl") and argv[-1] == icarus.INPUT_FILE
    assert argv[2] == f"-C{os.path.join(BASE, target + '.conf')}"


def test_refused_where_the_launcher_must_run():
    texts = {"a.v": "module a; endmodule\n", 'q"x.v': "", "_rtlreward_ivl.v": ""}
    assert icarus.direct_elaboration(["a.v"], texts, "a", LAUNCHER) is not None
    assert icarus.direct_elaboration(["a.v"], texts, "a b", LAUNCHER) is None  # not a module name
    assert (
        icarus.direct_elaboration(['q"x.v'], texts, None, LAUNCHER) is None
    )  # a name the `line directive cannot hold
    assert (
        icarus.direct_elaboration(["_rtlreward_ivl.v"], texts, None, LAUNCHER) is None
    )  # our own file's name
    assert icarus.direct_elaboration(["missing.v"], texts, None, LAUNCHER) is None
    assert icarus.direct_elaboration(["a.v"], texts, "a", None) is None  # no launcher where commands run


TASK = Task(id="direct", expected_files=["TopModule.sv"], toplevel="TopModule")


class Recording(LocalExecutor):
    def __init__(self) -> None:
        super().__init__()
        self.argvs: list[list[str]] = []

    def run(self, argv, **kw):
        self.argvs.append(list(argv))
        return super().run(argv, **kw)


def _compile(tmp_path: Path, ex, text: str, launcher: bool, monkeypatch):
    ctx = make_ctx(tmp_path, TASK, files={"TopModule.sv": text})
    ctx.executor = ex
    if launcher:
        monkeypatch.setattr(rtlreward_compile, "direct_command", lambda *a, **k: None)
    r = get_registry().stages()["compile"].run(ctx)
    monkeypatch.undo()
    diags = sorted(repr((d.code, d.file, d.line, d.severity, d.message)) for d in r.diagnostics)
    return r.status.value, r.score, diags


def _answers() -> list[str]:
    from rtlreward.integration import load_tasks
    from rtlreward_hdl.mutate import mutants
    from rtlreward_hdl.stubs import stub_designs

    out = []
    for task in load_tasks("verilog-eval", skip_known_issues=True, limit=40)[::2]:
        ref = next(iter(task.reference.values()))
        out.append(ref)
        out += [next(iter(m.files.values())) for m in mutants(dict(task.reference), limit=2)]
        out.append(next(iter(stub_designs(task)["zeros"].values())))
        out.append(ref[: len(ref) // 2])  # cut mid-module
        out.append(ref.replace("TopModule", "Other"))  # no such top
    out += [t.replace("module a", "module TopModule") for t in EDGES + _fuzz(20, 7)]
    out += ["", "module TopModule(input a, output y);\n  assign y = tb.x;\nendmodule\n"]
    return out


def test_same_verdicts_and_messages_as_the_launcher(tmp_path, monkeypatch):
    ex = Recording()
    answers = [a for a in _answers() if inert([a])]
    assert len(answers) > 80
    differ, direct_runs = [], 0
    for i, text in enumerate(answers):
        ex.argvs.clear()
        fast = _compile(tmp_path / f"f{i}", ex, text, False, monkeypatch)
        direct_runs += any(a[0].endswith("/ivl") for a in ex.argvs)
        slow = _compile(tmp_path / f"s{i}", ex, text, True, monkeypatch)
        if fast != slow:
            differ.append((text[:200], fast, slow))
    assert not differ, differ[:3]
    assert direct_runs == len(answers)
    assert any(v[0] == "failed" for v in [_compile(tmp_path / "x", ex, answers[-1], False, monkeypatch)])


def test_a_macro_goes_through_the_launcher(tmp_path, monkeypatch):
    ex = Recording()
    text = "`define W 4\nmodule TopModule(input [`W-1:0] a, output y);\n  assign y = ^a;\nendmodule\n"
    assert _compile(tmp_path, ex, text, False, monkeypatch)[0] == "passed"
    assert [a[0] for a in ex.argvs] == ["iverilog"]


def _variants(limit: int, step: int, more=lambda ref: []) -> list[tuple[Task, str]]:
    """(task, answer) for every `step`-th of the first `limit` VerilogEval problems: the reference, two mutants,
    an all-zeros stub, a syntax error (Icarus's message) and what `more(reference)` adds."""
    from rtlreward.integration import load_tasks
    from rtlreward_hdl.mutate import mutants
    from rtlreward_hdl.stubs import stub_designs

    out = []
    for task in load_tasks("verilog-eval", skip_known_issues=True, limit=limit)[::step]:
        ref = next(iter(task.reference.values()))
        answers = [ref, *(next(iter(m.files.values())) for m in mutants(dict(task.reference), limit=2))]
        answers.append(next(iter(stub_designs(task)["zeros"].values())))
        answers.append(ref.replace("endmodule", "  wire [3:0] w = ;\nendmodule"))
        out += [(task, a) for a in [*answers, *more(ref)]]
    return out


def test_the_equivalence_stage_simulates_the_same_with_ivl(tmp_path, monkeypatch):
    """The differential simulation's compile (the answer's testbench and design, for `vvp`) through `ivl` itself:
    the same rewards, verdicts, figures and messages as through the launcher."""
    import rtlreward_equivalence
    from rtlreward.engine import Engine

    def seen(reward):
        st = reward.stages["equivalence"]
        metrics = {k: v for k, v in st.metrics.items() if "seconds" not in k}
        return reward.total, st.status.value, metrics, sorted(d.message for d in st.diagnostics)

    ex = Recording()
    cases = [(task, {"TopModule.sv": a}) for task, a in _variants(limit=30, step=3)]
    differ = []
    with Engine("equiv", executor=ex, cache=False, jobs=1, workspace_root=tmp_path / "ws") as eng:
        ex.argvs.clear()
        fast = [seen(eng.score(t, files)) for t, files in cases]
        direct = sum(" ".join(a).count("/ivl -C") for a in ex.argvs)
        monkeypatch.setattr(rtlreward_equivalence, "direct_command", lambda *a, **k: None)
        ex.argvs.clear()
        slow = [seen(eng.score(t, files)) for t, files in cases]
        assert not any("/ivl -C" in " ".join(a) for a in ex.argvs)
    differ = [(c[0].id, f, s) for c, f, s in zip(cases, fast, slow, strict=True) if f != s]
    assert not differ, differ[:3]
    assert direct >= len(cases) * 3 // 4  # most answers simulated through ivl itself
    assert {f[1] for f in fast} >= {"passed", "failed"}
    assert any("syntax error" in m for f in fast for m in f[3])


# -- the tests stage: the benchmark's testbench preprocessed once per task, `ivl` per answer -------------------------
def test_the_testbench_compile_is_the_launchers(tmp_path, monkeypatch):
    """What `ivl` gets in place of the launcher for an answer and VerilogEval's testbench: the launcher's own
    configuration and its preprocessor's output for the answer followed by the testbench, tagged with the run's
    tag, byte for byte (read through -B, as above)."""
    from rtlreward.integration import load_tasks
    from rtlreward_hdl import simrun

    for task in load_tasks("verilog-eval", skip_known_issues=True, limit=20)[::5]:
        ref = next(iter(task.reference.values()))
        testbench = list(task.harness.options["testbench"])
        harness = dict(task.harness.files)
        ctx = make_ctx(tmp_path / task.id, task, files={"TopModule.sv": ref})
        root = tmp_path / task.id / "root"
        root.mkdir(parents=True)
        tag = simrun.new_tag()
        flags = ["-Wall", "-Winfloop", "-Wno-timescale", "-g2012", "-s", "tb", "-o", "_rtlreward_sim.vvp"]
        argv = ["iverilog", *flags, "./TopModule.sv", *testbench]
        got = simrun._direct_compile(
            ctx, root, argv, {"TopModule.sv": ref}, ["TopModule.sv"], harness, testbench, tag
        )
        assert got is not None and got[0].endswith("/ivl"), got
        tagged = {k: (simrun.tag_testbench(v, tag) if k in testbench else v) for k, v in harness.items()}
        (tmp_path / task.id / "launcher").mkdir()
        conf, text = _launcher_config(
            tmp_path / task.id / "launcher",
            [*flags, "./TopModule.sv", *testbench],
            {"TopModule.sv": ref, **tagged},
        )
        mine = (root / "_rtlreward_ivl.conf").read_text().splitlines()
        assert [ln for ln in conf.splitlines() if not ln.startswith("ivlpp:")] == mine
        assert (root / "_rtlreward_ivl.v").read_text() == text
        assert got[-1] == "_rtlreward_ivl.v" and "-C_rtlreward_ivl.conf" in got


def test_the_tests_stage_judges_the_same_through_ivl(tmp_path, monkeypatch):
    """VerilogEval's tests stage on references, mutants, stubs, broken answers and answers that reach into the
    testbench: the same verdicts, mismatch counts and messages through `ivl` as through the launcher."""
    from verilog_eval_helpers import run_harness

    from rtlreward_hdl import simrun

    def seen(r):
        keep = {k: v for k, v in r.metrics.items() if "seconds" not in k and "duration" not in k}
        return r.status.value, r.score, keep, sorted(d.message for d in r.diagnostics)

    ex = Recording()
    forged = '  initial $display("Mismatches: 0 in 20 samples");\nendmodule'  # the verdict line, printed
    cases = _variants(limit=48, step=4, more=lambda ref: [ref.replace("endmodule", forged)])
    fast, slow, direct = [], [], 0
    for i, (task, a) in enumerate(cases):
        ex.argvs.clear()
        fast.append(seen(run_harness(task, {"TopModule.sv": a}, tmp_path / f"f{i}", ex=ex)))
        direct += any(
            " ".join(x).startswith("sh -c") and "/ivl -C_rtlreward_ivl.conf" in " ".join(x) for x in ex.argvs
        )
    monkeypatch.setattr(simrun, "_direct_compile", lambda *a, **k: None)
    for i, (task, a) in enumerate(cases):
        slow.append(seen(run_harness(task, {"TopModule.sv": a}, tmp_path / f"s{i}", ex=ex)))
    differ = [(c[0].id, c[1][-120:], f, s) for c, f, s in zip(cases, fast, slow, strict=True) if f != s]
    assert not differ, differ[:2]
    assert direct >= len(cases) * 3 // 4
    assert {f[0] for f in fast} >= {"passed", "failed"}


def test_a_testbench_the_preprocessor_complains_about_goes_through_the_launcher(tmp_path):
    """A testbench whose preprocessing prints anything (here: an `include it cannot find) is not captured: the
    launcher compiles it, and its message stays the launcher's."""
    from rtlreward_hdl import simrun

    ctx = make_ctx(tmp_path, TASK, files={"TopModule.sv": "module TopModule; endmodule\n"})
    root = tmp_path / "root"
    root.mkdir()
    harness = {"tb.sv": '`include "missing.vh"\nmodule tb; TopModule t(); endmodule\n'}
    argv = ["iverilog", "-g2012", "-s", "tb", "-o", "_rtlreward_sim.vvp", "./TopModule.sv", "tb.sv"]
    answer = {"TopModule.sv": "module TopModule; endmodule\n"}
    got = simrun._direct_compile(
        ctx, root, argv, answer, ["TopModule.sv"], harness, ["tb.sv"], simrun.new_tag()
    )
    assert got is None
    assert not list(root.glob("_rtlreward_capture_*"))  # the capture's folder is gone


# -- found by a red-team pass ---------------------------------------------------------------------------------------
M = "module TopModule(input a, output y);\n  assign y = a;\nendmodule\n"


@pytest.mark.parametrize(
    "text",
    [
        "// "
        + "x" * 16380
        + "\n"
        + M,  # Icarus's preprocessor overflows, its compiler does not: the launcher fails
        M + "// " + "x" * 20000 + "\n",  # the compiler overflows, the preprocessor's cut output compiles
    ],
    ids=["comment-before", "comment-after"],
)
def test_a_line_past_the_lexers_buffers_goes_through_the_launcher(tmp_path, monkeypatch, text):
    """A token past flex's buffer (~16 KB) is cut one character apart by Icarus's preprocessor and its compiler:
    such a text is not `inert` (no line over 4096 characters), so the launcher decides, as before."""
    assert not inert([text])
    ex = Recording()
    fast = _compile(tmp_path / "f", ex, text, False, monkeypatch)
    assert [a[0] for a in ex.argvs] == ["iverilog"]
    assert fast == _compile(tmp_path / "s", ex, text, True, monkeypatch)


def test_an_answer_folder_with_the_direct_files_name_leaves_it_to_the_launcher(tmp_path, monkeypatch):
    """An answer may hold a folder named like the files the direct command writes: the launcher runs, the stage
    does not break."""
    task = Task(id="direct", expected_files=[], toplevel="TopModule")
    files = {"TopModule.sv": M, f"{icarus.CONFIG_FILE}/x.v": "module x; endmodule\n"}
    ctx = make_ctx(tmp_path, task, files=files)
    ex = Recording()
    ctx.executor = ex
    r = get_registry().stages()["compile"].run(ctx)
    assert r.status.value == "passed", r.diagnostics
    assert [a[0] for a in ex.argvs] == ["iverilog"]
    (tmp_path / "taken").mkdir()
    assert not icarus.place(tmp_path, {"taken": "x"})


def test_an_answer_file_named_like_a_harness_file_is_the_harness_s(tmp_path, monkeypatch):
    """`./Prob001_zero_test.sv` is the testbench's own file: the harness's copy wins the clash through `ivl` and
    through the launcher alike (the answer's copy was compiled by the one and overwritten for the other)."""
    from verilog_eval_helpers import run_harness

    from rtlreward.integration import load_tasks
    from rtlreward_hdl import simrun

    task = load_tasks("verilog-eval", skip_known_issues=True, limit=1)[0]
    ref = next(iter(task.reference.values()))
    name = next(n for n in task.harness.options["testbench"] if n.endswith("_test.sv"))
    forged = {
        "TopModule.sv": ref,
        f"./{name}": 'module tb; initial $display("Mismatches: 0 in 1 samples"); endmodule\n',
    }
    alone = {f"./{name}": ref}
    fast = [run_harness(task, f, tmp_path / f"f{i}") for i, f in enumerate((forged, alone))]
    monkeypatch.setattr(simrun, "_direct_compile", lambda *a, **k: None)
    slow = [run_harness(task, f, tmp_path / f"s{i}") for i, f in enumerate((forged, alone))]
    assert [r.status.value for r in fast] == [r.status.value for r in slow] == ["passed", "failed"]
    assert fast[0].metrics.get("mismatches") == 0 and fast[0].metrics.get("samples", 1) > 1
