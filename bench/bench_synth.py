"""What the `synth` stage costs per candidate, beside a simulation of the same candidate measured in the same run on
the same machine.

    python bench/bench_synth.py [--repeat 3]

Rows, per bundled example task (median of `repeat` interleaved rounds, the local executor as the engine uses it,
the reference's own figures already cached as they are after a task's first candidate):
- `tests (cocotb)`: the `tests` stage on the reference answer: the task's cocotb harness under Icarus;
- `synth`: the `synth` stage on the same answer: Yosys reads, checks and synthesises it, then Icarus simulates the
  netlist against the RTL;
- `synth, no sim`: the same without the netlist simulation (`simulate = false`);
- `synth + ice40`: with the iCE40 place and route (`ice40 = true`), where nextpnr-ice40 is installed.
The ratio is synth / tests: the stage's cost in units of one harness run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import EXAMPLES, interleaved

TASKS = ("counter", "sync_fifo", "fixed_priority_arbiter")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if not shutil.which("iverilog"):
        print("needs iverilog: apt-get install iverilog")
        raise SystemExit(2)
    cache = Path(tempfile.mkdtemp(prefix="rtlreward-bench-cache-"))
    os.environ["RTLREWARD_CACHE_DIR"] = str(cache)  # never the user's cache of reference figures

    from rtlreward.model import Candidate
    from rtlreward.plugins import get_registry
    from rtlreward.sandbox.local import LocalExecutor
    from rtlreward.stage import StageContext

    reg = get_registry()
    stages = reg.stages()
    if "synth" not in stages:
        print("the synth plugin is not installed: pip install -e .")
        raise SystemExit(2)
    tasks = {t.id: t for t in reg.datasets()["folder"].load(str(EXAMPLES))}
    ex = LocalExecutor()
    root = Path(tempfile.mkdtemp(prefix="rtlreward-bench-"))
    counter = iter(range(10**9))
    ice = bool(shutil.which("nextpnr-ice40"))

    def run(stage: str, task, files: dict[str, str], **options):
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
            options=options,
        )
        return stages[stage].run(ctx)

    try:
        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
        head = f"{'task':24} {'tests (cocotb)':>15} {'synth':>8} {'no sim':>8} {'+ ice40':>8} {'ratio':>7}"
        print(head)
        for tid in TASKS:
            task = tasks[tid]
            good = dict(task.reference)
            fns = {
                "tests": lambda t=task, f=good: run("tests", t, f),
                "synth": lambda t=task, f=good: run("synth", t, f),
                "nosim": lambda t=task, f=good: run("synth", t, f, simulate=False),
            }
            if ice:
                fns["ice40"] = lambda t=task, f=good: run("synth", t, f, ice40=True)
            warm = {"tests": fns["tests"], "synth": fns["synth"], **({"ice40": fns["ice40"]} if ice else {})}
            res = interleaved(fns, args.repeat, warmup=warm)
            assert res["synth"][1].passed, res["synth"][1].feedback
            t, s, n = res["tests"][0], res["synth"][0], res["nosim"][0]
            i = f"{res['ice40'][0]:7.2f}s" if ice else f"{'-':>8}"
            print(f"{tid:24} {t:14.2f}s {s:7.2f}s {n:7.2f}s {i} {s / t:6.2f}x")
        print(
            "ratio: the synth stage's time per candidate / one cocotb run of the task's harness on the same answer"
        )
        if not ice:
            print("(+ ice40 not measured: nextpnr-ice40 is not installed)")
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
