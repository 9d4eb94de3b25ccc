"""`rtlreward corpus curriculum` (issue 18): difficulty from a real results file (`rtlreward eval` under `equiv`,
real Yosys/Icarus), problems whose samples all earned the same reward dropped (a GRPO group with equal rewards
teaches nothing), the rest written easy to hard."""

from __future__ import annotations

import json

import typer
from corpus_gen import problems, write
from typer.testing import CliRunner

from rtlreward_corpus.cli import add_commands
from rtlreward_corpus.curriculum import schedule, select, task_stats
from rtlreward_corpus.load import read_corpus, read_rows
from rtlreward_hdl.mutate import mutants


def _app() -> typer.Typer:
    app = typer.Typer()
    add_commands(app)
    return app


def test_curriculum_from_eval_results(tmp_path):
    from rtlreward.cli import app as root  # the real `rtlreward eval` writes the results file read here

    recs = problems(5, seed=8)
    corpus = write(tmp_path / "c.jsonl", recs)
    tasks, _ = read_corpus(corpus)
    a, b, c, d, e = tasks
    ref = {t.id: t.reference[t.expected_files[0]] for t in tasks}
    bad_b = next(iter(mutants(b.reference, limit=1))).files[b.expected_files[0]]
    bad_e = next(iter(mutants(e.reference, limit=1))).files[e.expected_files[0]]
    lines = (
        [(a.id, ref[a.id])] * 3  # solved every time: flat
        + [(b.id, ref[b.id]), (b.id, bad_b), (b.id, "no code at all")]  # disagree, 1 of 3
        + [(c.id, "no code")] * 3  # never solved: flat
        + [(e.id, ref[e.id]), (e.id, ref[e.id]), (e.id, bad_e)]  # disagree, 2 of 3
    )  # d: never tried
    completions = tmp_path / "completions.jsonl"
    completions.write_text(
        "".join(json.dumps({"id": i, "completion": f"```verilog\n{t}```"}) + "\n" for i, t in lines)
    )
    results = tmp_path / "results.jsonl"
    res = CliRunner().invoke(
        root, ["eval", str(corpus), "-c", str(completions), "-p", "equiv", "-o", str(results), "-j", "2"]
    )
    assert res.exit_code == 0, res.output
    stats = task_stats([results])
    assert stats[a.id]["spread"] == 0 and stats[a.id]["pass_rate"] == 1
    assert stats[c.id]["spread"] == 0 and stats[c.id]["pass_rate"] == 0
    assert stats[b.id]["spread"] > 0 and stats[b.id]["pass_rate"] == round(1 / 3, 4)
    assert stats[e.id]["pass_rate"] == round(2 / 3, 4)
    assert [t.id for t in select(tasks, stats)] == [b.id, d.id, e.id]
    assert [t.id for t in select(tasks, stats, keep_unseen=False)] == [b.id, e.id]
    assert next(t.id for t in schedule(select(tasks, stats), stats)) == e.id  # 2/3 passes: the easiest

    out, report = tmp_path / "ordered.jsonl", tmp_path / "curriculum.json"
    res = CliRunner().invoke(
        _app(),
        ["corpus", "curriculum", str(corpus), "-r", str(results), "-o", str(out), "--report", str(report)],
    )
    assert res.exit_code == 0, res.output
    order = [r["id"] for r in read_rows(out)]
    assert order == [t.id for t in schedule(select(tasks, stats), stats)]
    assert (
        order[0] == e.id
        and set(order) == {b.id, d.id, e.id}
        and "2 whose samples all earned the same reward" in res.stdout
    )
    assert json.loads(report.read_text())["order"] == order
    res = CliRunner().invoke(
        _app(), ["corpus", "curriculum", str(corpus), "-r", str(tmp_path / "none.jsonl"), "-o", str(out)]
    )
    assert res.exit_code == 2 and "no such results file" in res.output
