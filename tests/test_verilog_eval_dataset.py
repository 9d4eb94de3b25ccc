"""The `verilog-eval` dataset: problems as Tasks, filters, detection, default location, the official prompt."""

from __future__ import annotations

import shutil

import pytest
from verilog_eval_helpers import RTLLM_DATA, VE_DATA, needs_verilog_eval

from rtlreward.plugins import get_registry
from rtlreward_verilog_eval.dataset import KNOWN_REFERENCE_FAILURES, SYSTEM_PROMPT, VerilogEvalDataset

pytestmark = needs_verilog_eval


@pytest.fixture(scope="module")
def tasks():
    return VerilogEvalDataset().load(VE_DATA)


def test_registered_as_dataset_and_harness():
    reg = get_registry()
    assert isinstance(reg.datasets()["verilog-eval"], VerilogEvalDataset)
    assert reg.harnesses()["verilog-eval"].kind == "verilog-eval"


def test_every_problem_is_a_task(tasks):
    assert len(tasks) == 156
    ids = [t.id for t in tasks]
    assert ids[0] == "Prob001_zero" and ids[-1] == "Prob156_review2015_fancytimer"
    assert len(set(ids)) == 156
    for t in tasks:
        assert t.expected_files == ("TopModule.sv",)
        assert t.toplevel == "TopModule"
        ref = t.reference["TopModule.sv"]
        assert "module TopModule" in ref and "RefModule" not in ref
        h = t.harness
        assert h.kind == "verilog-eval"
        assert set(h.files) == {f"{t.id}_test.sv", f"{t.id}_ref.sv"}
        assert h.options["testbench"] == [f"{t.id}_test.sv", f"{t.id}_ref.sv"]  # the Makefile's order
        assert "module RefModule" in h.files[f"{t.id}_ref.sv"]  # the harness keeps the original names
        assert "TopModule" in h.files[f"{t.id}_test.sv"]
    assert {t.id for t in tasks if "known_issue" in t.metadata} == set(KNOWN_REFERENCE_FAILURES)


def test_prompt_is_the_benchmarks_own(tasks):
    t = next(x for x in tasks if x.id == "Prob035_count1to10")
    spec = (VE_DATA / "dataset_spec-to-rtl" / "Prob035_count1to10_prompt.txt").read_text()
    assert t.system_prompt == SYSTEM_PROMPT
    assert t.prompt.startswith("Question:\n" + spec.strip())
    assert "Enclose your code with [BEGIN] and [DONE]" in t.prompt
    assert t.prompt.endswith("Answer:\n")
    assert "implement a module named TopModule" in t.prompt
    plain = VerilogEvalDataset().load(VE_DATA, ids="Prob035", prompt_style="spec")[0]
    assert plain.prompt == spec.strip() + "\n" and plain.system_prompt == ""


def test_interface_comes_from_the_renamed_reference(tasks):
    from rtlreward_interface import expected_interface

    t = next(x for x in tasks if x.id == "Prob035_count1to10")
    iface = expected_interface(t)
    assert iface.module == "TopModule"
    assert {(p.name, p.direction, p.width) for p in iface.ports} == {
        ("clk", "input", 1),
        ("reset", "input", 1),
        ("q", "output", 4),
    }


def test_filters_ids_limit():
    ds = VerilogEvalDataset()
    got = ds.load(VE_DATA, ids="Prob001_zero,2,step_one,Prob004")
    assert [t.id for t in got] == ["Prob001_zero", "Prob002_m2014_q4i", "Prob003_step_one", "Prob004_vector2"]
    assert [t.id for t in ds.load(VE_DATA, ids=["Prob010_mt2015_q4a"])] == ["Prob010_mt2015_q4a"]
    assert [t.id for t in ds.load(VE_DATA, id="Prob005")] == ["Prob005_notgate"]  # `--filter id=...`
    assert len(ds.load(VE_DATA, limit=3)) == 3
    assert [t.id for t in ds.load(VE_DATA, ids="1,2,3", limit=2)] == ["Prob001_zero", "Prob002_m2014_q4i"]
    kept = ds.load(VE_DATA, skip_known_issues=True)
    assert len(kept) == 151 and not any("known_issue" in t.metadata for t in kept)
    with pytest.raises(ValueError, match="no problem Prob999"):
        ds.load(VE_DATA, ids="Prob999")
    with pytest.raises(ValueError, match="unknown filter"):
        ds.load(VE_DATA, category="x")
    with pytest.raises(ValueError, match="prompt_style"):
        ds.load(VE_DATA, prompt_style="chat")


def test_detect_and_source_forms(tmp_path):
    ds = VerilogEvalDataset()
    assert ds.detect(VE_DATA)
    assert ds.detect(VE_DATA / "dataset_spec-to-rtl")
    assert not ds.detect(tmp_path)
    assert not ds.detect(tmp_path / "missing")
    if RTLLM_DATA.is_dir():
        assert not ds.detect(RTLLM_DATA)
    # A folder of just two problems loads as the dataset too.
    sub = tmp_path / "two"
    sub.mkdir()
    for name in ("Prob001_zero", "Prob007_wire"):
        for kind in ("prompt.txt", "ref.sv", "test.sv"):
            shutil.copy(VE_DATA / "dataset_spec-to-rtl" / f"{name}_{kind}", sub)
    assert ds.detect(sub)
    assert [t.id for t in ds.load(sub)] == ["Prob001_zero", "Prob007_wire"]
    # The code-completion variant (with *_ifc.txt) is a different dataset.
    (sub / "Prob001_zero_ifc.txt").write_text("module TopModule(output zero);")
    assert not ds.detect(sub)


def test_default_source_and_helpful_error(tmp_path, monkeypatch):
    import rtlreward_hdl.data as data

    ds = VerilogEvalDataset()
    assert len(ds.load(limit=2)) == 2  # found at ../shared/data/verilog-eval beside the project
    monkeypatch.setenv("RTLREWARD_VERILOG_EVAL", str(VE_DATA))
    monkeypatch.setattr(data, "project_root", lambda: tmp_path / "nowhere" / "project")
    monkeypatch.chdir(tmp_path)
    assert len(ds.load(limit=1)) == 1  # the environment variable
    monkeypatch.delenv("RTLREWARD_VERILOG_EVAL")
    with pytest.raises(ValueError) as err:
        ds.load()
    assert "--source" in str(err.value) and "RTLREWARD_VERILOG_EVAL" in str(err.value)
    with pytest.raises(ValueError, match="no VerilogEval spec-to-rtl problems"):
        ds.load(tmp_path)
