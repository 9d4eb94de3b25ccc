"""The `corpus` dataset (issue 18): reference-carrying JSONL/Parquet corpora in the public corpora's shapes (fixtures
written by tests/corpus_gen.py, not copies of their data), the field mapping from filters and rtlreward.toml, module
and interface found from the reference by pyslang, deterministic hash splits, and the tasks scored under `equiv`
with the real tools (Yosys, Icarus)."""

from __future__ import annotations

import json
import pickle

import pytest
from corpus_gen import problems, write
from typer.testing import CliRunner

from rtlreward.engine import Engine
from rtlreward.integration import load_tasks, resolve_dataset
from rtlreward.model import Candidate
from rtlreward_corpus.load import CorpusError, field_map, read_corpus
from rtlreward_corpus.split import parse_ratios, split_of

SCHEMAS = ("generic", "rtlcoder", "verithoughts", "codev-r1")


@pytest.fixture(scope="module")
def records():
    return problems(60, seed=3)


@pytest.mark.parametrize("schema", SCHEMAS)
def test_each_public_shape_loads_with_its_schema(tmp_path, records, schema):
    path = write(tmp_path / f"{schema}.jsonl", records, schema)
    name, _, _ = resolve_dataset(str(path))
    assert name == "corpus"  # detected from the first record's fields
    tasks = load_tasks(str(path), schema=schema)
    assert len(tasks) == len(records)
    for rec, t in zip(records, tasks, strict=True):
        assert rec["reference"].strip() in t.reference[t.expected_files[0]]
        assert rec["prompt"] in t.prompt
        assert t.toplevel and t.toplevel in rec["reference"].split("(")[0]
        outputs = [p for p in t.interface.ports if p.direction == "output"]
        assert outputs and all(p.width for p in t.interface.ports)
    if schema in ("generic", "codev-r1"):
        assert [t.id for t in tasks] == [r["id"] for r in records]
    if schema == "codev-r1":
        assert tasks[0].system_prompt == "You write Verilog."  # the chat's system turn
    if schema == "rtlcoder":
        assert "```verilog\nmodule" in tasks[0].prompt  # the Input header rides with the instruction


def test_parquet_reads_like_jsonl(tmp_path, records):
    pytest.importorskip("pyarrow")
    a = load_tasks(str(write(tmp_path / "c.parquet", records, "codev-r1")), schema="codev-r1")
    b = load_tasks(str(write(tmp_path / "c.jsonl", records, "codev-r1")), schema="codev-r1")
    assert [t.fingerprint() for t in a] == [t.fingerprint() for t in b]


def test_two_thousand_problems_load(tmp_path):
    tasks, rejected = read_corpus(write(tmp_path / "big.jsonl", problems(2000)), field_map("generic"))
    assert len(tasks) == 2000 and not rejected
    assert len({t.id for t in tasks}) == 2000


def test_bad_rows_are_rejected_with_a_reason(tmp_path):
    good = problems(2)
    rows = [
        *good,
        {"prompt": "no design", "reference": "I cannot do that"},
        {"prompt": "", "reference": good[0]["reference"]},
        {"prompt": "broken", "reference": "module m(input a, output b); assign b = ; endmodule"},
        {"prompt": "no outputs", "reference": "module m(input a); endmodule"},
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks, rejected = read_corpus(path, field_map("generic"))
    assert len(tasks) == 2
    reasons = {r.row: r.reason for r in rejected}
    assert "no module" in reasons[2] and "no prompt" in reasons[3] and "no output" in reasons[5]
    assert 4 in reasons
    pickled = tmp_path / "pickled.parquet"
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"prompt": "p", "reference": pickle.dumps({"a": 1})}]), pickled)
    with pytest.raises(CorpusError, match="unpickle"):
        read_corpus(pickled, field_map("generic"))


