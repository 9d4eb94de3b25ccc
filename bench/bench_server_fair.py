"""A fair server: one client's correct reply while another floods the server with zero-delay loops.

A `rtlreward serve` subprocess (profile `shaped`, `--jobs 2`, no result cache) on the fixed-priority-arbiter
example. First the second client alone: `--samples` distinct correct replies, one request at a time (the
reference time). Then the first client, from another loopback address (127.0.0.2), sends `--loops` distinct
replies that loop at zero delay, either as one batch or as that many concurrent requests (`--flood`), and while
they are queued the second client sends its correct replies again. Printed: the second client's latency alone
and under the flood, the ratio (goal: <= 10x, issue 20), whether every correct reply earned the full reward,
and how long the flood's loops took each (the calibrated limit cuts them, rtlreward.calibration).

    python bench/bench_server_fair.py                       # 80 loops as one batch (~1-2 min on 2 cores)
    python bench/bench_server_fair.py --flood requests      # 80 concurrent requests
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common

FOLDER = common.EXAMPLES / "fixed_priority_arbiter"


def post(port: int, path: str, payload: Any, source: str = "127.0.0.1") -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600, source_address=(source, 0))
    try:
        conn.request("POST", path, json.dumps(payload), {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def start_server(jobs: int) -> tuple[subprocess.Popen, int]:
    argv = [sys.executable, "-m", "rtlreward", "serve", str(FOLDER), "--port", "0", "-p", "shaped"]
    argv += ["-j", str(jobs), "--no-cache", "--no-log-requests"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if not m:
        proc.kill()
        raise SystemExit(f"the server did not start: {line!r}")
    return proc, int(m.group(1))


def correct(i: int, tag: str) -> str:
    text = (FOLDER / "completions" / "correct.txt").read_text()
    return text.replace("endmodule", f"// {tag} {i}\nendmodule", 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loops", type=int, default=80)
    ap.add_argument("--samples", type=int, default=3, help="correct replies of the second client per phase")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--flood", choices=["batch", "requests"], default="batch")
    args = ap.parse_args()
    common.require_tools("iverilog")
    common.header("bench_server_fair: a correct reply while another client sends zero-delay loops")
    proc, port = start_server(args.jobs)
    try:
        task = "fixed_priority_arbiter"
        post(port, "/score", {"task_id": task, "completion": correct(0, "warm-up")})  # calibrates the task
        alone, rewards = [], []
        for i in range(args.samples):
            t0 = time.monotonic()
            status, body = post(port, "/score", {"task_id": task, "completion": correct(i, "alone")})
            alone.append(time.monotonic() - t0)
            rewards.append((status, body.get("total"), body.get("max_total")))
        loop = (FOLDER / "completions" / "forever_loop.txt").read_text()
        loops = [loop.replace("endmodule", f"// flood {i}\nendmodule", 1) for i in range(args.loops)]
        flood_times: list[float] = []
        flood_status: list[int] = []

        def flood() -> None:
            t0 = time.monotonic()
            if args.flood == "batch":
                items = [{"task_id": task, "completion": r} for r in loops]
                status, _ = post(port, "/score_batch", {"items": items}, "127.0.0.2")
                flood_status.append(status)
            else:
                threads = [
                    threading.Thread(
                        target=lambda r=r: flood_status.append(
                            post(port, "/score", {"task_id": task, "completion": r}, "127.0.0.2")[0]
                        )
                    )
                    for r in loops
                ]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            flood_times.append(time.monotonic() - t0)

        flooder = threading.Thread(target=flood)
        flooder.start()
        time.sleep(1.0)  # the loops are queued and two of them run
        loaded = []
        for i in range(args.samples):
            t0 = time.monotonic()
            status, body = post(port, "/score", {"task_id": task, "completion": correct(i, "loaded")})
            loaded.append(time.monotonic() - t0)
            rewards.append((status, body.get("total"), body.get("max_total")))
        still_flooding = flooder.is_alive()
        flooder.join()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    a, b = statistics.median(alone), statistics.median(loaded)
    full = all(s == 200 and t == m for s, t, m in rewards)
    print(
        common.table(
            [
                ["second client alone", f"{a:.3f}", f"{max(alone):.3f}", "1.00x"],
                [
                    f"under {args.loops} loops ({args.flood})",
                    f"{b:.3f}",
                    f"{max(loaded):.3f}",
                    f"{b / a:.2f}x",
                ],
            ],
            ["", "median s", "max s", "vs alone"],
        )
    )
    print(f"every correct reply earned the full reward: {full}")
    print(f"the flood was still running when the last correct reply came back: {still_flooding}")
    per_loop = flood_times[0] * args.jobs / args.loops if flood_times else float("nan")
    print(
        f"flood: {args.loops} loops in {flood_times[0]:.1f} s ({per_loop:.2f} s of a worker each), statuses {sorted(set(flood_status))}"
    )
    print(
        f"goal (issue 20): under the flood <= 10x alone: {'met' if b <= 10 * a else 'NOT met'} ({b / a:.1f}x)"
    )
    return 0 if full else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    common.run_main(main)
