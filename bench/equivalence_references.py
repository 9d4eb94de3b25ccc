"""Does every reference still prove against itself? A measurement, not a speed bench.

Each task's reference goes through the `equivalence` stage as the answer (the proof then compares it with a copy of
itself under fresh names), under the executors named. Printed per executor: how many are `proved`, `unknown`
(simulation-only: the proof does not close in budget), `refuted` (never expected), `error` (the reference cannot be
read or simulated), and the tasks that are not proved, with the stage's first note; then whether the executors
decided the same per task.

    python bench/equivalence_references.py verilog-eval --executor local --executor docker
    python bench/equivalence_references.py rtllm --json rtllm-self.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", help="verilog-eval | rtllm | a path a dataset plugin recognises")
    ap.add_argument("--executor", action="append", default=None, help="local (default), docker; repeatable")
    ap.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    common.require_tools("iverilog", "yosys")
    executors = args.executor or ["local"]
    common.header(
        f"{args.dataset}: each reference against itself through the equivalence stage ({', '.join(executors)})"
    )

    from rtlreward.engine import Engine
    from rtlreward.integration import load_tasks
    from rtlreward.model import Candidate
    from rtlreward_health.check import EQUIV_PROFILE, _equivalence

    tasks = [t for t in load_tasks(args.dataset) if t.reference]
    if args.limit:
        tasks = tasks[: args.limit]
    items = [(t, Candidate(files=dict(t.reference or {}), sample=0)) for t in tasks]
    verdicts: dict[str, dict[str, str]] = {}
    notes: dict[str, dict[str, str]] = {}
    for name in executors:
        with Engine(EQUIV_PROFILE, executor=name, cache=False, jobs=args.jobs) as engine:
            seconds, rewards = common.timed(lambda e=engine: e.score_batch(items))
        verdicts[name], notes[name] = {}, {}
        for (t, _), r in zip(items, rewards, strict=True):
            st = r.stages.get("equivalence")
            v = _equivalence(r)
            if st is not None and st.status.value == "error":
                v = "error"
            v = "bounded" if v.startswith("bounded") else v
            verdicts[name][t.id] = v
            if v != "proved" and st is not None:
                first = next((d.message for d in st.diagnostics), st.feedback or "")
                notes[name][t.id] = " ".join(first.split())[:160]
        counts = {
            k: list(verdicts[name].values()).count(k)
            for k in ("proved", "unknown", "bounded", "refuted", "error")
        }
        print(
            f"\n{name}: {len(tasks)} references in {seconds:.0f} s: "
            + ", ".join(f"{k} {n}" for k, n in counts.items())
        )
        for tid, note in sorted(notes[name].items()):
            print(f"  {tid}: {verdicts[name][tid]}: {note}")
    if len(executors) > 1:
        first = executors[0]
        differ = [
            (tid, {n: verdicts[n][tid] for n in executors})
            for tid in verdicts[first]
            if len({verdicts[n][tid] for n in executors}) > 1
        ]
        print(f"\nexecutors agree on {len(tasks) - len(differ)}/{len(tasks)} references")
        for tid, vs in differ:
            print(f"  {tid}: {vs}")
    if args.json:
        args.json.write_text(json.dumps({"verdicts": verdicts, "notes": notes}, indent=2))
    return 0


if __name__ == "__main__":
    common.run_main(main)
