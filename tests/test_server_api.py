"""The reward server's interfaces beyond scoring: Prometheus /metrics, the request log, the OpenRLHF remote
reward model contract and the async client's retries. Real stages (format, safety, interface) or the probe
stage, on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import re
import time

import pytest
import server_helpers as sh

from rtlreward.engine import Engine
from rtlreward.integration import load_tasks

CHEAP = {
    "name": "cheap",
    "stages": ["format", "safety", "interface"],
    "weights": {"format": 0.1, "interface": 0.2},
    "gates": ["safety"],
    "verdict": "interface",
    "metrics": {"format_valid": {"passed": ["format"]}, "interface_score": {"score": "interface"}},
}


@pytest.fixture(scope="module")
def arbiter():
    return load_tasks(str(sh.ARBITER))[0]


@pytest.fixture(scope="module")
def server(arbiter):
    engine = Engine(CHEAP, cache=False)
    with sh.running(engine, [arbiter]) as url:
        yield url
    engine.close()


def test_metrics_show_load_latency_stage_pass_rates_and_rewards(server, arbiter):
    items = [
        {"task_id": arbiter.id, "completion": sh.reply("correct")},
        {"task_id": arbiter.id, "completion": sh.reply("renamed_ports")},
        {"task_id": arbiter.id, "completion": sh.reply("prose_only")},
        {"task_id": arbiter.id, "completion": sh.reply("prose_only")},  # the same reply: evaluated once
        {"task_id": "nope", "completion": "x"},
    ]
    before = sh.request(server + "/metrics")[2]
    status, _, body = sh.request(server + "/score_batch", {"items": items})
    assert status == 200 and body["rewards"][4]["status"] == 404
    status, headers, text = sh.request(server + "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")

    def delta(name: str, **labels: str) -> float:
        return sh.metric(text, name, **labels) - sh.metric(before, name, **labels)

    assert (
        sh.metric(text, "rtlreward_server_queue_depth") == 0
        and sh.metric(text, "rtlreward_server_in_flight") == 0
    )
    assert delta("rtlreward_server_evaluations_total") == 3
    assert delta("rtlreward_server_rewards_total") == 4
    assert delta("rtlreward_server_item_errors_total", status="404") == 1
    assert delta("rtlreward_stage_results_total", stage="format", status="passed") == 2
    assert delta("rtlreward_stage_results_total", stage="format", status="failed") == 1
    assert delta("rtlreward_stage_results_total", stage="interface", status="passed") == 1
    assert delta("rtlreward_stage_results_total", stage="interface", status="failed") == 1
    assert (
        delta("rtlreward_server_request_duration_seconds_count", endpoint="/score_batch", status="200") == 1
    )
    assert "rtlreward_server_request_duration_seconds_bucket" in text


def test_every_request_gets_one_log_line(arbiter, caplog):
    # A server of its own, and only the lines its own thread wrote: a request on an earlier test's server logs
    # after its answer went out, so its line can land in this capture (the access logger is one for all servers).
    from rtlreward_server.run import serve_in_thread
    from rtlreward_server.server import RewardService

    caplog.set_level(logging.INFO, logger="rtlreward.server.access")
    engine = Engine(CHEAP, cache=False)
    try:
        running, thread = serve_in_thread(RewardService(engine, [arbiter]), "127.0.0.1", 0)
        try:
            lines = _three_logged_requests(running.url, arbiter, caplog, thread.ident)
        finally:
            running.shutdown()
            running.server_close()
    finally:
        engine.close()
    assert len(lines) == 3, lines
    assert re.fullmatch(r"127\.0\.0\.1 POST /score 200 \d+\.\d{3}s items=1", lines[0]), lines[0]
    assert re.fullmatch(r"127\.0\.0\.1 POST /score_batch 200 \d+\.\d{3}s items=3", lines[1]), lines[1]
    assert re.fullmatch(r"127\.0\.0\.1 GET /nowhere 404 \d+\.\d{3}s items=0", lines[2]), lines[2]


def _three_logged_requests(server: str, arbiter, caplog, thread: int) -> list[str]:
    sh.request(server + "/score", {"task_id": arbiter.id, "completion": sh.reply("prose_only")})
    sh.request(server + "/score_batch", {"items": [{"task_id": arbiter.id, "completion": "a"}] * 3})
    sh.request(server + "/nowhere")
    # The line is written when the answer has gone out, so the client can see the answer first: wait for it.
    deadline = time.monotonic() + 30
    while len(_access_lines(caplog, thread)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # a fourth line, if any, would come now
    return _access_lines(caplog, thread)


def _access_lines(caplog, thread: int) -> list[str]:
    """The access lines the server running in `thread` wrote."""
    return [r.getMessage() for r in caplog.records if r.name == "rtlreward.server.access" and r.thread == thread]


def test_health_reports_load(server):
    status, _, body = sh.request(server + "/health")
    assert status == 200 and body["status"] == "ok" and body["tasks"] == 1
    assert {"in_flight", "queue_depth", "capacity"} <= set(body)


@pytest.mark.parametrize("path", ["/get_reward", "/reward"])
def test_openrlhf_remote_reward_model_contract(server, arbiter, path):
    """OpenRLHF posts {"query", "prompts", "labels"} (query = prompt + reply, decoded with special tokens) and
    reads {"rewards", "scores", "extra_logs"}; the labels carry the task ids."""
    prompt = "<|im_start|>user\nDesign the arbiter.<|im_end|>\n<|im_start|>assistant\n"
    replies = [sh.reply("correct"), sh.reply("renamed_ports"), sh.reply("prose_only")]
    payload = {
        "query": [prompt + r + "<|im_end|>" for r in replies],
        "prompts": [prompt] * 3,
        "labels": [arbiter.id] * 3,
    }
    status, _, body = sh.request(server + path, payload)
    assert status == 200, body
    direct = [sh.request(server + "/score", {"task_id": arbiter.id, "completion": r})[2] for r in replies]
    assert body["rewards"] == [d["total"] for d in direct]
    assert body["scores"] == [pytest.approx(d["total"] / d["max_total"]) for d in direct]
    assert body["extra_logs"]["format_valid"] == [1.0, 1.0, 0.0]
    assert body["extra_logs"]["interface_score"] == [d["metrics"]["interface_score"] for d in direct]


def test_openrlhf_errors_are_the_whole_requests(server, arbiter):
    """A label that names no loaded task must be loud: OpenRLHF wants one number per query."""
    status, _, body = sh.request(
        server + "/get_reward", {"query": ["pa", "pb"], "prompts": ["p", "p"], "labels": [arbiter.id, "zzz"]}
    )
    assert status == 404 and "query 1" in body["error"] and "unknown task id" in body["error"]
    status, _, body = sh.request(server + "/get_reward", {"query": ["a"], "prompts": [""]})
    assert status == 400 and "labels" in body["error"] and "--label_key" in body["error"]


async def test_the_async_client_retries_on_429_until_every_reply_is_scored_once():
    """jobs=1 and no queue: concurrent callers are refused (429 + Retry-After) and the client waits and
    resends until each reply is scored, each exactly once."""
    from rtlreward_server.client import AsyncRewardClient

    sh.Probe.reset(seconds=0.2)
    engine = sh.probe_engine()
    with sh.running(engine, [sh.PROBE_TASK], jobs=1, max_queue=0) as url:
        async with AsyncRewardClient(url, max_retries=100, max_wait=0.5) as rc:
            replies = [f"module top; endmodule // {i}" for i in range(6)]
            rewards = await asyncio.gather(*(rc.score("t1", r, sample=i) for i, r in enumerate(replies)))
            text = await rc.metrics()
        assert [r["sample"] for r in rewards] == list(range(6)) and all(r["passed"] for r in rewards)
        assert rc.retries >= 1
        assert sh.metric(text, "rtlreward_server_rejected_total") == rc.retries
        assert sh.metric(text, "rtlreward_server_evaluations_total") == 6 and sh.Probe.runs == 6
    engine.close()


async def test_the_async_client_sends_the_token_and_reports_refusals():
    from rtlreward_server.client import AsyncRewardClient, RewardServerError

    token = "another-secret-token-0123456789"
    engine = sh.probe_engine()
    with sh.running(engine, [sh.PROBE_TASK], token=token) as url:
        async with AsyncRewardClient(url, token=token) as rc:
            assert (await rc.score("t1", "module top; endmodule"))["passed"] is True
            assert await rc.tasks() == ["t1"]
            with pytest.raises(RewardServerError) as err:
                await rc.score("zzz", "module top; endmodule")
            assert err.value.status == 404 and "unknown task id" in err.value.message
        async with AsyncRewardClient(url, token="") as anonymous:
            with pytest.raises(RewardServerError) as err:
                await anonymous.score("t1", "module top; endmodule")
            assert err.value.status == 401
    engine.close()
