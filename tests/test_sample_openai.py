"""`rtlreward prompts` and `rtlreward sample` against a stand-in OpenAI-compatible server on 127.0.0.1
(tests/openai_stub.py): the chats sent are the benchmark's, n samples per task land in a completions file that
`rtlreward eval` scores end to end (and `rtlreward report` renders, when that command is installed), 429/5xx are
retried, a dead endpoint or a refused key stops the run in one line, and a killed run resumes without asking
again for what it already has."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from openai_stub import StubOpenAI, last_user
from typer.testing import CliRunner

from rtlreward.evaluate import read_completions, read_results
from rtlreward.integration import load_tasks
from rtlreward.prompts import chat_for
from rtlreward_sample.cli import register

ROOT = Path(__file__).resolve().parents[1]
IDS = ["Prob001_zero", "Prob002_m2014_q4i", "Prob003_step_one", "Prob004_vector2"]
GOOD = {"Prob001_zero", "Prob003_step_one"}  # the stub answers these with the reference, the rest broken
BROKEN = "[BEGIN]\nmodule TopModule (output out);\n  assign out = ;\nendmodule\n[DONE]\n"


@pytest.fixture(scope="module")
def ve_tasks():
    return load_tasks("verilog-eval", ids=",".join(IDS))


def verilog_eval_replies(tasks) -> dict[str, str]:
    """User prompt -> the stand-in model's reply: the reference in the benchmark's [BEGIN]/[DONE] for GOOD
    tasks, a syntax error for the others."""
    out = {}
    for t in tasks:
        reply = f"[BEGIN]\n{t.reference['TopModule.sv']}\n[DONE]\n" if t.id in GOOD else BROKEN
        out[t.prompt] = reply
    return out


@pytest.fixture
def stub(ve_tasks):
    replies = verilog_eval_replies(ve_tasks)
    with StubOpenAI(lambda messages: replies.get(last_user(messages), "no idea")) as s:
        yield s


@pytest.fixture(scope="module")
def app():
    a = typer.Typer()
    register(a)
    return a


def invoke(app, *args: str, env: dict[str, str] | None = None):
    env = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", **(env or {})}
    return CliRunner().invoke(app, list(args), env=env)


def cli(*args: str, timeout: float = 300, env: dict[str, str] | None = None, cwd: Path | None = None):
    return subprocess.run(
        [sys.executable, "-m", "rtlreward", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, "OPENAI_API_KEY": "", **(env or {})},
    )


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def sample_args(stub: StubOpenAI, out: Path, *extra: str) -> list[str]:
    return [
        "sample",
        "verilog-eval",
        "--filter",
        "ids=" + ",".join(IDS),
        "--model",
        stub.model,
        "--base-url",
        stub.base_url,
        "--out",
        str(out),
        *extra,
    ]


# -- prompts --------------------------------------------------------------------------------------------------
def test_prompts_for_every_dataset_are_the_benchmarks_chats(app, tmp_path):
    """VerilogEval, RTLLM and task folders have no messages(): their system prompt and prompt; CVDP builds its
    own chat (a style changes it), and `cvdp prompts` is the same file."""
    from rtlreward.plugins import get_registry

    datasets = get_registry().datasets()
    for dataset in ("verilog-eval", "rtllm", "cvdp", str(ROOT / "examples")):
        out = tmp_path / "p.jsonl"
        res = invoke(app, "prompts", dataset, "--limit", "2", "--out", str(out))
        assert res.exit_code == 0, res.output
        got = rows(out)
        tasks = load_tasks(dataset)[:2]
        assert [r["id"] for r in got] == [t.id for t in tasks]
        for r, t in zip(got, tasks, strict=True):
            own = getattr(datasets.get(t.dataset), "messages", None)
            if own is not None:
                want = own(t, "auto")
            else:
                want = [{"role": "system", "content": t.system_prompt}] if t.system_prompt else []
                want.append({"role": "user", "content": t.prompt})
            assert r["messages"] == want and r["expected_files"] == list(t.expected_files)
    verilog = json.loads(invoke(app, "prompts", "verilog-eval", "--filter", "ids=Prob001_zero").stdout)
    assert [m["role"] for m in verilog["messages"]] == ["system", "user"]
    assert "[BEGIN]" in verilog["messages"][1]["content"]  # the benchmark's own wording

    agentic = tmp_path / "agentic.jsonl"
    copilot = tmp_path / "copilot.jsonl"
    assert invoke(app, "prompts", "cvdp", "--style", "agentic", "-o", str(agentic)).exit_code == 0
    assert invoke(app, "prompts", "cvdp", "--style", "copilot", "-o", str(copilot)).exit_code == 0
    assert rows(agentic) != rows(copilot)
    assert "file operations" in rows(agentic)[0]["messages"][0]["content"]

    alias = tmp_path / "alias.jsonl"
    res = cli("cvdp", "prompts", "--style", "agentic", "--out", str(alias))
    assert res.returncode == 0, res.stderr
    assert alias.read_text() == agentic.read_text()


def test_prompts_errors_are_one_line(app, tmp_path):
    res = invoke(app, "prompts", "no-such-dataset")
    assert res.exit_code == 2 and "neither a registered dataset" in res.output
    res = invoke(app, "prompts", "verilog-eval", "--filter", "colour=red")
    assert res.exit_code == 2 and "unknown filter" in res.output
    res = invoke(app, "prompts", "verilog-eval", "--limit", "1", "--out", str(tmp_path))
    assert res.exit_code == 2 and "is a folder" in res.output


# -- sample -> eval -> report, end to end ---------------------------------------------------------------------
def test_sample_then_eval_then_report_end_to_end(stub, ve_tasks, tmp_path):
    out = tmp_path / "completions.jsonl"
    res = cli(*sample_args(stub, out, "-n", "2"))
    assert res.returncode == 0, res.stderr
    assert "wrote 8 completions" in res.stdout and "next: rtlreward eval verilog-eval" in res.stdout

    got = rows(out)
    assert sorted((r["id"], r["sample"]) for r in got) == sorted((i, s) for i in IDS for s in (0, 1))
    by_prompt = {t.id: t for t in ve_tasks}
    for r in got:
        assert r["model"] == stub.model and r["finish_reason"] == "stop"
        assert r["sampler"]["temperature"] == 0.8  # several samples: not greedy
        assert ("[BEGIN]\n\nmodule TopModule" in r["completion"]) == (r["id"] in GOOD)
    # every request carried the benchmark's chat for its task, one sample each
    assert len(stub.requests) == 8
    chats = {json.dumps(chat_for(t)) for t in by_prompt.values()}
    assert all(json.dumps(b["messages"]) in chats for b in stub.requests)
    assert {(b["n"], b["max_tokens"], b["temperature"]) for b in stub.requests} == {(1, 4096, 0.8)}

    results = tmp_path / "results.jsonl"
    res = cli(
        "eval",
        "verilog-eval",
        "--filter",
        "ids=" + ",".join(IDS),
        "--completions",
        str(out),
        "--out",
        str(results),
        "--jobs",
        "2",
        timeout=600,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    scored, problems = read_results(results)
    assert not problems
    assert sorted((r["id"], r["sample"]) for r in scored) == sorted((i, s) for i in IDS for s in (0, 1))
    for r in scored:
        assert r["passed"] == (r["id"] in GOOD), r

    if cli("report", "--help").returncode == 0:  # being built by another engineer: only when installed
        page = tmp_path / "report.html"
        res = cli("report", str(results), "--out", str(page), timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        html = page.read_text()
        assert "Prob002_m2014_q4i" in html or "Prob004_vector2" in html

    # a rerun has nothing left to ask
    before = len(stub.requests)
    res = cli(*sample_args(stub, out, "-n", "2"))
    assert res.returncode == 0 and "nothing to sample" in res.stdout
    assert len(stub.requests) == before


def test_more_samples_later_asks_only_for_the_new_ones(stub, app, tmp_path):
    out = tmp_path / "c.jsonl"
    assert invoke(app, *sample_args(stub, out, "-n", "1", "-t", "0.7")).exit_code == 0
    assert len(stub.requests) == 4
    res = invoke(app, *sample_args(stub, out, "-n", "3", "-t", "0.7"))
    assert res.exit_code == 0, res.output
    assert len(stub.requests) == 12 and len(rows(out)) == 12
    assert sorted({r["sample"] for r in rows(out)}) == [0, 1, 2]


# -- retries and failures --------------------------------------------------------------------------------------
def test_429_then_503_then_200_is_retried(stub, app, ve_tasks, tmp_path):
    zero = next(t for t in ve_tasks if t.id == "Prob001_zero")
    stub.failures[zero.prompt] = [429, 503]
    out = tmp_path / "c.jsonl"
    res = invoke(app, *sample_args(stub, out))
    assert res.exit_code == 0, res.output
    assert stub.count(zero.prompt) == 3  # two refusals, then the answer
    assert len(stub.requests) == 6
    assert "2 retried" in res.output
    assert {r["id"] for r in rows(out)} == set(IDS)


def test_retries_run_out_for_one_task_the_others_are_written_and_a_rerun_fills_the_gap(
    stub, app, ve_tasks, tmp_path
):
    two = next(t for t in ve_tasks if t.id == "Prob002_m2014_q4i")
    stub.failures[two.prompt] = [503] * 10
    out = tmp_path / "c.jsonl"
    res = invoke(app, *sample_args(stub, out, "--retries", "2"))
    assert res.exit_code == 1
    assert "Prob002_m2014_q4i sample 0: HTTP 503" in res.output and "after 3 attempts" in res.output
    assert "rerun the same command" in res.output
    assert {r["id"] for r in rows(out)} == set(IDS) - {"Prob002_m2014_q4i"}
    stub.failures.clear()
    asked = len(stub.requests)
    res = invoke(app, *sample_args(stub, out, "--retries", "2"))
    assert res.exit_code == 0, res.output
    assert len(stub.requests) == asked + 1 and {r["id"] for r in rows(out)} == set(IDS)


def test_a_request_that_is_never_answered_times_out(stub, app, tmp_path):
    stub.hold_after = 0
    try:
        res = invoke(app, *sample_args(stub, tmp_path / "c.jsonl", "--timeout", "0.5", "--retries", "0"))
    finally:
        stub.release.set()
    assert res.exit_code == 1
    assert "no reply within 0.5 s" in res.output


def test_backoff_doubles_and_honours_retry_after():
    """Without Retry-After the waits grow exponentially (with jitter in [0.5, 1] of the step); with it, the
    server's number is used."""
    import asyncio

    from rtlreward_sample.backends import OpenAIChat

    with StubOpenAI(lambda m: "ok") as s:
        s.failures["x"] = [500, 502, 500, 429]
        waits: list[float] = []

        async def sleep(t: float) -> None:
            waits.append(t)

        async def go():
            async with OpenAIChat(s.base_url, s.model, backoff=1.0, retries=5, sleep=sleep) as chat:
                return await chat.complete([{"role": "user", "content": "x"}], 0)

        reply = asyncio.run(go())
    assert reply.text == "ok" and len(waits) == 4
    assert 0.5 <= waits[0] <= 1 and 1 <= waits[1] <= 2 and 2 <= waits[2] <= 4 and waits[3] == 0


