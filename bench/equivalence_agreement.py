"""Does the equivalence stage agree with a benchmark's own testbench? A measurement, not a speed bench.

Replies: single-site mutants of each task's reference (rtlreward_hdl.mutate: stuck outputs, ignored inputs,
inverted conditions, dropped resets, swapped operators, changed constants), so every reply is a plausible bug and its
truth is known only to the tools. Each reply goes through the dataset's own harness (VerilogEval's testbench,
RTLLM's) and through the `equivalence` stage. Printed: of the replies the testbench fails, the share equivalence
refutes (the agreement the issue asks for), and of those it passes, how many equivalence refutes anyway (bugs the
testbench misses) or proves equivalent.

    python bench/equivalence_agreement.py verilog-eval --limit 40 --mutants 3
    python bench/equivalence_agreement.py rtllm --mutants 3 --json rtllm.json
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
    ap.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    ap.add_argument("--mutants", type=int, default=3, help="mutants per task")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    common.require_tools("iverilog", "yosys")
    common.header(f"equivalence vs the {args.dataset} testbench on mutants of the references")

    from rtlreward.engine import Engine
    from rtlreward.integration import load_tasks
    from rtlreward.model import Candidate
    from rtlreward_hdl.mutate import mutants
    from rtlreward_health.check import EQUIV_PROFILE, HARNESS_PROFILE, _equivalence

    tasks = [t for t in load_tasks(args.dataset) if t.reference and t.harness]
    if args.limit:
        tasks = tasks[: args.limit]
    items = [
        (t, Candidate(files=m.files, sample=i))
        for t in tasks
        for i, m in enumerate(mutants(t.reference or {}, limit=args.mutants))
    ]
    print(f"{len(tasks)} tasks, {len(items)} mutant replies")
    with common.temp_dir("agree") as tmp:
        with Engine(HARNESS_PROFILE, cache=tmp / "h.sqlite", jobs=args.jobs) as harness:
            tb = harness.score_batch(items)
        with Engine(EQUIV_PROFILE, cache=tmp / "e.sqlite", jobs=args.jobs) as equiv:
            eq = equiv.score_batch(items)
    counts: dict[tuple[str, str], int] = {}
    for t_reward, e_reward in zip(tb, eq, strict=True):
        built = all(r.passed for n, r in t_reward.stages.items() if n in ("format", "safety", "compile"))
        if not built:
            key_tb = "does not build"
        else:
            key_tb = "testbench passes" if t_reward.passed else "testbench fails"
        verdict = _equivalence(e_reward)
        key_eq = "bounded" if verdict.startswith("bounded") else verdict
        counts[(key_tb, key_eq)] = counts.get((key_tb, key_eq), 0) + 1
    verdicts = ["refuted", "proved", "bounded", "unknown", "error"]
    rows = []
    for key_tb in ("testbench fails", "testbench passes", "does not build"):
        row = [key_tb] + [counts.get((key_tb, v), 0) for v in verdicts]
        rows.append([*row, sum(row[1:])])
    print(common.table(rows, ["", *verdicts, "total"]))
    fails = sum(counts.get(("testbench fails", v), 0) for v in verdicts)
    agree = counts.get(("testbench fails", "refuted"), 0)
    missed = counts.get(("testbench passes", "refuted"), 0)
    if fails:
        print(
            f"agreement: equivalence refutes {agree}/{fails} = {agree / fails:.1%} of the replies the testbench fails"
        )
    print(f"bugs the testbench misses that equivalence refutes: {missed}")
    if args.json:
        args.json.write_text(json.dumps({f"{a} / {b}": n for (a, b), n in counts.items()}, indent=2))
    return 0


if __name__ == "__main__":
    common.run_main(main)
