"""Load test: 500 distinct replies from 32 concurrent clients against a real `rtlreward serve` subprocess on
127.0.0.1, with the real engine and a small queue, so that clients are refused (429) and retry. Every reply must
be scored exactly once: 500 rewards back, 500 evaluations in the server's /metrics, every refusal retried, and
each reward what its reply deserves.

Cheap on purpose (the machine is shared): the profile runs format, safety and interface for every reply and
compile + tests only after an interface pass, which 3 of the 500 replies earn (two correct, one with the
priority reversed). Bounded in count (500) and in time (the whole run is cancelled after 15 minutes)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections import Counter

import pytest
import server_helpers as sh
from server_helpers import metric

pytestmark = pytest.mark.slow

REPLIES = 500
CLIENTS = 32
PROFILE = """
name = "load-test"
combiner = "weighted"
stages = ["format", "safety", "interface", "compile", "tests"]
gates = ["safety"]
verdict = "tests"
partial = ["interface", "tests"]

[weights]
format = 0.1
interface = 0.2
compile = 0.3
tests = 1.0

[stage.compile]
requires = ["safety", "interface"]
"""
# What each bundled reply gets under PROFILE: the first stage that did not pass, or None (all passed).
EXPECTED = {
    "correct": ("passed", "passed"),
    "think_then_code": ("passed", "passed"),
    "reversed_priority": ("passed", "failed"),  # (interface, tests)
    "renamed_ports": ("failed", "skipped"),
    "syntax_error": ("failed", "skipped"),
    "system_call": ("skipped", "skipped"),  # safety failed
    "include_passwd": ("skipped", "skipped"),  # safety failed
    "prose_only": ("skipped", "skipped"),  # format failed
}
CHEAP = ["renamed_ports", "prose_only", "system_call", "include_passwd", "syntax_error"]


def distinct(name: str, i: int) -> str:
    """Reply `name` made unique by a comment inside its code (so even the stages keyed on the extracted files
    see a new input) or, for prose, by a word."""
    text = sh.reply(name)
    if "```verilog\n" in text:
        return text.replace("```verilog\n", f"```verilog\n// load test reply {i}\n", 1)
    return f"{text} (reply {i})"


def workload() -> list[tuple[str, str]]:
    work = [("correct", distinct("correct", 0)), ("think_then_code", distinct("think_then_code", 1))]
    work.append(("reversed_priority", distinct("reversed_priority", 2)))
    work += [(CHEAP[i % len(CHEAP)], distinct(CHEAP[i % len(CHEAP)], i)) for i in range(3, REPLIES)]
    assert len({text for _, text in work}) == REPLIES
    return work


async def drive(url: str, work: list[tuple[str, str]]) -> tuple[dict[int, dict], int, str]:
    from rtlreward_server.client import AsyncRewardClient

    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(work)):
        queue.put_nowait(i)
    results: dict[int, dict] = {}
    clients = [AsyncRewardClient(url, max_retries=10_000, max_wait=2.0) for _ in range(CLIENTS)]

    async def worker(rc: AsyncRewardClient) -> None:
        while not queue.empty():
            i = queue.get_nowait()
            reward = await rc.score("fixed_priority_arbiter", work[i][1], sample=i)
            assert i not in results
            results[i] = reward

    try:
        await asyncio.wait_for(asyncio.gather(*(worker(rc) for rc in clients)), 900)
        text = await clients[0].metrics()
    finally:
        for rc in clients:
            await rc.aclose()
    return results, sum(rc.retries for rc in clients), text


def test_500_replies_from_32_clients_are_each_scored_exactly_once(tmp_path):
    profile = tmp_path / "load.toml"
    profile.write_text(PROFILE)
    env = {**os.environ, "RTLREWARD_CACHE_DIR": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1"}
    env.pop("RTLREWARD_SERVER_TOKEN", None)
    cmd = [sys.executable, "-m", "rtlreward", "serve", "-d", str(sh.ARBITER), "--profile", str(profile)]
    cmd += ["--host", "127.0.0.1", "--port", "0", "--jobs", "2", "--max-queue", "16", "--no-log-requests"]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = server.stdout.readline()
        found = re.search(r" on (http://127\.0\.0\.1:\d+) ", line)
        assert found, (line, server.stderr.read() if server.poll() is not None else "")
        work = workload()
        results, retries, text = asyncio.run(drive(found.group(1), work))
    finally:
        server.terminate()
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

    # Every reply answered once, with its own reward.
    assert sorted(results) == list(range(REPLIES))
    got = Counter()
    for i, (name, _) in enumerate(work):
        reward = results[i]
        stages = reward["stages"]
        assert reward["sample"] == i and "error" not in reward
        assert (stages["interface"]["status"], stages["tests"]["status"]) == EXPECTED[name], (name, stages)
        assert not any(s["cached"] for s in stages.values())  # nothing was evaluated before
        got[name] += 1
    assert got["correct"] == 1 and sum(got.values()) == REPLIES

    # ...and evaluated once: the server's own counters.
    assert metric(text, "rtlreward_server_evaluations_total") == REPLIES
    assert metric(text, "rtlreward_server_rewards_total") == REPLIES
    assert (
        metric(text, "rtlreward_server_rejected_total") == retries
    )  # every refusal was retried, nothing else
    assert metric(text, "rtlreward_server_timeouts_total") == 0
    formats = sum(
        metric(text, "rtlreward_stage_results_total", stage="format", status=s) for s in ("passed", "failed")
    )
    assert formats == REPLIES
    assert metric(text, "rtlreward_stage_results_total", stage="tests", status="passed") == 2
    assert metric(text, "rtlreward_stage_results_total", stage="tests", status="failed") == 1
    assert (
        metric(text, "rtlreward_server_queue_depth") == 0 and metric(text, "rtlreward_server_in_flight") == 0
    )
    print(f"load test: {REPLIES} replies, {CLIENTS} clients, {retries} refusals (429) retried")