def test_a_refused_key_or_a_wrong_model_stops_the_run_in_one_line(ve_tasks, app, tmp_path):
    replies = verilog_eval_replies(ve_tasks)
    with StubOpenAI(lambda m: replies.get(last_user(m), ""), api_key="sk-right") as s:
        out = tmp_path / "c.jsonl"
        res = invoke(app, *sample_args(s, out))
        assert res.exit_code == 1 and "HTTP 401" in res.output and "$OPENAI_API_KEY" in res.output
        assert len(s.requests) == 0 and (not out.exists() or not rows(out))
        res = invoke(app, *sample_args(s, out, "--api-key-env", "MY_KEY"), env={"MY_KEY": ""})
        assert res.exit_code == 2 and "$MY_KEY is not set" in res.output
        res = invoke(app, *sample_args(s, out, "--api-key-env", "MY_KEY"), env={"MY_KEY": "sk-right"})
        assert res.exit_code == 0, res.output
        assert len(rows(out)) == 4
        args = sample_args(s, tmp_path / "other.jsonl")
        args[args.index("--model") + 1] = "not-served"
        res = invoke(app, *args, env={"OPENAI_API_KEY": "sk-right"})
        assert res.exit_code == 1 and "HTTP 404" in res.output and "--model" in res.output


def test_nothing_listening_is_one_line_not_a_hang(app, tmp_path):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    res = invoke(
        app,
        "sample",
        "verilog-eval",
        "--filter",
        "ids=Prob001_zero",
        "--model",
        "m",
        "--base-url",
        f"http://127.0.0.1:{port}/v1",
        "--retries",
        "0",
        "--out",
        str(tmp_path / "c.jsonl"),
    )
    assert res.exit_code == 1 and "is the server running" in res.output


