"""What the equivalence check costs per candidate, as a ratio against one harness (cocotb) run measured in the same
run on the same machine.

    python bench/bench_equivalence.py [--repeat 3]

Rows, per bundled example task (median of `repeat` interleaved rounds, the local executor as the engine uses it):
- `tests (cocotb)`: the `tests` stage on the reference answer: the task's cocotb harness under Icarus;
- `equivalence (proved)`: the `equivalence` stage on the reference answer (Yosys miter + ABC PDR proof);
- `equivalence (refuted)`: on a wrong completion (the proof finds a counterexample, Icarus replays it and runs the
  random differential simulation for partial credit).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import EXAMPLES, interleaved, ratio

WRONG = {
    "counter": "en_ignores_load",
    "sync_fifo": "full_overwrites",
    "fixed_priority_arbiter": "reversed_priority",
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for tool in ("iverilog", "yosys", "yosys-abc"):
        if not shutil.which(tool):
            print(f"needs {tool}: apt-get install yosys iverilog")
            raise SystemExit(2)

    from rtlreward.model import Candidate
    from rtlreward.plugins import get_registry
    from rtlreward.sandbox.local import LocalExecutor
    from rtlreward.stage import StageContext

    reg = get_registry()
    stages = reg.stages()
    tasks = {t.id: t for t in reg.datasets()["folder"].load(str(EXAMPLES))}
    ex = LocalExecutor()
    root = Path(tempfile.mkdtemp(prefix="rtlreward-bench-"))
    counter = iter(range(10**9))

    def run(stage: str, task, files: dict[str, str]):
        ws = root / str(next(counter))
        ws.mkdir()
        ctx = StageContext(
            task=task,
            candidate=Candidate(files=files),
            workspace=ws,
            executor=ex,
            files=files,
            seed=1,
            timeout=60,
            registry=reg,
        )
        return stages[stage].run(ctx)

    try:
        import os

        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
        print(f"{'task':24} {'tests (cocotb)':>15} {'equiv proved':>13} {'equiv refuted':>14} {'ratio':>7}")
        for tid, wrong in WRONG.items():
            task = tasks[tid]
            good = dict(task.reference)
            text = (EXAMPLES / tid / "completions" / f"{wrong}.txt").read_text()
            bad = {task.expected_files[0]: re.search(r"```\w*\n(.*?)```", text, re.S).group(1)}
            res = interleaved(
                {
                    "tests": lambda t=task, f=good: run("tests", t, f),
                    "proved": lambda t=task, f=good: run("equivalence", t, f),
                    "refuted": lambda t=task, f=bad: run("equivalence", t, f),
                },
                args.repeat,
                warmup={"tests": lambda t=task, f=good: run("tests", t, f)},
            )
            assert res["proved"][1].metrics.get("equivalence") == "proved", res["proved"][1].feedback
            assert res["refuted"][1].metrics.get("equivalence") == "refuted", res["refuted"][1].feedback
            t, p, r = res["tests"][0], res["proved"][0], res["refuted"][0]
            print(f"{tid:24} {t:14.2f}s {p:12.2f}s {r:13.2f}s {ratio(t, p):>7}")
        print("ratio: how many times faster the proof of the reference is than one cocotb run of its harness")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
