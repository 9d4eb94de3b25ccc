"""Scaling of the ray executor from 1 to 2 worker nodes, on a cluster with no shared disk.

The cluster is the test one (tests/ray_cluster_helpers.py): a Ray head on this machine with 0 CPUs for tasks,
worker nodes in Docker containers on the host network (loopback addresses only), 1 CPU each, built offline from
this machine's Python and Ray. The same batch of candidates (the bundled examples' references and completions,
`--copies` distinct samples of each, the `shaped` profile, no result cache anywhere) is scored:

  local      `Engine("shaped", jobs=1)` on this machine: the reference for one evaluation slot
  ray x1     `Engine("shaped", executor="ray")` with one worker node
  ray x2     the same after a second worker node joined

and throughput (candidates/s), p50/p95 per-candidate latency and the ratios ray x2 / ray x1 and ray x1 / local
are printed. Each ray configuration is warmed first (a worker process's first evaluation loads the plugins and
probes tool versions). Numbers on a 2-core machine shared with other work: two 1-CPU workers cannot run more than
two evaluations at a time whatever Ray does, and the head, the driver and Docker take CPU too, so the 2-worker
ratio here is a floor, not what separate machines would give.

Usage: python bench/bench_ray.py [--copies 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from common import EXAMPLES, Missing, header, ratio, require_python  # noqa: E402


def candidates(copies: int) -> list[tuple[Any, Any]]:
    from rtlreward.model import Candidate
    from rtlreward.plugins import get_registry

    tasks = get_registry().datasets()["folder"].load(str(EXAMPLES))
    skip = {"forever_loop"}  # costs its whole time limit: a bench of timeouts says nothing about scaling
    items = []
    for task in tasks:
        replies = [("reference", None)] + [
            (p.stem, p.read_text())
            for p in sorted((Path(task.metadata["folder"]) / "completions").glob("*.txt"))
            if p.stem not in skip
        ]
        for copy in range(copies):
            for name, text in replies:
                # a distinct answer per copy (a comment), so neither the batch nor the in-flight dedupe folds them
                if text is None:
                    files = {p: f"{t}\n// copy {copy}\n" for p, t in task.reference.items()}
                    items.append((task, Candidate(files=files, sample=len(items))))
                else:
                    items.append(
                        (task, Candidate(text=f"{text}\n// copy {copy} {name}\n", sample=len(items)))
                    )
    return items


def run(engine: Any, items: list[tuple[Any, Any]]) -> dict[str, float]:
    """Score the batch through the streaming path (what `rtlreward eval` uses), timing each candidate."""
    start = time.perf_counter()
    latencies: list[float] = []
    stream = getattr(getattr(engine, "remote", None), "stream", None)
    if stream is not None:
        submitted: dict[int, float] = {}

        def feed():
            for i, item in enumerate(items):
                submitted[i] = time.perf_counter()
                yield item

        for i, outcome in stream(feed()):
            if isinstance(outcome, BaseException):
                raise outcome
            latencies.append(time.perf_counter() - submitted[i])
    else:
        for task, cand in items:
            t0 = time.perf_counter()
            engine.score(task, cand)
            latencies.append(time.perf_counter() - t0)
    wall = time.perf_counter() - start
    latencies.sort()
    return {
        "n": len(items),
        "seconds": wall,
        "throughput": len(items) / wall,
        "p50": statistics.median(latencies),
        "p95": latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=2, help="distinct copies of every reply (default 2)")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args()
    try:
        require_python("ray", "docker")
    except Missing as exc:
        print(exc, file=sys.stderr)
        return 2
    import ray
    from ray_cluster_helpers import ClusterUnavailable, NoSharedDiskCluster, docker_ok

    from rtlreward.engine import Engine

    if not docker_ok():
        print("needs a running Docker engine (the worker nodes are containers)", file=sys.stderr)
        return 2
    header("ray executor: 1 -> 2 worker nodes (no shared disk)")
    items = candidates(args.copies)
    warm = candidates(1)[:4]
    results: dict[str, dict[str, float]] = {}
    with Engine("shaped", cache=False, jobs=1) as local:
        local.score_batch(warm[:1])
        results["local"] = run(local, items)
    print(f"local    {results['local']}", flush=True)
    cluster = NoSharedDiskCluster(head_cpus=0, worker_cpus=1)
    try:
        try:
            cluster.start()
            cluster.add_worker()
        except ClusterUnavailable as exc:
            print(f"no cluster: {exc}", file=sys.stderr)
            return 2
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_cpus(1)
        with Engine("shaped", executor="ray", cache=False) as engine:
            engine.score_batch(warm)
            results["ray x1"] = run(engine, items)
            print(f"ray x1   {results['ray x1']}", flush=True)
            cluster.add_worker()
            cluster.wait_for_cpus(2)
            engine.score_batch(warm)
            results["ray x2"] = run(engine, items)
            print(f"ray x2   {results['ray x2']}", flush=True)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.close()
    print()
    print(f"{'config':<8} {'n':>3} {'seconds':>8} {'cand/s':>7} {'p50 s':>6} {'p95 s':>6}")
    for name, r in results.items():
        print(
            f"{name:<8} {r['n']:>3} {r['seconds']:>8.1f} {r['throughput']:>7.3f} {r['p50']:>6.2f} {r['p95']:>6.2f}"
        )
    x1, x2, lo = results["ray x1"], results["ray x2"], results["local"]
    print(f"\nscaling 1 -> 2 workers (throughput x2 / x1): {x2['throughput'] / x1['throughput']:.2f}x")
    print(f"ray x1 against local jobs=1 (throughput): {ratio(1 / lo['throughput'], 1 / x1['throughput'])}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