def test_nothing_listening_stops_at_once_with_the_default_retries(app, tmp_path):
    """Connection refused before the server ever answered: no retries (they only delayed the same error by
    half a minute), and no `wrote 0 completions` line that reads like a finished run."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    res = invoke(
        app,
        *["sample", "verilog-eval", "--filter", "ids=Prob001_zero,Prob002_m2014_q4i", "--model", "m"],
        *["--base-url", f"http://127.0.0.1:{port}/v1", "--out", str(tmp_path / "c.jsonl")],
    )
    assert res.exit_code == 1, res.output
    assert "is the server running" in res.output and "--base-url" in res.output
    assert "wrote" not in res.output and "retried" not in res.output and "(after " not in res.output
    assert "Sampling stopped (none written" in res.output


def test_more_samples_with_the_default_temperature_says_how_to_continue(stub, app, tmp_path):
    """`-n 1` samples at temperature 0 by default and `-n 5` at 0.8: the refusal names the option that adds
    to the file, and following it works."""
    out = tmp_path / "c.jsonl"
    assert invoke(app, *sample_args(stub, out, "-n", "1")).exit_code == 0
    res = invoke(app, *sample_args(stub, out, "-n", "5"))
    assert res.exit_code == 2
    assert "rerun with --temperature 0" in res.output and "another --out" in res.output
    res = invoke(app, *sample_args(stub, out, "-n", "5", "--temperature", "0"))
    assert res.exit_code == 0, res.output
    assert len(rows(out)) == 20 and len(stub.requests) == 20


# -- resume ----------------------------------------------------------------------------------------------------
def test_a_killed_run_resumes_without_asking_again(stub, ve_tasks, tmp_path):
    """Kill the sampler (SIGKILL) after 3 of 8 replies, with a 4th request in flight; cut a line in half as a
    kill during a write would; rerun: the cut line is dropped, the 5 missing pairs are asked for, nothing else,
    and `eval` reads every line."""
    out = tmp_path / "c.jsonl"
    stub.hold_after = 3
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtlreward", *sample_args(stub, out, "-n", "2", "--concurrency", "1")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "OPENAI_API_KEY": ""},
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        while len(stub.requests) < 4 or (out.exists() and len(out.read_text().splitlines()) < 3):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the sampler never got 3 replies"
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    stub.hold_after = None
    stub.release.set()
    first = rows(out)
    assert len(first) == 3
    with out.open("a") as fh:  # what a kill in the middle of a write leaves
        fh.write('{"id": "Prob004_vector2", "sample": 1, "compl')

    asked = len(stub.requests)
    res = cli(*sample_args(stub, out, "-n", "2", "--concurrency", "1"))
    assert res.returncode == 0, res.stderr
    assert "removed a cut-off last line" in res.stderr
    assert len(stub.requests) - asked == 5
    completions, problems = read_completions(out)
    assert not problems
    pairs = [(c.id, c.sample) for c in completions]
    assert sorted(pairs) == sorted((i, s) for i in IDS for s in (0, 1))
    assert rows(out)[:3] == first


def test_resuming_with_other_settings_is_refused(stub, app, tmp_path):
    out = tmp_path / "c.jsonl"
    assert invoke(app, *sample_args(stub, out, "-n", "1")).exit_code == 0
    res = invoke(app, *sample_args(stub, out, "-n", "2", "-t", "0.2"))
    assert res.exit_code == 2
    assert "temperature=0.0 (this run: 0.2)" in res.output and "another --out" in res.output
    assert len(stub.requests) == 4


def test_dry_run_sends_nothing_and_shows_the_first_request(stub, app, tmp_path):
    res = invoke(
        app,
        *sample_args(
            stub,
            tmp_path / "c.jsonl",
            "-n",
            "3",
            "--seed",
            "7",
            "--extra-body",
            '{"top_p": 0.95}',
            "--dry-run",
        ),
    )
    assert res.exit_code == 0, res.output
    cfg = json.loads(res.stdout)
    assert cfg["to_sample"] == 12 and cfg["url"] == stub.base_url + "/chat/completions"
    body = cfg["first_request"]
    assert body["seed"] == 7 and body["top_p"] == 0.95 and body["temperature"] == 0.8
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert stub.requests == [] and not (tmp_path / "c.jsonl").exists()


def test_bad_options_are_usage_errors(app, tmp_path):
    for args, words in (
        (["-n", "0"], "-n must be at least 1"),
        (["--backend", "hf"], "--backend 'hf'"),
        (["--extra-body", "{oops"], "--extra-body is not JSON"),
    ):
        res = invoke(app, "sample", "verilog-eval", "--model", "m", "--out", str(tmp_path / "c.jsonl"), *args)
        assert res.exit_code == 2 and words in res.output, res.output
