"""Per-command overhead of the sandboxes, as ratios against a bare subprocess measured in the same run.

    python bench/bench_sandbox.py [--n 20]

Rows: bare `subprocess.run`, the local executor without bubblewrap (rlimits, session, output pump), with
bubblewrap (a sandbox per command), a candidate's warm cell (a job of a long-lived sandbox, the default for scoring),
and the docker executor when Docker and the image are present.
Commands: `true` (pure overhead), `timeout 5 true` (a command that closes its pipes just before it exits, as every GNU
tool and Icarus's driver do: a wait that polls for its exit shows here) and a trivial Icarus compile+run when iverilog
is installed.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

from rtlreward.sandbox import Limits


def _time(fn, n: int) -> float:
    fn()  # warm-up
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20)
    args = ap.parse_args()
    ws = Path(tempfile.mkdtemp(prefix="rtlreward-bench-"))
    (ws / "t.v").write_text('module t; initial begin $display("hi"); $finish; end endmodule\n')
    commands = {"true": ["true"], "timeout true": ["timeout", "5", "true"]}
    if shutil.which("iverilog"):
        commands["iverilog+vvp"] = ["sh", "-c", "iverilog -o t.vvp t.v && vvp -n t.vvp"]

    from rtlreward.sandbox.local import LocalExecutor, remove_workspace

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        execs = {"local (no bwrap)": LocalExecutor(use_bwrap=False)}
    workspaces = {}
    try:
        execs["local (bwrap)"] = LocalExecutor(use_bwrap=True, warm=False)
        execs["warm cell"] = cells = LocalExecutor(use_bwrap=True)
        # a candidate's workspace: its commands run as jobs of a cell
        workspaces["warm cell"] = cells.make_workspace("bench")
        (workspaces["warm cell"] / "t.v").write_text((ws / "t.v").read_text())
    except RuntimeError as e:
        print(f"skipping bwrap: {e}")
    try:
        from rtlreward.sandbox.docker import DockerExecutor

        execs["docker"] = DockerExecutor()
    except Exception as e:  # no SDK, daemon or image
        print(f"skipping docker: {e}")

    limits = Limits(timeout=60)
    print(f"{'command':<14} {'executor':<18} {'median ms':>10} {'x bare':>8}")
    for cname, argv in commands.items():
        bare = _time(lambda argv=argv: subprocess.run(argv, cwd=ws, capture_output=True), args.n)
        print(f"{cname:<14} {'bare subprocess':<18} {bare * 1000:>10.1f} {1.0:>8.2f}")
        for ename, ex in execs.items():
            n = max(3, args.n // 4) if ename == "docker" else args.n
            w = workspaces.get(ename, ws)
            t = _time(lambda ex=ex, argv=argv, w=w: ex.run(argv, workspace=w, limits=limits), n)
            print(f"{cname:<14} {ename:<18} {t * 1000:>10.1f} {t / bare:>8.2f}")
    shutil.rmtree(ws, ignore_errors=True)
    for ename, w in workspaces.items():
        remove_workspace(w)
        execs[ename].release_workspace(w)


if __name__ == "__main__":
    main()
