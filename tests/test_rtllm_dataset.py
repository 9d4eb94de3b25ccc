"""The `rtllm` dataset: designs as Tasks, reference renames, data files, filters, detection, default location."""

from __future__ import annotations

import shutil

import pytest
from verilog_eval_helpers import RTLLM_DATA, VE_DATA, needs_rtllm

from rtlreward.plugins import get_registry
from rtlreward_rtllm.dataset import KNOWN_REFERENCE_FAILURES, RtllmDataset, parse_testbench, rename_top

pytestmark = needs_rtllm


@pytest.fixture(scope="module")
def tasks():
    return {t.id: t for t in RtllmDataset().load(RTLLM_DATA)}


def test_registered_as_dataset_and_harness():
    reg = get_registry()
    assert isinstance(reg.datasets()["rtllm"], RtllmDataset)
    assert reg.harnesses()["rtllm"].kind == "rtllm"


def test_every_design_is_a_task(tasks):
    assert len(tasks) == 50
    for name, t in tasks.items():
        assert t.expected_files == (f"{name}.v",)
        assert t.harness.kind == "rtllm" and "testbench.v" in t.harness.files
        assert t.harness.options["tb_top"], name
        assert t.prompt.startswith("Please act as a professional")
        # The reference declares exactly the module the testbench instantiates.
        ref = t.reference[f"{name}.v"]
        assert f"module {t.toplevel}" in ref, name
        assert "module verified_" not in ref, name
    assert {n for n, t in tasks.items() if "known_issue" in t.metadata} == set(KNOWN_REFERENCE_FAILURES)


def test_renames_and_odd_names(tasks):
    assert tasks["adder_8bit"].metadata["reference_renamed"] == "verified_adder_8bit -> adder_8bit"
    assert tasks["multi_pipe_4bit"].metadata["reference_renamed"] == "verified_multi_pipe -> multi_pipe_4bit"
    assert (
        tasks["adder_pipe_64bit"].metadata["reference_renamed"] == "verified_adder_64bit -> adder_pipe_64bit"
    )
    # The folder says "substractor", the description and testbench say "subtractor".
    t = tasks["fixed_point_substractor"]
    assert t.toplevel == "fixed_point_subtractor" and t.expected_files == ("fixed_point_substractor.v",)
    assert "reference_renamed" not in t.metadata
    # Submodules keep their names; only the top is renamed.
    ref = tasks["asyn_fifo"].reference["asyn_fifo.v"]
    assert "module dual_port_RAM" in ref and "module asyn_fifo" in ref


def test_data_files_and_check_counts_travel_with_the_harness(tasks):
    assert set(tasks["asyn_fifo"].harness.files) == {"testbench.v", "rempty.txt", "tdata.txt", "wfull.txt"}
    assert set(tasks["calendar"].harness.files) == {"testbench.v", "reference.txt"}
    assert set(tasks["multi_booth_8bit"].harness.files) == {"testbench.v", "test_data.dat"}
    assert tasks["adder_8bit"].harness.options["checks"] == 100
    assert tasks["float_multi"].harness.options["checks"] == 20
    assert tasks["accu"].harness.options["checks"] is None


def test_testbench_module_helpers():
    tb = "// adder u0 (x);\nmodule tb;\n  reg a;\n  for (i = 0; i < 3; i++) begin end\n  dut #(.W(8)) u (.a(a));\nendmodule\n"
    assert parse_testbench(tb) == ("dut", "tb")
    text, old = rename_top("module verified_x(input a);\nendmodule\nmodule helper; endmodule\n", "x")
    assert old == "verified_x" and "module x(" in text and "module helper" in text
    assert rename_top("module x; endmodule", "x") == ("module x; endmodule", None)


def test_filters(tasks):
    ds = RtllmDataset()
    assert [t.id for t in ds.load(RTLLM_DATA, ids="adder_8bit,LFSR")] == ["adder_8bit", "LFSR"]
    assert [t.id for t in ds.load(RTLLM_DATA, id="accu")] == ["accu"]
    assert len(ds.load(RTLLM_DATA, limit=4)) == 4
    assert len(ds.load(RTLLM_DATA, skip_known_issues=True)) == 46
    arith = ds.load(RTLLM_DATA, category="arithmetic")
    assert len(arith) == 19 and all(t.category.startswith("Arithmetic/") for t in arith)
    assert {t.id for t in ds.load(RTLLM_DATA, category="Memory/FIFO")} == {"asyn_fifo"}
    assert tasks["adder_8bit"].category == "Arithmetic/Adder"
    with pytest.raises(ValueError, match="no design nope"):
        ds.load(RTLLM_DATA, ids="nope")
    with pytest.raises(ValueError, match="unknown filter"):
        ds.load(RTLLM_DATA, difficulty="hard")


def test_detect_and_source_forms(tmp_path):
    ds = RtllmDataset()
    assert ds.detect(RTLLM_DATA)
    assert not ds.detect(tmp_path)
    if VE_DATA.is_dir():
        assert not ds.detect(VE_DATA)
    # One design folder, a category folder; samples under _chatgpt4/ (as in the upstream repo) are skipped.
    one = RTLLM_DATA / "Arithmetic" / "Adder" / "adder_8bit"
    assert ds.detect(one) and [t.id for t in ds.load(one)] == ["adder_8bit"]
    copy = tmp_path / "RTLLM"
    shutil.copytree(RTLLM_DATA / "Arithmetic" / "Adder", copy / "Arithmetic" / "Adder")
    shutil.copytree(one, copy / "_chatgpt4" / "adder_8bit")
    assert sorted(t.id for t in ds.load(copy)) == [
        "adder_16bit",
        "adder_32bit",
        "adder_8bit",
        "adder_bcd",
        "adder_pipe_64bit",
    ]


def test_default_source_and_helpful_error(tmp_path, monkeypatch):
    import rtlreward_hdl.data as data

    ds = RtllmDataset()
    assert len(ds.load(limit=1)) == 1  # ../shared/data/rtllm beside the project
    monkeypatch.setattr(data, "project_root", lambda: tmp_path / "nowhere" / "project")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RTLREWARD_RTLLM", raising=False)
    with pytest.raises(ValueError) as err:
        ds.load()
    assert "--source" in str(err.value) and "RTLREWARD_RTLLM" in str(err.value)
    with pytest.raises(ValueError, match="no RTLLM design folders"):
        ds.load(tmp_path)