def test_mapping_from_filters_and_project_file(tmp_path, monkeypatch, records):
    rows = [
        {"q": {"text": r["prompt"]}, "golden": r["reference"], "level": r["difficulty"]} for r in records[:5]
    ]
    path = tmp_path / "own.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    from rtlreward_corpus import CorpusDataset

    tasks = CorpusDataset().load(path, fields="prompt=q.text,reference=golden,difficulty=level")
    assert [t.difficulty for t in tasks] == [r["difficulty"] for r in records[:5]]
    with pytest.raises(CorpusError, match="unknown mapping key"):
        CorpusDataset().load(path, fields="prompts=q.text")
    conf = tmp_path / "rtlreward.toml"
    conf.write_text('profile = "equiv"\n[corpus]\nfields = { prompt = "q.text", reference = "golden" }\n')
    monkeypatch.setenv("RTLREWARD_CONFIG", str(conf))
    assert resolve_dataset(str(path))[0] == "corpus"  # detected through the project's mapping
    assert len(load_tasks(str(path))) == 5


def test_splits_are_deterministic_and_keep_copies_together(records):
    tasks, _ = read_corpus_from(records)
    ratios = parse_ratios("train=0.8,validation=0.1,test=0.1")
    first = {t.id: split_of(t, ratios) for t in tasks}
    again, _ = read_corpus_from(records[::-1] + problems(30, seed=9))
    assert all(first[t.id] == split_of(t, ratios) for t in again if t.id in first)
    counts = {s: list(first.values()).count(s) for s in ("train", "validation", "test")}
    assert counts["train"] > counts["validation"] > 0 and counts["test"] > 0
    same = [t for t in tasks if t.reference == tasks[0].reference]
    reworded = [*same, tasks[0].__class__(id="copy", prompt="other words", reference=tasks[0].reference)]
    assert len({split_of(t, ratios) for t in reworded}) == 1
    assert {split_of(t, ratios, seed=1) for t in tasks} == {"train", "validation", "test"}
    with pytest.raises(ValueError, match="name=weight"):
        parse_ratios("train:0.8")


def read_corpus_from(records):
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp())
    return read_corpus(write(folder / "c.jsonl", records), field_map("generic"))


def test_split_filter_partitions_the_corpus(tmp_path, records):
    path = str(write(tmp_path / "c.jsonl", records))
    parts = {s: load_tasks(path, split=s) for s in ("train", "validation", "test")}
    ids = [t.id for p in parts.values() for t in p]
    assert sorted(ids) == sorted(r["id"] for r in records)
    with pytest.raises(CorpusError, match="unknown split"):
        load_tasks(path, split="dev")


def test_corpus_tasks_score_under_equiv(tmp_path, records):
    tasks = load_tasks(str(write(tmp_path / "c.jsonl", records[:4])))
    ref = tasks[0].reference[tasks[0].expected_files[0]]
    from rtlreward_hdl.mutate import mutants

    bad = mutants(tasks[0].reference, limit=4)
    items = [(tasks[0], Candidate(text=f"```verilog\n{ref}```"))] + [
        (tasks[0], Candidate(files=m.files, sample=i + 1)) for i, m in enumerate(bad)
    ]
    with Engine("equiv", calibrate=False) as eng:
        rewards = eng.score_batch(items)
    assert rewards[0].passed and rewards[0].total == pytest.approx(1.0)
    assert any(not r.passed for r in rewards[1:])


def cli_app():
    import typer

    from rtlreward_corpus.cli import add_commands

    app = typer.Typer()
    add_commands(app)
    return app


def test_cli_load(tmp_path, records):
    app = cli_app()
    path = write(tmp_path / "c.jsonl", records, "verithoughts")
    res = CliRunner().invoke(app, ["corpus", "load", str(path), "--schema", "verithoughts", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["tasks"] == len(records) and doc["rejected"] == 0
    res = CliRunner().invoke(app, ["corpus", "load", str(path), "--schema", "nope"])
    assert res.exit_code == 2 and "unknown corpus schema" in res.output
