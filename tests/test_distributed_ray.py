"""The ray executor's driver side on a small local Ray (`ray.init(num_cpus=2)`): whole candidates as Ray tasks,
the task through the object store once, results streamed as they finish, identical pairs evaluated once, the
engine and the bulk evaluator delegating to it. The no-shared-disk cluster (a worker in a container) and node
loss are in test_distributed_cluster.py."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

ray = pytest.importorskip("ray")

from rtlreward.distributed import RayBackend, RayScorer, RemoteScoringError  # noqa: E402
from rtlreward.engine import Engine  # noqa: E402
from rtlreward.evaluate import evaluate  # noqa: E402
from rtlreward.model import Candidate, Reward  # noqa: E402
from rtlreward.plugins import get_registry  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# Only the format stage: no HDL tool runs, so these tests are about the distribution, not the simulators.
FORMAT_ONLY = {"name": "format-only", "stages": ["format"], "weights": {"format": 1.0}, "verdict": "format"}


@pytest.fixture(scope="module")
def local_ray():
    # address="local": never join another user's cluster on this machine
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def tasks():
    return {t.id: t for t in get_registry().datasets()["folder"].load(str(EXAMPLES))}


def reply(task_id: str, name: str) -> str:
    return (EXAMPLES / task_id / "completions" / f"{name}.txt").read_text()


def comparable(r: Reward) -> dict:
    """A reward without what differs between runs of the same evaluation (timings, cache flags)."""
    metrics = {k: v for k, v in r.metrics.items() if not k.endswith(("/duration", "/cached"))}
    stages = {n: (s.status, s.score, s.feedback, s.diagnostics) for n, s in r.stages.items()}
    return {"total": r.total, "passed": r.passed, "sample": r.sample, "metrics": metrics, "stages": stages}


class CountingRemote:
    """Stands in front of the real remote function: counts submissions, passes them to Ray unchanged."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[tuple] = []

    def remote(self, *args):
        self.calls.append(args)
        return self.inner.remote(*args)


def test_the_ray_executor_is_a_backend_the_engine_delegates_to(local_ray, tasks):
    engine = Engine(FORMAT_ONLY, executor="ray", cache=False)
    try:
        assert isinstance(engine.executor, RayBackend)
        assert isinstance(engine.remote, RayScorer)
        assert engine.describe()["executor"] == {"executor": "ray", "isolation": "ray+local"}
        # the worker builds the same engine: class, profile, limits; its cache and workspace are its own
        assert engine.remote.spec.engine_cls is Engine
        assert engine.remote.spec.profile == engine.profile
        assert engine.remote.spec.cache is False
        with pytest.raises(RuntimeError, match="runs no command on the driver"):
            engine.executor.run(["true"], workspace=Path("/tmp"))
    finally:
        engine.close()
    assert ray.is_initialized()  # the test's own connection is not the engine's to close


def test_stream_yields_every_item_once_and_evaluates_identical_pairs_once(local_ray, tasks, monkeypatch):
    counter = CountingRemote
    engine = Engine(FORMAT_ONLY, executor="ray", cache=False)
    scorer = engine.remote
    scorer._remote = counter(scorer._remote)
    puts: list[object] = []
    real_put = ray.put
    monkeypatch.setattr(ray, "put", lambda value, **kw: (puts.append(value), real_put(value, **kw))[1])
    arb, fifo = tasks["fixed_priority_arbiter"], tasks["sync_fifo"]
    good = reply(arb.id, "correct")
    items = [
        (arb, Candidate(text=good, sample=0)),
        (arb, Candidate(text=good, sample=1)),  # the same answer again: one evaluation, two rewards
        (arb, Candidate(text="no code here", sample=2)),
        (fifo, Candidate(files=fifo.reference, sample=0)),
        (fifo, Candidate(files=fifo.reference, sample=1)),
    ]
    try:
        got = dict(scorer.stream(items, window=8))
    finally:
        engine.close()
    assert sorted(got) == [0, 1, 2, 3, 4]
    assert all(isinstance(r, Reward) for r in got.values())
    assert [got[i].sample for i in range(5)] == [0, 1, 2, 0, 1]
    assert comparable(got[0]) | {"sample": 1} == comparable(got[1])
    assert got[0].total == 1.0 and got[2].total == 0.0
    assert len(scorer._remote.calls) == 3  # five items, three distinct (task, answer) pairs
    # each task went into the object store once, and the evaluations got a reference to it, not the task
    assert sorted(t.id for t in puts if hasattr(t, "harness")) == sorted([arb.id, fifo.id])
    for _spec, task_arg, _cand in scorer._remote.calls:
        assert isinstance(task_arg, ray.ObjectRef)


