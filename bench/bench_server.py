"""The reward server under load: latency percentiles and throughput of `rtlreward serve` against the same
replies scored in-process, measured in the same run.

Workload (as the load test, tests/test_server_load.py): N distinct replies to the fixed-priority-arbiter task,
most of them failing early and cheaply (prose, `$system`, an outside include, renamed ports, a syntax error:
format, safety and interface decide them) and `--simulate` of them correct or nearly so, which go on to compile
and a cocotb run. The profile runs compile only after an interface pass, so the mix is mostly cheap, like a
policy early in training. Each reply is made distinct inside its code, so no cache or dedupe shortens the work.

Contenders, each with a fresh result cache and the same engine concurrency (`--jobs`):
- reference: `Engine(profile).score_batch(all replies)` in this process (no HTTP, no admission);
- server: a `rtlreward serve` subprocess on 127.0.0.1 and `--clients` concurrent `AsyncRewardClient`s, each
  sending one reply per request (closed loop: a client sends its next reply when the last one is answered).

Printed: wall time and replies/s of both, the server's per-request latency p50/p95/p99 (queue wait included:
with C clients and J workers a request waits for about C/J evaluations ahead of it) and the throughput ratio
server/reference (the cost of HTTP, JSON and admission; 1.00x means none).

    python bench/bench_server.py                       # 500 replies, 32 clients, jobs 2, 3 simulated (~2 min)
    python bench/bench_server.py --replies 200 --clients 16 --max-queue 8    # with 429s and retries
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common

PROFILE = """
name = "bench-server"
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
FOLDER = common.EXAMPLES / "fixed_priority_arbiter"
CHEAP = ["renamed_ports", "prose_only", "system_call", "include_passwd", "syntax_error"]
SIMULATED = ["correct", "think_then_code", "reversed_priority"]


def replies(n: int, simulate: int) -> list[str]:
    def distinct(name: str, i: int) -> str:
        text = (FOLDER / "completions" / f"{name}.txt").read_text()
        if "```verilog\n" in text:
            return text.replace("```verilog\n", f"```verilog\n// bench reply {i}\n", 1)
        return f"{text} (reply {i})"

    out = [distinct(SIMULATED[i % len(SIMULATED)], i) for i in range(min(simulate, n))]
    out += [distinct(CHEAP[i % len(CHEAP)], i) for i in range(len(out), n)]
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def in_process(task, texts: list[str], profile: Path, jobs: int, cache: Path) -> float:
    from rtlreward.engine import Engine

    with Engine(str(profile), cache=cache, jobs=jobs) as engine:
        seconds, rewards = common.timed(lambda: engine.score_batch([(task, t) for t in texts]))
    assert len(rewards) == len(texts)
    return seconds


def start_server(profile: Path, jobs: int, max_queue: int, cache_dir: Path) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "RTLREWARD_CACHE_DIR": str(cache_dir), "PYTHONUNBUFFERED": "1"}
    env.pop("RTLREWARD_SERVER_TOKEN", None)
    cmd = [sys.executable, "-m", "rtlreward", "serve", "-d", str(FOLDER), "--profile", str(profile)]
    cmd += ["--host", "127.0.0.1", "--port", "0", "--jobs", str(jobs), "--max-queue", str(max_queue)]
    cmd += ["--no-log-requests"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    found = re.search(r" on (http://127\.0\.0\.1:\d+) ", line)
    if not found:
        proc.kill()
        raise common.Missing(f"rtlreward serve did not start: {line.strip()} {proc.stderr.read()[-2000:]}")
    return proc, found.group(1)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def through_server(
    url: str, task_id: str, texts: list[str], clients: int
) -> tuple[float, list[float], int]:
    from rtlreward_server.client import AsyncRewardClient

    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(texts)):
        queue.put_nowait(i)
    latencies: list[float] = []
    async with AsyncRewardClient(url) as probe:  # the server answers before the clock starts
        await probe.health()
    pool = [AsyncRewardClient(url, max_retries=100_000, max_wait=2.0) for _ in range(clients)]

    async def worker(rc: AsyncRewardClient) -> None:
        while not queue.empty():
            i = queue.get_nowait()
            start = time.perf_counter()
            reward = await rc.score(task_id, texts[i], sample=i)
            latencies.append(time.perf_counter() - start)
            assert reward["sample"] == i

    start = time.perf_counter()
    try:
        await asyncio.gather(*(worker(rc) for rc in pool))
    finally:
        wall = time.perf_counter() - start
        for rc in pool:
            await rc.aclose()
    return wall, latencies, sum(rc.retries for rc in pool)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replies", type=int, default=500)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--simulate", type=int, default=3, help="replies that reach compile + cocotb")
    ap.add_argument("--jobs", type=int, default=2, help="engine workers (both contenders)")
    ap.add_argument(
        "--max-queue", type=int, default=1024, help="the server's queue (small: 429s and retries)"
    )
    ap.add_argument("--repeat", type=int, default=1, help="rounds; the median round is reported")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    common.require_tools("iverilog")
    common.require_python("rtlreward_server.client", "uvicorn", "starlette")
    common.header(
        f"bench_server: {args.replies} replies ({args.simulate} simulated), {args.clients} clients, "
        f"jobs {args.jobs}, queue {args.max_queue}"
    )
    from rtlreward.integration import load_tasks

    task = load_tasks(str(FOLDER))[0]
    texts = replies(args.replies, args.simulate)
    rounds = []
    with common.temp_dir("server") as tmp:
        profile = tmp / "bench.toml"
        profile.write_text(PROFILE)
        for r in range(max(1, args.repeat)):
            ref = in_process(task, texts, profile, args.jobs, tmp / f"ref-{r}.sqlite")
            proc, url = start_server(profile, args.jobs, args.max_queue, tmp / f"srv-{r}")
            try:
                wall, lat, retries = asyncio.run(through_server(url, task.id, texts, args.clients))
            finally:
                stop(proc)
            rounds.append({"reference_s": ref, "server_s": wall, "latencies": lat, "retries": retries})
            print(f"round {r + 1}: reference {ref:.2f} s, server {wall:.2f} s, {retries} refusals retried")
    best = sorted(rounds, key=lambda x: x["server_s"])[len(rounds) // 2]
    lat = best["latencies"]
    n = len(texts)
    p50, p95, p99 = (percentile(lat, q) for q in (50, 95, 99))
    print()
    print(
        common.table(
            [
                [
                    "in-process Engine.score_batch",
                    f"{best['reference_s']:.2f}",
                    f"{n / best['reference_s']:.1f}",
                    "-",
                    "-",
                    "-",
                    "1.00x",
                ],
                [
                    f"rtlreward serve, {args.clients} clients",
                    f"{best['server_s']:.2f}",
                    f"{n / best['server_s']:.1f}",
                    f"{p50:.3f}",
                    f"{p95:.3f}",
                    f"{p99:.3f}",
                    f"{best['reference_s'] / best['server_s']:.2f}x",
                ],
            ],
            ["contender", "wall s", "replies/s", "p50 s", "p95 s", "p99 s", "throughput vs ref"],
        )
    )
    print(
        f"\nmean latency {statistics.mean(lat):.3f} s over {len(lat)} requests; {best['retries']} 429s retried"
    )
    print(common.load_line())
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "replies": n,
                    "clients": args.clients,
                    "jobs": args.jobs,
                    "reference_s": best["reference_s"],
                    "server_s": best["server_s"],
                    "p50_s": p50,
                    "p95_s": p95,
                    "p99_s": p99,
                    "retries": best["retries"],
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    common.run_main(main)
