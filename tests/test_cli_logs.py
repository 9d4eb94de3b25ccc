"""What the CLI says in a log and in its help (issue 19): `tasks check` prints progress lines when stderr is not
a terminal (a CI log) and takes `--filter ids=` like every other command; `-h` texts show every option whole and
agree with the docs. Real commands in subprocesses (stderr a pipe, as in a log)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COUNTER = ROOT / "examples" / "counter"


def cli(*args: str, tmp: Path, columns: int = 80) -> subprocess.CompletedProcess:
    env = {**os.environ, "RTLREWARD_CACHE_DIR": str(tmp / "cache"), "COLUMNS": str(columns)}
    env.pop("FORCE_COLOR", None)
    return subprocess.run(
        [sys.executable, "-m", "rtlreward", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp,
    )


def test_tasks_check_prints_progress_lines_in_a_log_and_takes_filter(tmp_path):
    args = ["tasks", "check", str(ROOT / "examples"), "--seeds", "1", "--mutants", "2", "--no-stubs"]
    res = cli(*args, "--filter", "ids=counter", "--no-cache", tmp=tmp_path)
    assert res.returncode in (0, 1), res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("tasks check: ")]
    assert any(ln.startswith("tasks check: reference runs ") for ln in lines), res.stderr
    assert any(ln.endswith("1/1") for ln in lines), lines  # the last line of a phase says it is done
    assert "counter" in res.stdout and "fixed_priority_arbiter" not in res.stdout
    quiet = cli("-q", *args, "--filter", "ids=counter", tmp=tmp_path)
    assert "tasks check: " not in quiet.stderr
    # the table names each reference's synthesis (issue 17) where the synth stage is installed
    wide = cli(*args, "--filter", "ids=counter", tmp=tmp_path, columns=300)
    assert "synthesis" in wide.stdout and "clean (" in wide.stdout and "cells" in wide.stdout, wide.stdout


def test_help_shows_every_option_whole_on_80_columns(tmp_path):
    for command in (["serve"], ["tasks", "check"], ["eval"], ["sample"], ["report"]):
        res = cli(*command, "-h", tmp=tmp_path, columns=80)
        assert res.returncode == 0, res.stderr
        assert "…" not in res.stdout, f"{command}: an option name or help cut at 80 columns\n{res.stdout}"
    serve = cli("serve", "-h", tmp=tmp_path).stdout
    assert "--dataset" in serve
    check = cli("tasks", "check", "-h", tmp=tmp_path).stdout
    assert "median" in check and "slowest" not in check  # what the code does and the docs say


def _complete(words: str, tmp: Path) -> list[str]:
    """What Tab offers for the last word of `words` (bash's protocol, through the real command)."""
    env = {**os.environ, "_RTLREWARD_COMPLETE": "complete_bash", "COMP_WORDS": words}
    env["COMP_CWORD"] = str(len(words.split()) - (0 if words.endswith(" ") else 1))
    res = subprocess.run(
        [sys.executable, "-m", "rtlreward"], capture_output=True, text=True, env=env, timeout=120, cwd=tmp
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


def test_tab_completes_profiles_and_datasets(tmp_path):
    (tmp_path / "mine.toml").write_text('extends = "seed"\nname = "mine"\n')
    assert {"seed", "shaped", "strict"} <= set(_complete("rtlreward eval verilog-eval -p s", tmp_path))
    assert "mine.toml" in _complete("rtlreward score examples -p mi", tmp_path)
    assert "verilog-eval" in _complete("rtlreward eval veri", tmp_path)
    assert "rtllm" in _complete("rtlreward score rt", tmp_path)


def test_default_results_file_is_named_after_the_profile_a_file_declares(tmp_path):
    profile = tmp_path / "my-experiment.toml"
    profile.write_text('extends = "seed"\nname = "seed-nolint"\n')
    completions = tmp_path / "c.jsonl"
    reply = (ROOT / "examples" / "fixed_priority_arbiter" / "completions" / "correct.txt").read_text()
    completions.write_text(json.dumps({"id": "fixed_priority_arbiter", "completion": reply}) + "\n")
    res = cli(
        "eval",
        str(ROOT / "examples" / "fixed_priority_arbiter"),
        "-c",
        str(completions),
        "-p",
        str(profile),
        tmp=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    made = sorted(p.name for p in (tmp_path / "results").iterdir())
    assert made == ["c.fixed_priority_arbiter.seed-nolint.jsonl"], made


def test_what_a_plugin_author_and_a_verl_user_call_is_documented():
    """The Diagnostic fields a stage fills and compute_score_batch's parameters, read from the code, each named
    on its page: a field or keyword added later fails here until the page says what it is."""
    import inspect

    import attrs

    from rtlreward.model import Diagnostic

    plugin_page = (ROOT / "docs" / "writing-a-plugin.md").read_text()
    section = plugin_page.split("## Diagnostics a stage reports", 1)[1].split("\n## ", 1)[0]
    for f in attrs.fields(Diagnostic):
        assert f"| `{f.name}` |" in section, f"Diagnostic.{f.name} is not in writing-a-plugin.md"

    import rtlreward_verl

    verl_page = (ROOT / "docs" / "trainers" / "verl.md").read_text()
    for name in inspect.signature(rtlreward_verl.compute_score_batch).parameters:
        assert name in verl_page, f"compute_score_batch's {name} is not in docs/trainers/verl.md"


def test_eval_prints_a_progress_line_per_tenth_in_a_log(tmp_path):
    """In a log (stderr a pipe) eval says how far it is as it goes, not only one bar at the end; -q hides it."""
    replies = [
        {"id": "fixed_priority_arbiter", "sample": i, "completion": text}
        for i, name in enumerate(["correct", "reversed_priority", "syntax_error", "renamed_ports", "correct"] * 2)
        for text in [(ROOT / "examples" / "fixed_priority_arbiter" / "completions" / f"{name}.txt").read_text()]
    ]
    comp = tmp_path / "replies.jsonl"
    comp.write_text("".join(json.dumps(r) + "\n" for r in replies))
    args = ["eval", str(ROOT / "examples"), "-c", str(comp), "-p", "strict", "-j", "2"]
    res = cli(*args, "-o", str(tmp_path / "a.jsonl"), tmp=tmp_path)
    assert res.returncode in (0, 1), res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("scoring: ")]
    assert len(lines) == 10 and lines[-1].startswith("scoring: 10/10 (100%), 4 passed"), res.stderr
    quiet = cli("-q", *args, "-o", str(tmp_path / "b.jsonl"), tmp=tmp_path)
    assert "scoring: " not in quiet.stderr
