"""An answer that runs into a sandbox limit fails; it never turns its failure into an environment `error`.

Three designs, each the task's own reference plus one hostile line, with the real tools: a 2^30-word memory (the
simulator cannot allocate it: `std::bad_alloc`), an automatic function that recurses 10^8 deep (the stack runs
out: SIGSEGV) and a string that doubles every clock (memory again). Under the cocotb runner, the CVDP harness
(local, and one case in Docker) and the VerilogEval testbench runner each ends the `tests` stage `failed` with a
`resource-limit` diagnostic naming the limit. A run that ends some other way without a verdict stays an `error`
(`rtlreward.sandbox.resource_exhaustion` says None). A lone surrogate in a reply (half an emoji) passes every stage
through `Engine.score` and through `rtlreward eval` from a completions file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hdl_stage_helpers import EXAMPLES, example_task, make_ctx
from sandbox_helpers import sim_docker_executor

from rtlreward.model import Candidate, Status
from rtlreward.sandbox import Limits, resource_exhaustion
from rtlreward.sandbox.local import LocalExecutor

needs_icarus = pytest.mark.skipif(shutil.which("iverilog") is None, reason="needs Icarus Verilog")

MEMORY_MB = 1024  # small, so a blow-up ends in seconds; the references pass under it
HOSTILE = {
    "memory": "  logic [31:0] big [0:(1<<30)-1];\n  initial big[5] = 1;\n",
    "recursion": (
        "  function automatic integer deep(input integer n);\n"
        "    if (n <= 0) deep = 0; else deep = deep(n - 1) + 1;\n"
        "  endfunction\n"
        "  integer depth;\n"
        "  initial depth = deep(100000000);\n"
    ),
    "string": '  string s = "x";\n  initial forever #1 s = {s, s};\n',
}
LIMIT = {"memory": "memory", "recursion": "stack", "string": "memory"}


def with_line(design: str, line: str) -> str:
    """`design` with `line` put right after its first module header."""
    at = design.index(";", design.index("module ")) + 1
    return design[:at] + "\n" + line + design[at:]


def assert_limit(res, case: str) -> None:
    assert res.status is Status.FAILED, (res.status, [d.message for d in res.diagnostics])
    found = [d for d in res.diagnostics if d.code == "resource-limit"]
    assert found, [d.message for d in res.diagnostics]
    assert found[0].fields["limit"] == LIMIT[case]
    if LIMIT[case] == "memory":
        assert f"memory limit ({MEMORY_MB} MiB)" in found[0].message
    else:
        assert "stack limit" in found[0].message


# -- the classification itself ---------------------------------------------------------------------------------
def test_classifier_names_each_limit_and_leaves_other_endings_alone():
    lim = Limits(memory_mb=512, file_size_mb=8, pids=40)
    bad_alloc = "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc"
    assert resource_exhaustion(bad_alloc, 134, limits=lim).limit == "memory"
    assert "(512 MiB)" in resource_exhaustion(bad_alloc, -6, limits=lim).message
    assert resource_exhaustion("x\n[killed: out of memory]", -9, limits=lim).limit == "memory"
    assert resource_exhaustion("RuntimeError: Command failed with return code: -11", 5).limit == "stack"
    assert resource_exhaustion("", 139).limit == "stack"
    fsize = resource_exhaustion("", -25, limits=lim)
    assert fsize.limit == "file_size" and "(8 MiB)" in fsize.message
    assert (
        resource_exhaustion("sh: fork: Resource temporarily unavailable", 2, limits=lim).limit == "processes"
    )
    assert resource_exhaustion("lots of output", 1, truncated=True).limit == "output"
    # Our faults and the harness's: no limit, so the runner keeps its `error`.
    for ours in (
        "ERROR: iverilog executable not found!",
        "ModuleNotFoundError: No module named 'cocotb'",
        "docker: Cannot connect to the Docker daemon",
        "RuntimeError: Command failed with return code: 2",
    ):
        assert resource_exhaustion(ours, 1) is None, ours


# -- cocotb runner, local executor -----------------------------------------------------------------------------
@needs_icarus
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_cocotb_runner_design_at_a_limit_fails(case, tmp_path: Path):
    from rtlreward_cocotb import CocotbRunner

    task = example_task("fixed_priority_arbiter")
    ref = (EXAMPLES / "fixed_priority_arbiter" / "reference" / "fixed_priority_arbiter.sv").read_text()
    files = {"rtl/fixed_priority_arbiter.sv": with_line(ref, HOSTILE[case])}
    ctx = make_ctx(task, files, tmp_path, LocalExecutor(), timeout=30)
    ctx.memory_mb = MEMORY_MB
    res = CocotbRunner().run(ctx)
    assert_limit(res, case)
    assert res.metrics["resource_limit"] == LIMIT[case]


# -- CVDP harness ----------------------------------------------------------------------------------------------
def _cvdp_run(case: str, tmp: Path, executor):
    from cvdp_harness_helpers import EXAMPLE_NONAGENTIC, problem

    from cvdp_adapter.runner import CvdpHarnessRunner
    from rtlreward.stage import StageContext

    task, ref = problem(EXAMPLE_NONAGENTIC, 0)
    (path, design), *_ = ref.items()
    files = {path: with_line(design, HOSTILE[case])}
    tmp.mkdir(parents=True, exist_ok=True)
    ctx = StageContext(
        task=task,
        candidate=Candidate(files=files),
        workspace=tmp,
        executor=executor,
        files=files,
        seed=1234,
        timeout=60,
        memory_mb=MEMORY_MB,
        options={"service_timeout": 60},
    )
    return CvdpHarnessRunner().run(ctx)


@needs_icarus
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_cvdp_harness_design_at_a_limit_fails(case, tmp_path: Path):
    ex = LocalExecutor()
    if not ex.supports_binds:
        pytest.skip("bubblewrap is not usable here")
    res = _cvdp_run(case, tmp_path, ex)
    assert_limit(res, case)
    assert res.metrics["resource_limit"] == LIMIT[case]
    assert all(d.code != "harness-error" for d in res.diagnostics)


@pytest.mark.docker
def test_cvdp_harness_in_docker_design_at_the_memory_limit_fails(tmp_path: Path):
    ex = sim_docker_executor()
    try:
        res = _cvdp_run("memory", tmp_path, ex)
    finally:
        ex.close()
    assert res.metrics["cvdp_runner"] == "docker"
    assert_limit(res, "memory")


# -- VerilogEval testbench runner (already `failed`; now it names the limit) -----------------------------------
@needs_icarus
@pytest.mark.parametrize("case", ["memory", "recursion"])
def test_verilog_eval_design_at_a_limit_names_it(case, tmp_path: Path):
    from verilog_eval_helpers import VE_DATA, needs_verilog_eval, run_harness  # noqa: F401

    from rtlreward.plugins import get_registry

    if not (VE_DATA / "dataset_spec-to-rtl").is_dir():
        pytest.skip("VerilogEval data not at ../shared/data/verilog-eval")
    (task,) = get_registry().datasets()["verilog-eval"].load(VE_DATA, ids="Prob001_zero")
    design = with_line("module TopModule(output zero);\n  assign zero = 1'b0;\nendmodule\n", HOSTILE[case])
    design = design.replace("logic [31:0]", "reg [31:0]")
    from rtlreward.stage import StageContext

    tmp_path.mkdir(exist_ok=True)
    registry = get_registry()
    files = {task.expected_files[0]: design}
    ctx = StageContext(
        task=task,
        candidate=Candidate(files=files),
        workspace=tmp_path,
        executor=LocalExecutor(),
        files=files,
        timeout=30,
        memory_mb=MEMORY_MB,
        registry=registry,
    )
    res = registry.harnesses()[task.harness.kind].run(ctx)
    assert_limit(res, case)
    assert res.feedback.startswith("the design ")


# -- a lone surrogate in a reply -------------------------------------------------------------------------------
SURROGATE = "\ud83d"


def _surrogate_reply() -> str:
    ref = (EXAMPLES / "fixed_priority_arbiter" / "reference" / "fixed_priority_arbiter.sv").read_text()
    return f"```systemverilog\n// half an emoji: {SURROGATE}\n{ref}```\n"


@needs_icarus
def test_surrogate_reply_scores_like_its_design_through_engine_score(tmp_path: Path, monkeypatch):
    from rtlreward.engine import Engine
    from rtlreward.integration import load_tasks

    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))
    task = load_tasks(str(EXAMPLES / "fixed_priority_arbiter"))[0]
    reward = Engine(profile="shaped").score(task, Candidate(text=_surrogate_reply()))
    statuses = {n: r.status for n, r in reward.stages.items()}
    assert Status.ERROR not in statuses.values(), {
        n: [d.message for d in r.diagnostics] for n, r in reward.stages.items()
    }
    assert reward.passed and statuses["safety"] is Status.PASSED and statuses["tests"] is Status.PASSED
    files = reward.stages["format"].artifacts["files"]
    assert "\\ud83d" in next(iter(files.values()))  # what every stage and tool saw: the escape, as written


@needs_icarus
def test_surrogate_reply_from_a_completions_file_through_rtlreward_eval(tmp_path: Path):
    ref = (EXAMPLES / "fixed_priority_arbiter" / "reference" / "fixed_priority_arbiter.sv").read_text()
    rows = [
        {"id": "fixed_priority_arbiter", "sample": 0, "completion": _surrogate_reply()},
        {
            "id": "fixed_priority_arbiter",
            "sample": 1,
            "files": {"rtl/fixed_priority_arbiter.sv": f"// {SURROGATE}\n{ref}"},
        },
    ]
    comp = tmp_path / "c.jsonl"
    comp.write_text("".join(json.dumps(r) + "\n" for r in rows))  # ensure_ascii: the file holds "\ud83d"
    assert "\\ud83d" in comp.read_text()
    out = tmp_path / "out.jsonl"
    task_dir = str(EXAMPLES / "fixed_priority_arbiter")
    argv = [sys.executable, "-m", "rtlreward", "-q", "eval", task_dir, "-c", str(comp), "-o", str(out)]
    proc = subprocess.run(
        [*argv, "--keep-replies", "-j", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RTLREWARD_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    got = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    assert sorted(r["sample"] for r in got) == [0, 1]
    for row in got:
        assert {s["status"] for s in row["stages"].values()} == {"passed"}, row["stages"]
    reply = next(r for r in got if r["sample"] == 0)["reply"]
    assert reply == _surrogate_reply()  # the row keeps the reply exactly (written as the JSON escape)


def test_write_files_and_well_formed_agree_on_a_lone_surrogate(tmp_path: Path):
    from rtlreward.stage import well_formed, write_files

    text = f"// a {SURROGATE} b \udc80\nmodule m; endmodule\n"
    (dest,) = write_files(tmp_path, {"m.sv": text})
    assert (
        dest.read_text(encoding="utf-8")
        == well_formed(text)
        == "// a \\ud83d b \\udc80\nmodule m; endmodule\n"
    )
    assert well_formed("plain ü text") == "plain ü text"
