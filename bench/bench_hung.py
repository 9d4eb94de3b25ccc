"""One hung reply must not stall a batch: calibrated time limits (`rtlreward tasks check`) against the stage default.

A batch of N replies to the fixed-priority-arbiter task, all distinct and correct, is scored twice with the same
engine settings: once as it is (the reference batch), once with one reply replaced by a zero-delay loop, which never
advances simulation time and so only ends when its time limit kills it. With the task's calibrated limit (max(floor,
k x the reference's run), measured by the health check in this same run) the hung batch should take about as long as
the clean one; with the stage's default limit (60 s per command) the one reply dominates. Printed: both batch times
and their ratio, for calibrated and (with --with-default) default limits. Goal: ratio <= 1.5 with calibration.

    python bench/bench_hung.py                 # 32 replies, jobs 2, calibrated only (~30 s)
    python bench/bench_hung.py --with-default  # also the uncalibrated batch (adds about a minute)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replies", type=int, default=32)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--with-default", action="store_true", help="also time the batch with the default limits")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    common.require_tools("iverilog")
    common.header("bench_hung: one zero-delay loop in a batch, calibrated vs default limits")

    from rtlreward.engine import Engine
    from rtlreward.health import HealthReport
    from rtlreward.integration import load_tasks
    from rtlreward_health.check import CheckSettings, check_tasks

    folder = common.EXAMPLES / "fixed_priority_arbiter"
    task = load_tasks(str(folder))[0]
    correct = (folder / "completions" / "correct.txt").read_text()
    hung = (folder / "completions" / "forever_loop.txt").read_text()
    # Distinct designs (a comment inside the code of each), so neither the batch dedupe nor the stage cache
    # collapses them: every reply pays its own simulation.
    assert correct.count("endmodule") == 1
    clean = [correct.replace("endmodule", f"// reply {i}\nendmodule") for i in range(args.replies)]
    with_hung = [*clean[:-1], hung]

    with common.temp_dir("hung") as tmp:
        # Three reference runs, as `rtlreward tasks check` does by default: the limit comes from their median.
        _, entries = check_tasks([task], CheckSettings(seeds=3, mutants=0, jobs=args.jobs), cache_path=None)
        report = HealthReport("bench", {}, {e["id"]: e for e in entries})
        calibrated = report.calibrate([task])[0]
        limit = calibrated.metadata.get("stage_limits", {}).get("tests")
        print(
            f"calibrated limit for the tests stage: {limit} s (reference run {entries[0].get('stage_seconds')})"
        )

        def batch(t, replies) -> float:
            with Engine(
                "shaped", cache=tmp / f"cache-{len(replies)}-{id(replies)}.sqlite", jobs=args.jobs
            ) as eng:
                seconds, rewards = common.timed(lambda: eng.score_batch([(t, r) for r in replies]))
            statuses = [r.stages["tests"].status.value for r in rewards]
            assert statuses.count("timeout") == (1 if replies is with_hung else 0), statuses
            return seconds

        rows, out = [], {}
        for name, t in [("calibrated", calibrated)] + ([("default", task)] if args.with_default else []):
            ref = batch(t, clean)
            new = batch(t, with_hung)
            rows.append([name, f"{ref:.2f}", f"{new:.2f}", f"{new / ref:.2f}"])
            out[name] = {"clean_s": ref, "with_hung_s": new, "ratio": new / ref}
        print(common.table(rows, ["limits", f"{args.replies} clean (s)", "one hung (s)", "hung / clean"]))
        print("goal: ratio <= 1.5 with calibrated limits")
        if args.json:
            import json

            args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    common.run_main(main)
