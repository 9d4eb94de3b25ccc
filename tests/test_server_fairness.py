"""Issue 20 against the real server over loopback: clients are served in turns (one client's backlog of slow
or looping replies holds another's next item back by at most the evaluations already running), per-address
limits on queued work and on open connections, every hostile body answered with JSON, and the OpenRLHF reply
found exactly or refused. Addresses 127.0.0.2.. stand for other hosts (Linux routes all of 127/8 to loopback).
Request loops are bounded; no assertion is on elapsed time (bench/bench_server_fair.py measures that)."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import server_helpers as sh

from rtlreward.engine import Engine
from rtlreward.integration import load_tasks


def post_from(url: str, path: str, payload: Any, source: str = "127.0.0.1") -> tuple[int, dict, Any]:
    """POST from a given local address (another 'host' on loopback)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120, source_address=(source, 0))
    try:
        conn.request("POST", path, json.dumps(payload), {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(r.read())
    finally:
        conn.close()


def wait_for(cond, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


# -- the scheduler --------------------------------------------------------------------------------------------
def test_the_pool_serves_clients_in_turns_not_in_arrival_order():
    """One worker, held by a first item. Client A queues 6 more on three connections, then B (another address)
    queues 3: B's items alternate with A's rather than waiting for all of them, and a connection's own items
    keep their order."""
    from rtlreward_server.server import FairPool

    pool = FairPool(1)
    gate = threading.Event()
    order: list[str] = []

    def job(name: str) -> str:
        if name == "first":
            gate.wait(30)
        order.append(name)
        return name

    first = pool.submit(("a", "a:0"), job, "first")
    wait_for(lambda: first.running(), "the first item to start")
    futures = [pool.submit(("a", f"a:{i % 3}"), job, f"a{i}") for i in range(6)]
    futures += [pool.submit(("b", "b:0"), job, f"b{i}") for i in range(3)]
    gate.set()
    for f in futures:
        assert f.result(30) is not None
    pool.shutdown()
    assert order[0] == "first"
    rest = order[1:]
    # B's items start at once (B has nothing running, A has) and then every other turn
    assert [i for i, n in enumerate(rest) if n.startswith("b")] == [0, 2, 4], rest
    # within A its connections take turns, the one that ran "first" last; each keeps its own order (a0 before
    # a3 on connection 0, a1 before a4 on 1, a2 before a5 on 2)
    assert [n for n in rest if n.startswith("a")] == ["a1", "a2", "a0", "a4", "a5", "a3"], rest


def test_a_cancelled_queued_item_never_runs_and_shutdown_cancels_the_rest():
    from rtlreward_server.server import FairPool

    pool = FairPool(1)
    gate = threading.Event()
    ran: list[int] = []
    hold = pool.submit(("a", "a"), gate.wait, 30)
    wait_for(lambda: hold.running(), "the holding item")
    queued = [pool.submit(("a", "a"), ran.append, i) for i in range(4)]
    assert queued[0].cancel()
    pool.shutdown()
    gate.set()
    assert hold.result(30) is True
    assert all(f.cancelled() for f in queued) and ran == []
    with pytest.raises(RuntimeError):
        pool.submit(("a", "a"), ran.append, 9)


def test_a_clients_backlog_holds_another_client_back_by_at_most_the_running_evaluations():
    """The old single queue: a client that sent a batch of slow replies first made another's reply wait for
    all of them (80 loops: a 504 after 300 s). Now the second client's item starts as soon as a worker is
    free, while most of the first client's batch still waits."""
    sh.Probe.reset()
    engine = sh.probe_engine()
    with sh.running(engine, [sh.PROBE_TASK], jobs=2) as url:
        items = [{"task_id": "t1", "completion": f"module top; endmodule // A{i} SLOW0.4"} for i in range(16)]
        with ThreadPoolExecutor(1) as pool:
            batch = pool.submit(sh.request, url + "/score_batch", {"items": items})
            wait_for(lambda: sh.Probe.runs >= 2, "the first client's batch to start")
            status, _, body = sh.request(
                url + "/score", {"task_id": "t1", "completion": "module top; endmodule // B"}
            )
            assert status == 200 and body["passed"] is True
            started_before_b = next(i for i, t in enumerate(sh.Probe.started) if t.endswith("// B"))
            a_status, _, a_body = batch.result(120)
    engine.close()
    # at most the two running when B arrived, plus one that a worker freed at the same moment may have taken
    assert started_before_b <= 3, sh.Probe.started[: started_before_b + 1]
    assert a_status == 200 and all(r["passed"] for r in a_body["rewards"])


def test_an_address_over_its_queue_limit_gets_429_while_another_address_gets_in():
    sh.Probe.reset(seconds=0.5)
    engine = sh.probe_engine()
    with sh.running(engine, [sh.PROBE_TASK], jobs=1, max_queue=20, client_queue=3) as url:
        items = [{"task_id": "t1", "completion": f"module top; endmodule // A{i}"} for i in range(4)]
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(post_from, url, "/score_batch", {"items": items})
            wait_for(lambda: sh.Probe.runs >= 1, "the first batch to start")
            status, headers, body = post_from(
                url, "/score", {"task_id": "t1", "completion": "module top; endmodule // A more"}
            )
            assert status == 429 and int(headers["retry-after"]) >= 1, (status, body)
            assert "your address" in body["error"] and "--client-queue" in body["error"]
            status, _, body = post_from(
                url, "/score", {"task_id": "t1", "completion": "module top; endmodule // B"}, "127.0.0.2"
            )
            assert status == 200 and body["passed"] is True
            assert first.result(60)[0] == 200
        status, _, body = sh.request(
            url + "/score_batch", {"items": items + items[:1] + [{"task_id": "t1", "completion": "x"}]}
        )
        assert status == 413 and "--client-queue" in body["error"]
    engine.close()


# -- connections ----------------------------------------------------------------------------------------------
def test_connections_over_the_per_address_cap_are_refused_and_health_answers_throughout(
    cheap_engine, arbiter
):
    with sh.running(cheap_engine, [arbiter], client_timeout=2.0, max_connections=20) as url:
        host, port = url.removeprefix("http://").split(":")
        stalled = []
        for _ in range(30):
            s = socket.create_connection((host, int(port)), timeout=10, source_address=("127.0.0.2", 0))
            s.sendall(b'POST /score HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{"task')
            stalled.append(s)
        status, _, body = sh.request(url + "/health")  # from 127.0.0.1: not crowded out
        assert status == 200 and body["status"] == "ok"
        answers = []
        for s in stalled:
            data = b""
            try:
                s.settimeout(10)
                while chunk := s.recv(65536):
                    data += chunk
            except OSError:
                pass
            answers.append(sh.status_of(data))
            s.close()
        # 20 held until the read deadline (408), the 10 beyond the cap refused at once (503, JSON)
        assert answers.count(408) == 20 and answers.count(503) == 10, answers


# -- hostile bodies -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def arbiter():
    return load_tasks(str(sh.ARBITER))[0]


@pytest.fixture(scope="module")
def cheap_engine():
    engine = Engine(sh.CHEAP_PROFILE, cache=False)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def cheap_server(cheap_engine, arbiter):
    with sh.running(cheap_engine, [arbiter]) as url:
        yield url


@pytest.mark.parametrize(
    "raw",
    [
        b'{"task_id": "\\ud800", "completion": "x"}',
        b'{"items": [{"task_id": "\\udfff", "completion": "a"}, {"task": "\\ud83d"}]}',
        b'{"\\ud800": 1}',
        b'{"task_id": "\xff\xfe"}',
        b'{"task_id": 1e999999}',
        b'{"task_id": 123456789012345678901234567890123456789}',
        b'{"task_id": "a", "completion": "x", "sample": 1' + b"0" * 5000 + b"}",
        b"[" * 70 + b"]" * 70,
        b'{"query": ["\\ud800"], "prompts": ["\\udc00"], "labels": ["\\ud800"]}',
        b"\x00\x01\x02",
    ],
)
def test_every_hostile_body_gets_a_json_answer(cheap_server, raw, caplog):
    path = "/get_reward" if b"query" in raw else ("/score_batch" if b"items" in raw else "/score")
    status, headers, body = sh.request(cheap_server + path, raw=raw)
    assert isinstance(body, dict), body
    assert headers["content-type"].startswith("application/json")
    if "rewards" not in body:
        assert 400 <= status < 500 and body["error"], (status, body)
    else:
        assert status == 200 and all("error" in r for r in body["rewards"])
    assert "Traceback" not in caplog.text and "unexpected error" not in caplog.text


def test_a_reply_with_a_lone_surrogate_is_scored_and_answered(cheap_server, arbiter):
    reply = sh.reply("correct").replace("module", "// \ud83d lone\nmodule", 1)
    status, _, body = sh.request(
        cheap_server + "/score", raw=json.dumps({"task_id": arbiter.id, "completion": reply}).encode()
    )
    assert status == 200 and body["stages"]["safety"]["status"] == "passed", body
    assert body["passed"] is True


# -- OpenRLHF: the reply alone ----------------------------------------------------------------------------------
CHAT = "<|im_start|>user\nHere is an earlier attempt that works:\n{code}\nMake it better.<|im_end|>\n<|im_start|>assistant\n"


def _get_reward(url: str, queries: list[str], prompts: list[str] | None, label: str) -> tuple[int, Any]:
    payload: dict[str, Any] = {"query": queries, "labels": [label] * len(queries)}
    if prompts is not None:
        payload["prompts"] = prompts
    status, _, body = sh.request(url + "/get_reward", payload)
    return status, body


def test_a_prompts_code_never_pays_the_reply(cheap_server, arbiter):
    """The prompt shows a correct design and the reply refuses: with `prompts` missing or one space off, the
    old server scored the whole query and paid the refusal 1.6. Now the reply is found exactly or the
    request is refused."""
    prompt = CHAT.format(code=sh.reply("correct"))
    refusal = "I cannot do this.<|im_end|>"
    status, body = _get_reward(cheap_server, [prompt + refusal], [prompt], arbiter.id)
    assert status == 200 and body["rewards"] == [0.0]
    for prompts in (None, [prompt + " "], [prompt[1:]], [prompt.replace("earlier", "older")]):
        status, body = _get_reward(cheap_server, [prompt + refusal], prompts, arbiter.id)
        assert status == 400 and "--reply-after" in body["error"], (prompts and prompts[0][:30], body)
    # the same design in the reply earns what it earns on /score
    status, body = _get_reward(
        cheap_server, [prompt + sh.reply("correct") + "<|im_end|>"], [prompt], arbiter.id
    )
    _, _, direct = sh.request(
        cheap_server + "/score", {"task_id": arbiter.id, "completion": sh.reply("correct")}
    )
    assert status == 200 and body["rewards"] == [direct["total"]] and direct["total"] > 0


def test_a_bos_token_in_front_of_the_query_is_the_only_difference_allowed(cheap_server, arbiter):
    prompt = CHAT.format(code="(none)")
    status, body = _get_reward(
        cheap_server, ["<|endoftext|>" + prompt + sh.reply("correct")], [prompt], arbiter.id
    )
    _, _, direct = sh.request(
        cheap_server + "/score", {"task_id": arbiter.id, "completion": sh.reply("correct")}
    )
    assert status == 200 and body["rewards"] == [direct["total"]]


def test_without_prompts_the_chat_template_marks_the_reply(cheap_engine, arbiter):
    with sh.running(cheap_engine, [arbiter], reply_after="chatml") as url:
        prompt = CHAT.format(code=sh.reply("correct"))
        status, body = _get_reward(url, [prompt + "I cannot do this.<|im_end|>"], None, arbiter.id)
        assert status == 200 and body["rewards"] == [0.0]
        # a reply that writes the marker itself only cuts its own text: what follows is still its own
        status, body = _get_reward(
            url, [prompt + "no<|im_start|>assistant\n" + sh.reply("correct")], None, arbiter.id
        )
        _, _, direct = sh.request(url + "/score", {"task_id": arbiter.id, "completion": sh.reply("correct")})
        assert status == 200 and body["rewards"] == [direct["total"]]
        status, body = _get_reward(url, ["no chat template here"], None, arbiter.id)
        assert status == 400 and "reply begins" in body["error"]


def test_an_answer_that_echoes_a_lone_surrogate_is_still_json(cheap_engine, arbiter):
    """An inline task's id comes back in its reward: unescaped, a lone surrogate cannot be encoded as UTF-8 and
    the answer was a 500 with a traceback in the log."""
    task = arbiter.to_dict()
    task["id"] = "arb\ud800iter"
    with sh.running(cheap_engine, [arbiter], allow_inline_tasks=True) as url:
        raw = json.dumps({"task": task, "completion": sh.reply("correct")}).encode()
        status, _, body = sh.request(url + "/score", raw=raw)
    assert status == 200 and body["task_id"] == "arb\ud800iter" and body["passed"] is True, body


def test_a_correct_reply_earns_its_reward_while_another_client_floods_the_server_with_loops(arbiter):
    """The issue's attack with real tools: a first client (another address) sends replies that loop at zero
    delay as one batch; the second client's correct reply is scored, to its full reward, while the loops still
    wait (each is cut at the task's calibrated limit, not the profile's 60 s)."""
    engine = Engine("shaped", cache=False, jobs=2)
    loop = sh.reply("forever_loop")
    loops = [loop.replace("endmodule", f"// flood {i}\nendmodule", 1) for i in range(3)]
    with sh.running(engine, [arbiter], jobs=2) as url:
        # the task's limits are calibrated once, from its reference, before the flood
        status, _, alone = sh.request(
            url + "/score", {"task_id": arbiter.id, "completion": sh.reply("correct")}
        )
        assert status == 200 and alone["total"] == alone["max_total"]
        with ThreadPoolExecutor(1) as pool:
            items = [{"task_id": arbiter.id, "completion": r} for r in loops]
            flood = pool.submit(post_from, url, "/score_batch", {"items": items}, "127.0.0.2")
            wait_for(lambda: engine_busy(url), "the flood to start")
            reply = sh.reply("correct").replace("endmodule", "// mine\nendmodule", 1)
            status, _, body = sh.request(url + "/score", {"task_id": arbiter.id, "completion": reply})
            assert not flood.done(), "the flood ended before the correct reply was scored: nothing was tested"
            assert status == 200 and body["total"] == body["max_total"], body
            f_status, _, f_body = flood.result(300)
    engine.close()
    assert f_status == 200
    tests = [r["stages"]["tests"] for r in f_body["rewards"]]
    assert all(t["status"] == "timeout" for t in tests), [t["status"] for t in tests]
    assert all(any("calibrated" in str(d) for d in t["diagnostics"]) for t in tests), tests[0]


def engine_busy(url: str) -> bool:
    _, _, health = sh.request(url + "/health")
    return health["in_flight"] >= 2 and health["queue_depth"] >= 1


# -- found by attacking the above -------------------------------------------------------------------------------
def test_x_forwarded_for_names_no_one(cheap_engine, arbiter, caplog):
    """uvicorn trusts X-Forwarded-For from loopback by default: any local client could name itself anew per
    request, escaping its address's queue limit and turns, and forging the log."""
    import logging

    caplog.set_level(logging.INFO, logger="rtlreward.server.access")
    with sh.running(cheap_engine, [arbiter]) as url:
        status, _, _ = sh.request(url + "/tasks", headers={"X-Forwarded-For": "10.9.8.7"})
        assert status == 200
        wait_for(lambda: any("/tasks" in r.getMessage() for r in caplog.records), "the access line")
    lines = [r.getMessage() for r in caplog.records if r.name == "rtlreward.server.access"]
    assert any(line.startswith("127.0.0.1 GET /tasks") for line in lines), lines
    assert not any("10.9.8.7" in line for line in lines), lines


class _Gated:
    """An engine stand-in for the admission test: each evaluation waits until its reply's gate opens."""

    def __init__(self) -> None:
        self.gates: dict[str, threading.Event] = {}
        self.jobs = 1

    def gate(self, text: str) -> threading.Event:
        return self.gates.setdefault(text, threading.Event())

    def score(self, task, cand):
        from rtlreward.model import Reward

        self.gate(cand.text).wait(30)
        return Reward(
            task_id=task.id, sample=cand.sample, profile="gated", total=1.0, max_total=1.0, passed=True
        )


def test_addresses_that_top_the_queue_up_cannot_keep_another_batch_out():
    """With a full queue, room freed one item at a time went to whoever asked first: two addresses topping up
    single items kept a third address's batch of two out for good. A refused address now waits in line and the
    room it needs is held for it."""
    from rtlreward_server.server import Overloaded, RewardService

    engine = _Gated()
    service = RewardService(engine, [sh.PROBE_TASK], jobs=1, max_queue=2, client_queue=2)

    def items(*texts):
        return [(sh.PROBE_TASK, sh.h.Candidate(text=t)) for t in texts]

    a, b, victim = ("10.0.0.1", "a"), ("10.0.0.2", "b"), ("10.0.0.3", "v")
    held = [service.submit(items("a1"), a)[0][0], service.submit(items("b1", "b2"), b)[0]]
    with pytest.raises(Overloaded):  # full: 3 of 3
        service.submit(items("v1", "v2"), victim)
    engine.gate("a1").set()
    wait_for(lambda: held[0].done(), "a1")
    with pytest.raises(Overloaded):  # one slot free, but the victim is ahead in line for two
        service.submit(items("a2"), a)
    engine.gate("b1").set()
    wait_for(lambda: held[1][0].done(), "b1")
    futures, _ = service.submit(items("v1", "v2"), victim)  # two free: the victim's
    for t in ("b2", "v1", "v2"):
        engine.gate(t).set()
    assert all(f.result(30).passed for f in futures)
    service.close()


def test_an_empty_or_cut_short_prompt_is_refused_not_scored_whole(cheap_server, arbiter):
    prompt = CHAT.format(code=sh.reply("correct"))
    query = prompt + "I cannot do this.<|im_end|>"
    for given in (
        "",
        "<|endoftext|>",
        "<s><bos>",
        prompt.split("\n", 1)[0],
        prompt[: prompt.index("Make it")],
    ):
        status, body = _get_reward(cheap_server, [query], [given], arbiter.id)
        assert status == 400, (given[:40], body)
    # Qwen3 with thinking off: an empty think block after the assistant's opening is part of the prompt
    qwen3 = prompt + "<think>\n\n</think>\n\n"
    status, body = _get_reward(cheap_server, [qwen3 + sh.reply("correct")], [qwen3], arbiter.id)
    _, _, direct = sh.request(
        cheap_server + "/score", {"task_id": arbiter.id, "completion": sh.reply("correct")}
    )
    assert status == 200 and body["rewards"] == [direct["total"]]


def test_a_malformed_chunked_body_gets_json_and_no_traceback(cheap_server, caplog):
    """uvicorn answered such requests in plain text, and the app's own answer then raised inside h11: a
    traceback in the log per request, reachable without a token."""
    for method, path in ((b"GET", b"/health"), (b"POST", b"/score"), (b"GET", b"/nowhere")):
        head = method + b" " + path + b" HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        answer = sh.raw_exchange(cheap_server, head + b"zz\r\nnot a chunk\r\n", wait=10)
        status, _, body = answer.partition(b"\r\n\r\n")
        assert sh.status_of(answer) == 400, answer[:200]
        assert b"application/json" in status.lower() and "malformed" in json.loads(body)["error"], answer
    time.sleep(0.5)  # the app's dropped answers are logged, if at all, just after
    assert "Traceback" not in caplog.text and "unexpected error" not in caplog.text, caplog.text[-2000:]


def test_a_client_over_the_connection_cap_reads_its_503(cheap_engine, arbiter):
    """Closed with its request unread, the over-cap connection got a TCP reset instead of the answer."""
    with sh.running(cheap_engine, [arbiter], max_connections=1) as url:
        host, port = url.removeprefix("http://").split(":")
        holder = socket.create_connection((host, int(port)), timeout=10, source_address=("127.0.0.3", 0))
        try:
            time.sleep(0.2)
            outcomes = []
            for _ in range(5):
                try:
                    status, _, body = post_from(
                        url, "/score", {"task_id": arbiter.id, "completion": "x"}, "127.0.0.3"
                    )
                    outcomes.append((status, "--max-connections" in body["error"]))
                except OSError as exc:
                    outcomes.append(type(exc).__name__)
            assert outcomes == [(503, True)] * 5, outcomes
        finally:
            holder.close()


def test_a_client_that_hangs_up_leaves_no_work_behind():
    """A client that sent a batch of slow items and hung up kept the workers busy for nobody until its request's
    time limit: its queued items are now cancelled when it leaves."""
    sh.Probe.reset(seconds=0.5)
    engine = sh.probe_engine()
    with sh.running(engine, [sh.PROBE_TASK], jobs=1) as url:
        items = [{"task_id": "t1", "completion": f"module top; endmodule // gone {i}"} for i in range(8)]
        body = json.dumps({"items": items}).encode()
        host, port = url.removeprefix("http://").split(":")
        s = socket.create_connection((host, int(port)), timeout=10)
        s.sendall(
            b"POST /score_batch HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        wait_for(lambda: sh.Probe.runs >= 1, "the batch to start")
        s.close()

        def idle() -> bool:
            _, _, health = sh.request(url + "/health")
            return health["in_flight"] == 0 and health["queue_depth"] == 0

        wait_for(idle, "the server to be idle", timeout=30)
        _, _, text = sh.request(url + "/metrics")
    engine.close()
    assert sh.Probe.runs <= 3, (
        sh.Probe.runs
    )  # the one running at the hang-up, and at most a poll's worth more
    assert sh.metric(text, "rtlreward_server_item_errors_total", status="499") == 8
