"""A GRPO-shaped batch on small problems: rtlreward's `strict`, `shaped` and `equiv` beside the benchmark's own
harness, run on the same candidates, at the same parallelism, in the same run.

The batch: 16 VerilogEval v2 problems x 8 samples of mixed quality (the reference as written, the reference with a
comment, the reference after a paragraph of reasoning, two mutants of it, an all-zeros stub, an all-ones stub, a
truncated answer that does not parse). The reference contender is VerilogEval's own flow per candidate: the
answer's first fenced block written to a file, `iverilog -Wall -Winfloop -Wno-timescale -g2012 -s tb` with the
problem's testbench and reference, `timeout 30` of the compiled simulation, its `Mismatches: 0` line; no sandbox.

Every contender gets the same `--jobs` workers (a thread pool handing one candidate at a time to each), so the
p50/p95/max latency is one candidate's wall time, and candidates per second is the batch over its wall time.
rtlreward also runs the whole batch as one `score_batch` (its dedupe and per-task grouping; no latency column).
A candidate with a zero-delay loop then replaces one truncated answer: each rtlreward profile's batch with it is
timed against the same profile's batch without it (the goal: <= 1.5x; the harness waits out its 30 s `timeout`).
Part two scores the bundled CVDP examples' references under `strict` against their own harness command (needs
Docker's sim image for the benchmark's way; `--no-cvdp` skips it).

    python bench/bench_grpo.py                  # ~3-6 min on 2 cores; --problems N --repeat N --jobs N --json F
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from rtlreward.engine import Engine
from rtlreward.integration import load_tasks
from rtlreward.model import Task

PROFILES = ("strict", "shaped", "equiv")
FLAGS = ("-Wall", "-Winfloop", "-Wno-timescale", "-g2012")
_FENCE = re.compile(r"```[a-zA-Z]*\n(.*?)```", re.S)
LOOP = """
  logic rtlreward_bench_spin;
  initial begin
    rtlreward_bench_spin = 1'b0;
    forever rtlreward_bench_spin = ~rtlreward_bench_spin;  // no delay: time never advances
  end
endmodule"""


def fenced(code: str, before: str = "") -> str:
    return f"{before}```verilog\n{code.rstrip()}\n```\n"


def pick_problems(n: int) -> list[Task]:
    """n problems spread over VerilogEval's first 80 whose reference passes here (small ones, as RL sets hold)."""
    tasks = load_tasks("verilog-eval", skip_known_issues=True, limit=80)
    if len(tasks) < n:
        raise common.Missing(f"verilog-eval has {len(tasks)} usable problems here; need {n}")
    step = len(tasks) / n
    return [tasks[int(i * step)] for i in range(n)]


