"""The HTTP reward server over a real socket on loopback, scoring with the real engine."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import server_helpers as sh

from rtlreward.integration import load_tasks

ROOT = Path(__file__).resolve().parents[1]
ARBITER = ROOT / "examples" / "fixed_priority_arbiter"


@pytest.fixture(scope="module")
def server():
    from rtlreward.engine import Engine

    tasks = load_tasks(str(ARBITER))
    engine = Engine(profile="seed")
    # Inline tasks are off by default (they carry harness code); this module tests them, so it allows them.
    with sh.running(engine, tasks, allow_inline_tasks=True) as url:
        yield url, tasks[0]
    engine.close()


def _post(url, payload, raw=None):
    data = raw if raw is not None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _reply(name):
    return (ARBITER / "completions" / f"{name}.txt").read_text()


def test_health_and_tasks(server):
    url, task = server
    with urllib.request.urlopen(url + "/health") as r:
        assert json.loads(r.read())["tasks"] == 1
    with urllib.request.urlopen(url + "/tasks") as r:
        assert json.loads(r.read())["tasks"] == [task.id]


def test_score_by_id_and_inline_task(server):
    url, task = server
    status, body = _post(url + "/score", {"task_id": task.id, "completion": _reply("correct")})
    assert status == 200 and body["total"] == pytest.approx(1.4) and body["passed"] is True
    assert body["stages"]["tests"]["status"] == "passed"
    status, body = _post(url + "/score", {"task": task.to_dict(), "completion": _reply("syntax_error")})
    assert status == 200 and body["total"] == pytest.approx(0.1)


def test_batch_keeps_good_items_when_one_is_bad(server):
    url, task = server
    items = [
        {"task_id": task.id, "completion": _reply("correct")},
        {"task_id": "nope", "completion": "x"},
        {"task_id": task.id, "completion": _reply("prose_only")},
    ]
    status, body = _post(url + "/score_batch", {"items": items})
    assert status == 200
    r = body["rewards"]
    assert r[0]["total"] == pytest.approx(1.4) and "unknown task id" in r[1]["error"] and r[2]["total"] == 0.0
    assert r[1]["status"] == 404


@pytest.mark.parametrize(
    ("payload", "raw", "code", "words"),
    [
        (None, b"\xff\xfenot json", 400, "not JSON"),
        ({"completion": "x"}, None, 400, "task_id"),
        ({"task_id": "fixed_priority_arbiter"}, None, 400, "completion"),
        ({"task_id": "zzz", "completion": "x"}, None, 404, "unknown task id"),
        ({"items": "nope"}, None, 400, "items"),
    ],
)
def test_bad_requests_get_clear_errors(server, payload, raw, code, words):
    url, _ = server
    endpoint = "/score_batch" if payload and "items" in payload else "/score"
    status, body = _post(url + endpoint, payload, raw)
    assert status == code and words in body["error"]
