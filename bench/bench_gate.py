"""What the safety gate costs per candidate, as ratios against one bare sandboxed command measured in the same run.

    python bench/bench_gate.py [--n 20]

Rows (median of n, interleaved rounds, the local executor as the engine uses it):
- `sandbox: true`: one sandboxed command doing nothing (the floor any gate that runs a tool pays);
- `gate (cold)`: the `safety` stage on a fresh answer: both preprocessors in one sandboxed command;
- `gate (warm)`: the same answer again in the same process (the per-file-set cache);
- `two commands`: `ivlpp -L` and `verilator -E` (the Perl wrapper) as two sandboxed commands, the design the
  gate does not use.
The answer is the bundled arbiter's reference, made unique per round so the cold row never hits the cache.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import EXAMPLES, interleaved, ratio


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20)
    args = ap.parse_args()
    if not shutil.which("iverilog"):
        print("needs Icarus Verilog: apt-get install iverilog")
        raise SystemExit(2)

    from rtlreward.model import Candidate, Task
    from rtlreward.plugins import get_registry
    from rtlreward.sandbox.local import LocalExecutor
    from rtlreward.stage import StageContext
    from rtlreward_hdl import preprocess as pp
    from rtlreward_hdl.verilator import verilator_bin_dir

    ref = (EXAMPLES / "fixed_priority_arbiter" / "reference" / "fixed_priority_arbiter.sv").read_text()
    task = Task(id="bench", expected_files=["rtl/top.sv"], toplevel="fixed_priority_arbiter")
    stage = get_registry().stages()["safety"]
    ex = LocalExecutor()
    root = Path(tempfile.mkdtemp(prefix="rtlreward-bench-"))
    counter = iter(range(10**9))

    def ctx(files: dict[str, str]) -> StageContext:
        ws = root / str(next(counter))
        ws.mkdir()
        return StageContext(
            task=task, candidate=Candidate(files=files), workspace=ws, executor=ex, files=files
        )

    def fresh() -> dict[str, str]:
        return {"rtl/top.sv": ref + f"// {next(counter)}\n"}

    warm_files = fresh()

    def two_commands() -> None:
        c = ctx(fresh())
        src = c.stage_dir("two")
        (src / "top.sv").write_text(c.files["rtl/top.sv"])
        c.run([pp._ivlpp(), "-L", "./top.sv"], cwd=src)
        c.run(["verilator", "-E", "./top.sv"], cwd=src, path_prepend=[verilator_bin_dir()])

    rows = interleaved(
        {
            "sandbox: true": lambda: ctx({}).run(["true"]),
            "gate (cold)": lambda: stage.run(ctx(fresh())),
            "gate (warm)": lambda: stage.run(ctx(warm_files)),
            "two commands": two_commands,
        },
        args.n,
        warmup={"warm": lambda: stage.run(ctx(warm_files))},
    )
    floor = rows["sandbox: true"][0]
    print(f"{'row':16s} {'median s':>9s} {'x one bare command':>19s}")
    for name, (sec, _) in rows.items():
        print(f"{name:16s} {sec:9.3f} {ratio(sec, floor):>19s}")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