def test_rewards_match_the_local_executor_on_real_stages(local_ray, tasks):
    """The default profile's real stages (Icarus, cocotb, Verilator) on Ray workers give the local rewards."""
    arb, counter = tasks["fixed_priority_arbiter"], tasks["counter"]
    items = [
        (arb, Candidate(text=reply(arb.id, "correct"))),
        (arb, Candidate(text=reply(arb.id, "syntax_error"), sample=1)),
        (counter, Candidate(text=reply(counter.id, "en_ignores_load"))),
    ]
    with Engine("shaped", cache=False) as local:
        expected = local.score_batch(items)
    seen: list[tuple[int, int]] = []
    with Engine("shaped", executor="ray", cache=False) as remote:
        got = remote.score_batch(items, progress=lambda d, t: seen.append((d, t)))
        one = remote.score(*items[2])
    assert [comparable(r) for r in got] == [comparable(r) for r in expected]
    assert comparable(one) == comparable(expected[2])
    assert seen == [(1, 3), (2, 3), (3, 3)]
    assert expected[0].passed and not expected[1].passed and 0 < expected[2].total < expected[0].total


def test_the_bulk_evaluator_streams_into_the_results_file_and_resumes(local_ray, tasks, tmp_path):
    arb = tasks["fixed_priority_arbiter"]
    completions = tmp_path / "c.jsonl"
    lines = [{"id": arb.id, "completion": reply(arb.id, "correct")} for _ in range(3)]
    lines.append({"id": arb.id, "completion": "no code"})
    completions.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "r.jsonl"
    calls: list[int] = []
    engine = Engine(FORMAT_ONLY, executor="ray", cache=False)
    engine.remote._remote = CountingRemote(engine.remote._remote)
    try:
        first = evaluate(
            [arb], completions, engine, out_path=out, progress=lambda d, t, row: calls.append(d), warn=print
        )
        again = evaluate([arb], completions, engine, out_path=out, progress=False, warn=print)
    finally:
        engine.close()
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted((r["id"], r["sample"]) for r in rows) == [(arb.id, s) for s in range(4)]
    assert first.scored == 4 and first.errors == 0 and calls == [1, 2, 3, 4]
    assert again.scored == 0 and again.resumed == 4  # the rerun found everything in the file
    assert len(engine.remote._remote.calls) == 2  # three identical answers in flight together: one evaluation


class _RepeatingStream:
    """A remote scorer that reports every item twice (as a retried evaluation could): the results file must
    still get one row per (id, sample)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def stream(self, items, window=None):
        for i, (task, cand) in enumerate(items):
            r = self.engine.score(task, cand)
            yield i, r
            yield i, attrs.evolve(r)


def test_the_results_file_gets_one_row_per_key_whatever_the_stream_repeats(tasks, tmp_path):
    arb = tasks["fixed_priority_arbiter"]
    completions = tmp_path / "c.jsonl"
    completions.write_text(
        "".join(json.dumps({"id": arb.id, "completion": f"x{i}"}) + "\n" for i in range(3))
    )
    out = tmp_path / "r.jsonl"
    with Engine(FORMAT_ONLY, cache=False) as inner:
        fake = type("E", (), {"remote": _RepeatingStream(inner), "profile": inner.profile})()
        summary = evaluate([arb], completions, fake, out_path=out, progress=False, warn=print)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted((r["id"], r["sample"]) for r in rows) == [(arb.id, 0), (arb.id, 1), (arb.id, 2)]
    assert summary.scored == 3


class _FailingRemote:
    def __init__(self, ray_mod):
        @ray_mod.remote(max_retries=0)
        def boom(spec, task, cand):
            raise OSError("disk full on the worker")

        self.fn = boom

    def remote(self, *args):
        return self.fn.remote(*args)


def test_an_evaluation_that_fails_on_the_cluster_is_reported_not_recorded(local_ray, tasks, tmp_path):
    arb = tasks["fixed_priority_arbiter"]
    completions = tmp_path / "c.jsonl"
    completions.write_text(json.dumps({"id": arb.id, "completion": "x"}) + "\n")
    out = tmp_path / "r.jsonl"
    warnings: list[str] = []
    engine = Engine(FORMAT_ONLY, executor="ray", cache=False)
    engine.remote._remote = _FailingRemote(ray)
    try:
        summary = evaluate([arb], completions, engine, out_path=out, progress=False, warn=warnings.append)
        with pytest.raises(RemoteScoringError, match="disk full on the worker"):
            engine.score_batch([(arb, "x")])
    finally:
        engine.close()
    assert summary.errors == 1 and summary.scored == 0
    assert not out.exists() or out.read_text() == ""
    assert any("rerun retries it" in w and "disk full" in w for w in warnings)
