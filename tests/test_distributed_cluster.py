"""The ray executor on a cluster with NO shared disk: a Ray head here (0 CPUs, so every evaluation goes to a
worker) and a worker node in a Docker container on the host network, loopback addresses only
(tests/ray_cluster_helpers.py). A path shared by accident fails here: the worker sees none of the driver's files.

- rewards identical to the local executor, the workspaces made on the worker;
- `docker kill` of the worker mid-batch, a new worker started: every completion scored, none twice in the
  results file;
- `rtlreward eval ... --executor ray --ray-address` from a separate process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from ray_cluster_helpers import SRC_IN_CONTAINER, ClusterUnavailable, NoSharedDiskCluster, docker_ok  # noqa: E402

from rtlreward.distributed import worker_identity  # noqa: E402
from rtlreward.engine import Engine  # noqa: E402
from rtlreward.evaluate import evaluate  # noqa: E402
from rtlreward.model import Candidate, Reward  # noqa: E402
from rtlreward.plugins import get_registry  # noqa: E402

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
# A handful of replies: passes, partial credit, a syntax error, a gated system call.
REPLIES = [
    ("fixed_priority_arbiter", "correct"),
    ("fixed_priority_arbiter", "syntax_error"),
    ("fixed_priority_arbiter", "system_call"),
    ("counter", "en_ignores_load"),
    ("sync_fifo", "correct"),
    ("sync_fifo", "full_overwrites"),
]


@pytest.fixture(scope="module")
def cluster():
    if not docker_ok():
        pytest.skip("needs a running Docker engine")
    c = NoSharedDiskCluster(head_cpus=0, worker_cpus=1)
    try:
        try:
            c.start()
            c.add_worker()
        except ClusterUnavailable as exc:
            pytest.skip(f"no test cluster: {exc}")
        ray.init(address=c.address, log_to_driver=False)
        c.wait_for_cpus(1)
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.close()


@pytest.fixture(scope="module")
def tasks():
    return {t.id: t for t in get_registry().datasets()["folder"].load(str(EXAMPLES))}


def reply(task_id: str, name: str) -> str:
    return (EXAMPLES / task_id / "completions" / f"{name}.txt").read_text()


def comparable(r: Reward) -> dict:
    metrics = {k: v for k, v in r.metrics.items() if not k.endswith(("/duration", "/cached"))}
    stages = {n: (s.status, s.score, s.feedback, s.diagnostics) for n, s in r.stages.items()}
    return {"total": r.total, "passed": r.passed, "sample": r.sample, "metrics": metrics, "stages": stages}


@pytest.fixture(scope="module")
def local_rewards(tasks):
    items = [(tasks[t], Candidate(text=reply(t, n), sample=i)) for i, (t, n) in enumerate(REPLIES)]
    with Engine("shaped", cache=False) as engine:
        return items, engine.score_batch(items)


def test_a_worker_registers_the_built_in_plugins_before_any_evaluation(cluster):
    """The worker image carries the installed metadata (the entry points the plugins register through), whatever
    the checkout's path and whatever `.egg-info` lies in it: a worker lists the same stages, profiles and datasets
    as the driver. Runs first in this module, before any evaluation reaches the worker."""
    script = (
        "import json; from rtlreward.plugins import get_registry; r = get_registry(); "
        "print(json.dumps({k: sorted(getattr(r, k)()) for k in ('stages', 'profiles', 'datasets')}))"
    )
    res = cluster.worker_exec(cluster.workers[0], "python3", "-c", script)
    assert res.returncode == 0, res.stdout + res.stderr
    remote = json.loads(res.stdout.strip().splitlines()[-1])
    registry = get_registry()
    assert remote == {k: sorted(getattr(registry, k)()) for k in ("stages", "profiles", "datasets")}
    assert {"format", "safety", "interface", "lint", "compile", "tests", "equivalence"} <= set(
        remote["stages"]
    )


def test_the_worker_image_takes_metadata_from_site_packages_not_the_checkout(tmp_path, monkeypatch):
    """Run from a checkout with `pip install -e .`'s `.egg-info` in it (first on sys.path), the image still gets
    rtlreward's installed dist-info with its entry points."""
    import importlib.metadata

    from ray_cluster_helpers import find_distribution, install_paths

    fake = tmp_path / "rtlreward.egg-info"
    fake.mkdir()
    (fake / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: rtlreward\nVersion: 0.0.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert importlib.metadata.distribution("rtlreward").version == "0.0.0"  # what the old lookup found
    dist = find_distribution("rtlreward")
    assert dist.version != "0.0.0"
    assert any(str(dist._path).startswith(p) for p in install_paths())  # type: ignore[attr-defined]
    assert "[rtlreward]" in (dist.read_text("entry_points.txt") or "")


def test_the_worker_shares_no_file_system_with_the_driver(cluster, tmp_path):
    marker = tmp_path / "driver-only.txt"
    marker.write_text("on the driver's disk")

    def probe(paths):  # defined here so Ray ships it by value (this test module is not on the worker)
        import os

        import rtlreward
        from rtlreward.distributed import worker_identity

        return worker_identity(), {p: os.path.exists(p) for p in paths}, rtlreward.__file__

    remote = ray.remote(num_cpus=1)(probe)
    where, exists, module = ray.get(remote.remote([str(marker), str(ROOT), str(tmp_path)]), timeout=120)
    here = worker_identity()
    assert where["pid_ns"] != here["pid_ns"] and where["mnt_ns"] != here["mnt_ns"]
    assert not any(exists.values()), exists  # not the driver's files, not its checkout
    assert module.startswith(SRC_IN_CONTAINER)  # the worker's own copy of the code
    assert ray.cluster_resources().get("CPU") == 1  # the head takes no evaluations: they all go to the worker


def test_rewards_match_the_local_executor_and_workspaces_are_made_on_the_worker(
    cluster, local_rewards, tmp_path, monkeypatch
):
    items, expected = local_rewards
    # On the driver, workspaces would land (and stay) here; the worker has no such folder.
    kept = tmp_path / "ws"
    kept.mkdir()
    monkeypatch.setenv("RTLREWARD_WORKSPACE_DIR", str(kept))
    monkeypatch.setenv("RTLREWARD_KEEP_WORKSPACE", "1")
    with Engine("shaped", executor="ray", cache=False, executor_options={"address": cluster.address}) as eng:
        got = eng.score_batch(items)
    assert [comparable(r) for r in got] == [comparable(r) for r in expected]
    assert list(kept.iterdir()) == []  # nothing was evaluated on the driver
    # the replies exercise the whole range: a pass, the gate, a syntax error, partial credit
    totals = [r.total for r in expected]
    assert expected[0].passed and totals[0] == max(totals)
    assert totals[2] == 0.0 and not expected[1].passed and 0 < totals[3] < totals[0]


def test_a_worker_killed_mid_batch_loses_nothing_and_scores_nothing_twice(
    cluster, tasks, local_rewards, tmp_path
):
    _, expected = local_rewards
    completions = tmp_path / "c.jsonl"
    completions.write_text(
        "".join(
            json.dumps({"id": t, "sample": i, "completion": reply(t, n)}) + "\n"
            for i, (t, n) in enumerate(REPLIES)
        )
    )
    out = tmp_path / "r.jsonl"
    events: list[str] = []

    def on_row(done: int, total: int, row: dict) -> None:
        if done == 1:  # evaluations are still running or queued: kill the only worker, start another
            victim = cluster.workers[-1]
            cluster.kill_worker(victim)
            events.append(f"killed {victim} after {done}/{total}")
            cluster.add_worker()
            events.append("new worker")

    with Engine("shaped", executor="ray", cache=False) as eng:
        summary = evaluate(list(tasks.values()), completions, eng, out_path=out, progress=on_row, warn=print)
    assert len(events) == 2, events
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    keys = [(r["id"], r["sample"]) for r in rows]
    assert len(keys) == len(set(keys)) == len(REPLIES)  # every completion once, none twice
    assert summary.scored == len(REPLIES) and summary.errors == 0
    by_sample = {r["sample"]: r for r in rows}
    for i, reward in enumerate(expected):
        assert by_sample[i]["reward"] == round(reward.total, 6), (i, by_sample[i], reward.total)
        assert by_sample[i]["passed"] == reward.passed


def test_rtlreward_eval_runs_on_the_cluster_from_the_command_line(cluster, tmp_path):
    out = tmp_path / f"ref-{uuid.uuid4().hex[:6]}.jsonl"
    argv = [sys.executable, "-m", "rtlreward", "eval", str(EXAMPLES), "--reference"]
    argv += ["--executor", "ray", "--ray-address", cluster.address, "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = [json.loads(x) for x in out.read_text().splitlines()[1:]]  # after the settings header
    assert sorted(row["id"] for row in rows) == ["counter", "fixed_priority_arbiter", "sync_fifo"]
    assert all(row["passed"] for row in rows)
