"""The reward server's findings (issue 10), each a test that failed on the standard-library server: the body
limit, the listen backlog, slow clients, admission, the per-request time limit, per-item errors, deep JSON,
authentication, inline tasks and the bind rule. Everything on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
import server_helpers as sh

from rtlreward.engine import Engine
from rtlreward.integration import load_tasks

TOKEN = "s3cret-token-for-tests-0123456789"


@pytest.fixture(scope="module")
def arbiter():
    return load_tasks(str(sh.ARBITER))[0]


@pytest.fixture(scope="module")
def cheap_engine():
    """Real stages that cost milliseconds: format, safety, interface (pyslang)."""
    engine = Engine(sh.CHEAP_PROFILE, cache=False)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def cheap_server(cheap_engine, arbiter):
    with sh.running(cheap_engine, [arbiter]) as url:
        yield url


def test_a_negative_content_length_cannot_bypass_the_body_limit(cheap_server, arbiter):
    """The old server read `Content-Length: -1` as "read to the end": any size got through. The body here is
    valid JSON over 16 MiB, so a server that read it would score it (200)."""
    body = json.dumps({"task_id": arbiter.id, "completion": "x" * (17 << 20)}).encode()
    head = b"POST /score HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n"
    answer = sh.raw_exchange(cheap_server, head, (body[:1024], body[1024:]))
    assert sh.status_of(answer) == 400, answer[:300]
    # And the server is still there.
    assert sh.request(cheap_server + "/health")[0] == 200


def test_a_body_over_the_limit_is_refused_while_it_streams(cheap_engine, arbiter):
    """No Content-Length at all (chunked): the cap is counted as the body arrives."""
    with sh.running(cheap_engine, [arbiter], max_body=4096) as url:
        item = json.dumps({"task_id": arbiter.id, "completion": "x" * 10000}).encode()
        chunked = b"".join(
            b"%x\r\n%s\r\n" % (len(item[i : i + 1000]), item[i : i + 1000]) for i in range(0, len(item), 1000)
        )
        head = b"POST /score HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        answer = sh.raw_exchange(url, head, (chunked + b"0\r\n\r\n",))
        assert sh.status_of(answer) == 413 and b"split" in answer


def test_two_hundred_simultaneous_clients_are_all_answered(cheap_server):
    """The old listen backlog was 5: of 200 clients connecting at once, some never got an answer."""

    async def one() -> str:
        host, port = cheap_server.removeprefix("http://").split(":")
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 10)
            writer.write(b"GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            await writer.drain()
            data = await asyncio.wait_for(reader.read(), 20)
            writer.close()
            return data.split(b"\r\n", 1)[0].decode()
        except (OSError, TimeoutError) as exc:
            return type(exc).__name__

    async def burst() -> list[str]:
        return await asyncio.gather(*(one() for _ in range(200)))

    outcomes = Counter(asyncio.run(burst()))
    assert outcomes == {"HTTP/1.1 200 OK": 200}, outcomes


def test_slow_clients_are_cut_off_and_do_not_block_others(cheap_engine, arbiter):
    """Clients that stall in their request head or body are disconnected after the client timeout (a 408
    when the head arrived); meanwhile a normal request is answered. The old server waited forever."""
    with sh.running(cheap_engine, [arbiter], client_timeout=1.0) as url:
        host, port = url.removeprefix("http://").split(":")
        stalled = []
        for i in range(40):
            s = socket.create_connection((host, int(port)), timeout=30)
            if i % 2:
                s.sendall(b"POST /score HTTP/1.1\r\nHost: t\r\n")  # half a head
            else:
                s.sendall(
                    b'POST /score HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{"task'
                )  # half a body
            stalled.append(s)
        status, _, body = sh.request(
            url + "/score", {"task_id": arbiter.id, "completion": sh.reply("correct")}
        )
        assert status == 200 and body["passed"] is True
        outcomes = Counter()
        deadline = time.monotonic() + 30  # one wait for all of them, not 30 s each
        for s in stalled:
            data = b""
            try:
                while True:
                    s.settimeout(max(0.1, deadline - time.monotonic()))
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                outcomes[sh.status_of(data) or "closed"] += 1
            except TimeoutError:
                outcomes["still open after 30 s"] += 1
            except OSError:
                outcomes[sh.status_of(data) or "closed"] += 1
            finally:
                s.close()
        assert outcomes == {408: 20, "closed": 20}, outcomes


def test_a_full_server_refuses_with_429_and_never_runs_more_than_its_workers():
    """80 looping clients made a correct reply 62x slower on the old server: it ran every request at once.
    Now at most `jobs` evaluations run; what does not fit in the queue is refused with Retry-After."""
    sh.Probe.reset(seconds=1.0)
    engine = sh.probe_engine()
    with sh.running(engine, [sh.PROBE_TASK], jobs=2, max_queue=2) as url:

        def post(i: int):
            return sh.request(
                url + "/score", {"task_id": "t1", "completion": f"module top; endmodule // {i}"}
            )

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(post, range(16)))
    engine.close()
    statuses = Counter(a[0] for a in answers)
    assert statuses[429] >= 1 and statuses[200] >= 4, statuses
    assert set(statuses) <= {200, 429}, statuses
    refused = [a for a in answers if a[0] == 429]
    assert all(int(a[1]["retry-after"]) >= 1 for a in refused)
    assert all("retry" in a[2]["error"] for a in refused)
    assert sh.Probe.peak <= 2, sh.Probe.peak
    assert sh.Probe.runs == statuses[200]  # a refused request was not evaluated


def test_a_batch_that_can_never_fit_is_refused_with_advice():
    engine = sh.probe_engine()
    with sh.running(engine, [sh.PROBE_TASK], jobs=1, max_queue=3) as url:
        items = [{"task_id": "t1", "completion": f"module top; endmodule // {i}"} for i in range(5)]
        status, _, body = sh.request(url + "/score_batch", {"items": items})
    engine.close()
    assert status == 413 and "split" in body["error"] and "--max-queue" in body["error"]


def test_a_request_has_a_time_limit():
    """The old server had none: a request waited as long as its evaluation took."""
    sh.Probe.reset()
    engine = sh.probe_engine()
    with sh.running(engine, [sh.PROBE_TASK], jobs=3, request_timeout=2.0) as url:
        status, _, body = sh.request(
            url + "/score", {"task_id": "t1", "completion": "module top; endmodule // SLOW6"}
        )
        assert status == 504 and "--request-timeout" in body["error"]
        items = [
            {"task_id": "t1", "completion": "module top; endmodule // SLOW6 again"},
            {"task_id": "t1", "completion": "module top; endmodule // fast"},
        ]
        status, _, body = sh.request(url + "/score_batch", {"items": items})
    engine.close()
    slow, fast = body["rewards"]
    assert status == 200 and slow["status"] == 504 and "time limit" in slow["error"]
    assert fast["passed"] is True


def test_one_bad_item_gets_an_error_and_the_others_are_scored(cheap_engine, arbiter):
    """`{"task": "x"}` made the old server answer 500 for the whole batch (so did a non-numeric sample)."""
    good = {"task_id": arbiter.id, "completion": sh.reply("correct")}
    items = [
        good,
        {"task": "x"},
        {"task": {"id": "t", "harness": "not an object"}},
        {"task": {"no_id": 1}},
        {"task_id": arbiter.id, "completion": "x", "sample": "abc"},
        {"task_id": ["a", "list"], "completion": "x"},
        {"task_id": arbiter.id, "files": {"a.sv": 5}},
        "not an object",
        {"task_id": arbiter.id, "completion": sh.reply("prose_only")},
    ]
    with sh.running(cheap_engine, [arbiter], allow_inline_tasks=True) as url:
        status, _, body = sh.request(url + "/score_batch", {"items": items})
    assert status == 200, body
    rewards = body["rewards"]
    assert len(rewards) == len(items)
    assert rewards[0]["passed"] is True and rewards[-1]["total"] == 0.0 and "error" not in rewards[-1]
    for bad in rewards[1:-1]:
        assert bad["status"] == 400 and bad["error"], bad


@pytest.mark.parametrize("opener", [b"[", b'{"a":'])
def test_deeply_nested_json_gets_a_400_not_a_dropped_connection(cheap_server, opener):
    closer = b"]" if opener == b"[" else b"}"
    body = opener * 100_000 + b"1" + closer * 100_000
    status, _, answer = sh.request(cheap_server + "/score_batch", raw=body)
    assert status == 400 and "nested deeper" in answer["error"]
    assert sh.request(cheap_server + "/health")[0] == 200


def test_a_token_is_required_when_the_server_has_one(cheap_engine, arbiter):
    """The old server had no authentication at all."""
    item = {"task_id": arbiter.id, "completion": sh.reply("prose_only")}
    with sh.running(cheap_engine, [arbiter], token=TOKEN) as url:
        status, headers, body = sh.request(url + "/score", item)
        assert status == 401 and headers["www-authenticate"].startswith("Bearer") and "token" in body["error"]
        assert sh.request(url + "/score", item, headers={"Authorization": "Bearer wrong"})[0] == 401
        assert sh.request(url + "/tasks")[0] == 401
        assert sh.request(url + "/metrics")[0] == 401
        assert sh.request(url + "/score", item, headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200
        assert sh.request(url + f"/score?token={TOKEN}", item)[0] == 200  # for OpenRLHF's bare URL
        assert sh.request(url + "/health")[0] == 200  # liveness probes need no token


def test_inline_tasks_are_off_unless_allowed(cheap_engine, arbiter):
    """Inline tasks carry harness code the server runs: the old server accepted them by default."""
    item = {"task": arbiter.to_dict(), "completion": sh.reply("correct")}
    with sh.running(cheap_engine, [arbiter]) as url:
        status, _, body = sh.request(url + "/score", item)
    assert status == 403 and "--allow-inline-tasks" in body["error"]
    with sh.running(cheap_engine, [arbiter], allow_inline_tasks=True) as url:
        status, _, body = sh.request(url + "/score", item)
    assert status == 200 and body["passed"] is True


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rtlreward", "serve", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    ("host", "options"),
    [
        # The old CLI's options still parse (the refusal comes after them): -d, --profile, --executor, and
        # --inline-tasks / --no-inline-tasks beside the new --allow-inline-tasks.
        ("0.0.0.0", ["-d", str(sh.ARBITER), "--profile", "seed", "--executor", "local", "--inline-tasks"]),
        ("::", ["--no-inline-tasks", "--jobs", "1", "--max-queue", "4", "--request-timeout", "60"]),
    ],
)
def test_the_server_refuses_to_listen_beyond_loopback_without_a_token(host, options):
    done = _serve("--host", host, "--port", "0", *options, env={"RTLREWARD_SERVER_TOKEN": ""})
    assert (
        done.returncode == 2 and "without a token" in done.stderr and "RTLREWARD_SERVER_TOKEN" in done.stderr
    )


def test_the_bind_rule():
    from rtlreward_server.run import BindError, check_bind, is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("")
    check_bind("127.0.0.1", None)
    check_bind("0.0.0.0", TOKEN)
    with pytest.raises(BindError, match="without a token"):
        check_bind("0.0.0.0", None)
    with pytest.raises(BindError, match="at least 16"):
        check_bind("127.0.0.1", "short")


def test_nesting_is_measured_outside_strings_and_the_counts_are_capped():
    """Brackets inside strings (Verilog is full of them), escaped quotes and backslashes do not count; the
    limits refuse before the parser runs."""
    from rtlreward_server.jsonlimits import MAX_CONTAINERS, MAX_STRINGS, BodyError, parse_body

    deep_string = json.dumps({"items": [{"completion": "[" * 10_000 + '\\"{' * 1000 + "\\"}]})
    assert parse_body(deep_string.encode())["items"][0]["completion"].startswith("[[[")
    assert parse_body(b"[" * 64 + b"]" * 64) is not None
    with pytest.raises(BodyError, match="nested deeper than 64"):
        parse_body(b'["\\\\", ' * 65 + b"1" + b"]" * 65)  # an escaped backslash does not hide a quote
    with pytest.raises(BodyError, match="strings"):
        parse_body(b"[" + b'"",' * (MAX_STRINGS + 1) + b'""]')
    with pytest.raises(BodyError, match="arrays and objects"):
        parse_body(b"[" + b"[]," * (MAX_CONTAINERS + 1) + b"[]]")
    with pytest.raises(BodyError, match="not JSON") as err:
        parse_body(b'{"a": 1')
    assert err.value.status == 400
    with pytest.raises(BodyError) as err:
        parse_body(b"x" * 100, max_body=10)
    assert err.value.status == 413