def group(task: Task) -> list[tuple[str, str]]:
    """(kind, reply) x 8 for one problem."""
    from rtlreward_hdl.mutate import mutants
    from rtlreward_hdl.stubs import stub_designs

    ref = next(iter(task.reference.values()))
    muts = mutants(dict(task.reference), limit=4)
    stubs = stub_designs(task)
    wrong = [next(iter(m.files.values())) for m in muts[:2]]
    while len(wrong) < 2:
        wrong.append(next(iter(stubs["undriven"].values())))
    cut = ref[: max(1, len(ref) // 2)].rstrip() + "\n  assign = ;\n"
    return [
        ("correct", fenced(ref)),
        ("correct", fenced("// the module as specified\n" + ref)),
        ("correct", fenced(ref, "The spec asks for a small module; I will write it directly.\n\n")),
        ("wrong", fenced(wrong[0])),
        ("wrong", fenced(wrong[1])),
        ("stub", fenced(next(iter(stubs["zeros"].values())))),
        ("stub", fenced(next(iter(stubs["ones"].values())))),
        ("unparseable", fenced(cut)),
    ]


def with_loop(task: Task) -> str:
    ref = next(iter(task.reference.values()))
    i = ref.rfind("endmodule")
    return fenced(ref[:i] + LOOP.lstrip("\n").split("endmodule")[0] + ref[i:])


# -- the benchmark's own harness --------------------------------------------------------------------------------
def harness_one(task: Task, reply: str, root: Path) -> bool:
    m = _FENCE.search(reply)
    code = m.group(1) if m else reply
    d = Path(tempfile.mkdtemp(dir=root))
    try:
        (d / "answer.sv").write_text(code)
        names = list(task.harness.options["testbench"])
        for name in names:
            (d / name).write_text(task.harness.files[name])
        c = subprocess.run(
            ["iverilog", *FLAGS, "-s", "tb", "-o", "test", "answer.sv", *names],
            cwd=d,
            capture_output=True,
            text=True,
        )
        if c.returncode != 0:
            return False
        r = subprocess.run(
            ["timeout", "30", "./test"], cwd=d, capture_output=True, text=True, errors="replace"
        )
        return bool(re.search(r"^Mismatches: 0 in \d+ samples$", r.stdout, re.M))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def pooled(fn, items: list[Any], jobs: int) -> tuple[float, list[float], list[Any]]:
    """(wall s, per-item latencies, results) with `jobs` workers."""
    lat: list[float] = [0.0] * len(items)
    out: list[Any] = [None] * len(items)

    def one(i: int) -> None:
        t0 = time.perf_counter()
        out[i] = fn(items[i])
        lat[i] = time.perf_counter() - t0

    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, range(len(items))))
    return time.perf_counter() - t0, lat, out


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def stage_table(rewards: list[Any]) -> dict[str, tuple[float, float]]:
    per: dict[str, list[float]] = {}
    for r in rewards:
        for name, s in r.stages.items():
            if not s.cached and s.status.value != "skipped":
                per.setdefault(name, []).append(s.duration)
    return {n: (statistics.median(v), pct(v, 0.95)) for n, v in per.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=2, help="timed rounds per contender (median)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--profiles", default=",".join(PROFILES))
    ap.add_argument("--no-loop", action="store_true", help="skip the zero-delay-loop batch")
    ap.add_argument("--no-cvdp", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if not shutil.which("iverilog"):
        print("iverilog is not installed: apt-get install iverilog")
        return 2
    try:
        tasks = pick_problems(a.problems)
    except (common.Missing, ValueError) as e:
        print(e)
        return 2
    items = [(t, reply, kind) for t in tasks for kind, reply in group(t)]
    profiles = [p for p in a.profiles.split(",") if p]
    common.header("rtlreward bench_grpo")
    print(f"batch: {len(tasks)} problems x 8 = {len(items)} candidates, jobs={a.jobs}, {a.repeat} round(s)")
    root = Path(tempfile.mkdtemp(prefix=common.TMP_PREFIX))
    engines = {p: Engine(p, cache=False, jobs=a.jobs) for p in profiles}
    results: dict[str, Any] = {"candidates": len(items), "jobs": a.jobs, "contenders": {}}
    try:
        # Every timed call scores texts no earlier call saw (a comment line naming the call): a trainer's
        # samples are new text each step, so nothing is served from an in-process cache of an earlier round.
        fresh = _Fresh(items)
        fns = {"harness": lambda: pooled(lambda it: harness_one(it[0], it[1], root), fresh(), a.jobs)}
        for p, eng in engines.items():
            fns[p] = lambda eng=eng: pooled(lambda it: eng.score(it[0], it[1]), fresh(), a.jobs)
            fns[p + " score_batch"] = lambda eng=eng: _batch(eng, fresh())
        # Untimed: the first import, the per-task references (stub baselines, self-proofs) a trainer pays once.
        warm = {p: (lambda eng=eng: _batch(eng, items)) for p, eng in engines.items()}
        runs = _interleaved(fns, a.repeat, warm)
        ref_wall = runs["harness"][0]
        rows = []
        for name, (wall, lat, out) in runs.items():
            rows.append((name, wall, lat, out))
        print()
        print("| contender | cand/s | p50 s | p95 s | max s | batch s | vs harness |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for name, wall, lat, _ in rows:
            cps = len(items) / wall
            ratio = wall / ref_wall
            lat_cols = f"{pct(lat, 0.5):.3f} | {pct(lat, 0.95):.3f} | {max(lat):.3f}" if lat else "- | - | -"
            print(f"| {name} | {cps:.1f} | {lat_cols} | {wall:.2f} | **{ratio:.2f}x** |")
            results["contenders"][name] = {
                "wall": wall,
                "cand_per_s": cps,
                "ratio": ratio,
                **({"p50": pct(lat, 0.5), "p95": pct(lat, 0.95), "max": max(lat)} if lat else {}),
            }
        _agreement(items, runs)
        for p in profiles:
            rewards = runs[p][2]
            print(
                f"\n{p}: stage durations p50 / p95 (s): "
                + ", ".join(f"{n} {m:.3f}/{q:.3f}" for n, (m, q) in stage_table(rewards).items())
            )
        if not a.no_loop:
            results["loop"] = _loop_batch(engines, items, tasks)
        if not a.no_cvdp:
            results["cvdp"] = _cvdp(a.repeat)
    finally:
        for eng in engines.values():
            eng.close()
        shutil.rmtree(root, ignore_errors=True)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2, default=str))
    return 0


