"""`rtlreward corpus check / decontaminate / split` (issue 18) from the command line, with the real tools (pyslang,
Icarus, Yosys through the equivalence stage, in the local sandbox): a broken reference is found, identical and
equivalent references are grouped, a VerilogEval problem planted under another prompt and other names is caught
by the equivalence check, a copied benchmark prompt by its n-grams, and the clean files leave them out."""

from __future__ import annotations

import json

import pytest
import typer
from corpus_gen import problems, write
from typer.testing import CliRunner
from verilog_eval_helpers import needs_verilog_eval

from rtlreward.integration import load_tasks
from rtlreward_corpus.cli import add_commands
from rtlreward_corpus.load import read_rows


def _app() -> typer.Typer:
    app = typer.Typer()
    add_commands(app)
    return app


def _run(*args: str):
    res = CliRunner().invoke(_app(), ["corpus", *args], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    return res


XOR_A = "module x1(input a, input b, output y);\n  assign y = a ^ b;\nendmodule\n"
XOR_B = "module x2(input a, input b, output y);\n  assign y = (a & ~b) | (~a & b);\nendmodule\n"
AND_C = "module x3(input a, input b, output y);\n  assign y = a & b;\nendmodule\n"
BROKEN = "module bad(input a, output y);\n  assign y = a + missing_signal;\nendmodule\n"


def test_check_finds_broken_references_and_groups_duplicates(tmp_path):
    base = problems(3, seed=11)
    rows = [
        *base,
        {"id": "xor-a", "prompt": "xor of a and b", "reference": XOR_A},
        {"id": "xor-b", "prompt": "exclusive or, written out", "reference": XOR_B},
        {"id": "and-c", "prompt": "and of a and b", "reference": AND_C},
        {"id": "copy", "prompt": "the first problem again, reworded", "reference": base[0]["reference"]},
        {"id": "broken", "prompt": "uses a signal it never declares", "reference": BROKEN},
    ]
    corpus = write(tmp_path / "c.jsonl", rows)
    clean, report = tmp_path / "clean.jsonl", tmp_path / "report.json"
    res = _run("check", str(corpus), "-o", str(clean), "--report", str(report), "-j", "2")
    doc = json.loads(report.read_text())
    assert [e["id"] for e in doc["broken"]] == ["broken"]
    assert "compile" in doc["broken"][0]["cause"]
    groups = sorted(sorted(g) for g in doc["duplicate_groups"])
    assert groups == sorted([sorted(["xor-a", "xor-b"]), sorted([base[0]["id"], "copy"])])
    kept = [r["id"] for r in read_rows(clean)]
    assert kept == [base[0]["id"], base[1]["id"], base[2]["id"], "xor-a", "and-c"]
    assert "1 broken" in res.stdout and "2 duplicates in 2 groups" in res.stdout
    assert doc["cached"] < doc["tasks"]
    # Text-only grouping leaves the equivalent rewrite alone; the references come from the result cache now (a
    # run cut short resumes where it stopped).
    _run("check", str(corpus), "--report", str(report), "--text-duplicates")
    assert (
        json.loads(report.read_text())["cached"] == doc["tasks"]
    )  # the broken one too: a failed stage is a verdict, and verdicts are cached
    assert sorted(sorted(g) for g in json.loads(report.read_text())["duplicate_groups"]) == [
        sorted([base[0]["id"], "copy"])
    ]


# Prob041_dff8r's behaviour, written afresh: other module and port names, another port order, another prompt.
PLANTED = """module reg_bank(input clock, input [7:0] din, input rst, output reg [7:0] dout);
  always @(posedge clock) begin
    if (rst) dout <= 8'h00;
    else dout <= din;
  end
endmodule
"""
# Same interface, different behaviour (resets to all ones): must not be flagged.
NEAR = PLANTED.replace("reg_bank", "reg_bank_ff").replace("8'h00", "8'hff")


@needs_verilog_eval
def test_decontaminate_catches_a_planted_benchmark_problem(tmp_path):
    copied = load_tasks("verilog-eval", ids="Prob035")[0].prompt
    rows = [
        *problems(4, seed=21),
        {"id": "planted", "prompt": "A bank of eight flops with a synchronous clear.", "reference": PLANTED},
        {"id": "near", "prompt": "A bank of eight flops that preset on reset.", "reference": NEAR},
        {"id": "copied-prompt", "prompt": copied, "reference": XOR_A},
    ]
    corpus = write(tmp_path / "c.jsonl", rows)
    clean, report = tmp_path / "clean.jsonl", tmp_path / "report.json"
    res = _run(
        "decontaminate", str(corpus), "--against", "verilog-eval", "-o", str(clean), "--report", str(report)
    )
    doc = json.loads(report.read_text())
    by_id = {e["id"]: e for e in doc["entries"]}
    assert by_id["planted"]["equivalent_to"] == "verilog-eval:Prob041_dff8r"
    assert not by_id["planted"]["ngram_contaminated"]  # caught by the proof alone
    assert by_id["near"]["proofs"] > 0 and not by_id["near"]["contaminated"]
    assert by_id["copied-prompt"]["ngram_contaminated"]
    assert by_id["copied-prompt"]["ngram_match"].startswith("verilog-eval:Prob035")
    kept = {r["id"] for r in read_rows(clean)}
    assert "planted" not in kept and "copied-prompt" not in kept and "near" in kept
    assert "planted: verilog-eval:Prob041_dff8r" in res.stdout
    # Without the proof the renamed copy goes through: the prompt alone does not give it away.
    _run("decontaminate", str(corpus), "--against", "verilog-eval", "--no-prove", "--report", str(report))
    assert not {e["id"]: e for e in json.loads(report.read_text())["entries"]}["planted"]["contaminated"]


def test_split_files_partition_the_corpus_like_the_filter(tmp_path):
    corpus = write(tmp_path / "c.jsonl", problems(80, seed=2), "verithoughts")
    _run("split", str(corpus), "--schema", "verithoughts", "-o", str(tmp_path / "parts"), "--seed", "4")
    seen = []
    for name in ("train", "validation", "test"):
        part = tmp_path / "parts" / f"c.{name}.jsonl"
        rows = list(read_rows(part))
        seen += [r["question"] for r in rows]
        via_filter = load_tasks(str(corpus), schema="verithoughts", split=name, seed=4)
        assert [t.prompt for t in via_filter] == [r["question"] for r in rows]
    assert sorted(seen) == sorted(r["question"] for r in read_rows(corpus))


def test_unknown_benchmark_is_a_usage_error(tmp_path):
    corpus = write(tmp_path / "c.jsonl", problems(2))
    res = CliRunner().invoke(_app(), ["corpus", "decontaminate", str(corpus), "--against", "humaneval"])
    assert res.exit_code == 2 and "unknown benchmark" in res.output


@pytest.mark.parametrize("bad", ["train", "train=x"])
def test_bad_ratios_are_a_usage_error(tmp_path, bad):
    corpus = write(tmp_path / "c.jsonl", problems(2))
    res = CliRunner().invoke(_app(), ["corpus", "split", str(corpus), "-o", str(tmp_path), "--ratios", bad])
    assert res.exit_code == 2 and "name=weight" in res.output


@needs_verilog_eval
def test_near_miss_pairs_and_repairs_for_a_verilog_eval_task(tmp_path):
    from rtlreward.engine import Engine
    from rtlreward.model import Candidate

    pairs, repairs = tmp_path / "pairs.jsonl", tmp_path / "repairs.jsonl"
    res = _run(
        "near-miss", "verilog-eval", "--id", "Prob041_dff8r", "--pairs", str(pairs), "--repairs", str(repairs),
        "--per-task", "3", "-j", "2",
    )  # fmt: skip
    assert "refuted mutants for 1 of 1 tasks" in res.stdout
    task = load_tasks("verilog-eval", ids="Prob041")[0]
    reference = task.reference["TopModule.sv"].strip()
    prefs = [json.loads(line) for line in pairs.read_text().splitlines()]
    fixes = [json.loads(line) for line in repairs.read_text().splitlines()]
    assert 1 <= len(prefs) <= 3 and len(fixes) == len(prefs)
    assert len({p["rejected"][0]["content"] for p in prefs}) == len(prefs)
    for p, f in zip(prefs, fixes, strict=True):
        assert p["prompt"][-1]["role"] == "user" and "TopModule" in p["prompt"][-1]["content"]
        assert reference in p["chosen"][0]["content"]
        assert p["counterexample"].startswith("Not equivalent") and "differs" in p["counterexample"]
        assert f["messages"][-1] == p["chosen"][0] and f["messages"][-3] == p["rejected"][0]
        assert p["counterexample"] in f["messages"][-2]["content"]
    # Each rejected design is wrong, judged again from scratch under the `equiv` profile.
    with Engine("equiv", cache=False, calibrate=False) as eng:
        rewards = eng.score_batch(
            [(task, Candidate(text=p["rejected"][0]["content"], sample=i)) for i, p in enumerate(prefs)]
            + [(task, Candidate(text=prefs[0]["chosen"][0]["content"], sample=99))]
        )
    assert not any(r.passed for r in rewards[:-1]) and rewards[-1].passed