class _Fresh:
    """The batch with a comment line that differs per call in every reply's code block."""

    def __init__(self, items: list[tuple[Task, str, str]]) -> None:
        self.items = items
        self.calls = 0

    def __call__(self) -> list[tuple[Task, str, str]]:
        self.calls += 1
        tag = f"```verilog\n// call {self.calls}\n"
        return [(t, reply.replace("```verilog\n", tag, 1), kind) for t, reply, kind in self.items]


def _batch(eng: Engine, items: list[tuple[Task, str, str]]) -> tuple[float, list[float], list[Any]]:
    t0 = time.perf_counter()
    out = eng.score_batch([(t, reply) for t, reply, _ in items])
    return time.perf_counter() - t0, [], out


def _interleaved(fns, repeat, warm) -> dict[str, tuple[float, list[float], list[Any]]]:
    for fn in warm.values():
        fn()
    names = list(fns)
    walls: dict[str, list[float]] = {n: [] for n in names}
    last: dict[str, Any] = {}
    for r in range(max(1, repeat)):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            wall, lat, out = fns[n]()
            walls[n].append(wall)
            last[n] = (lat, out)
    return {n: (statistics.median(walls[n]), *last[n]) for n in names}


def _agreement(items, runs) -> None:
    """Each profile's pass verdict against the harness's, per candidate kind."""
    ref = runs["harness"][2]
    for name, (_, _, out) in runs.items():
        if name == "harness" or "score_batch" in name:
            continue
        agree = sum(bool(o.passed) == bool(h) for o, h in zip(out, ref, strict=True))
        by_kind: dict[str, list[int]] = {}
        for (_, _, kind), o in zip(items, out, strict=True):
            by_kind.setdefault(kind, [0, 0])
            by_kind[kind][0] += bool(o.passed)
            by_kind[kind][1] += 1
        kinds = ", ".join(f"{k} {p}/{n}" for k, (p, n) in by_kind.items())
        print(f"{name}: pass verdict agrees with the harness on {agree}/{len(ref)} (passed: {kinds})")


def _loop_batch(engines, items, tasks) -> dict[str, Any]:
    """Each profile's batch with one zero-delay loop in place of a truncated answer vs the same without it."""
    i = next(k for k, (_, _, kind) in enumerate(items) if kind == "unparseable")
    looped = list(items)
    looped[i] = (items[i][0], with_loop(items[i][0]), "loop")
    out: dict[str, Any] = {}
    print("\n| profile | batch s without | with one zero-delay loop | ratio | the loop's reward, status |")
    print("| --- | --- | --- | --- | --- |")
    for p, eng in engines.items():
        base, _, _ = _batch(eng, items)
        wall, _, rewards = _batch(eng, looped)
        r = rewards[i]
        worst = next((s for s in r.stages.values() if s.status.value == "timeout"), None)
        note = f"{r.total:.2f}, {worst.name} timeout" if worst else f"{r.total:.2f}"
        print(f"| {p} | {base:.2f} | {wall:.2f} | **{wall / base:.2f}x** | {note} |")
        out[p] = {"without": base, "with": wall, "ratio": wall / base}
    return out


def _cvdp(repeat: int) -> dict[str, Any]:
    """The bundled CVDP examples' references under `strict`, one at a time, vs the benchmark's own way (one
    `docker run` of the sim image per compose service; bench_cvdp.py has the details)."""
    import bench_cvdp

    tasks = [t for t in load_tasks("cvdp") if t.reference]
    why: list[str] = []
    image = bench_cvdp.default_image()
    if not bench_cvdp.docker_problem(why, image):
        print(f"\nCVDP part skipped: {'; '.join(why)}")
        return {}
    fns = {
        "benchmark way": lambda: [bench_cvdp.benchmark_way(t, dict(t.reference), image) for t in tasks],
        "strict, local": lambda: bench_cvdp.engine_each(tasks),
    }
    res = common.interleaved(fns, repeat, warmup=fns)
    ref = res["benchmark way"][0]
    print(f"\nCVDP examples ({len(tasks)}, references, one at a time):")
    print("| contender | s per problem | vs the benchmark's way |")
    print("| --- | --- | --- |")
    out = {}
    for name, (wall, _) in res.items():
        print(f"| {name} | {wall / len(tasks):.3f} | **{wall / ref:.2f}x** |")
        out[name] = {"wall": wall, "ratio": wall / ref}
    return out


if __name__ == "__main__":
    raise SystemExit(main())
