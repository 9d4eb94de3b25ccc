"""The docker executor's cost, warm and cold, against the local executor and the benchmark's own way, on the same
candidates: the official CVDP LFSR example (cvdp_adapter/data/) with its reference solution, each copy made
distinct by a comment line so that nothing is shared or cached.

  compose    the benchmark's own way: a fresh problem folder, then `docker-compose run --rm` of its service
             (the compose file's `build: .` image, FROM the sim image, built once before timing), with the
             /code folders mounted and `-w /code/rundir`, as NVlabs/cvdp_benchmark does. Without docker-compose:
             one `docker run` per service as bench/bench_cvdp.py does (the header says which).
  harness    the raw harness: its pytest command alone on this machine (no container, no sandbox), the floor.
  local      `Engine(profile)` with the local executor (bubblewrap when usable).
  warm       the same engine with `DockerExecutor()`: one long-lived container per worker slot, `docker exec`.
  cold       the same engine with `DockerExecutor(warm=False)`: a container per command.
  ray        (--ray) the same engine with `executor="ray"` on a Ray it starts on this machine: one Ray task per
             candidate evaluation; the scaling over worker nodes is bench_ray.py's.

Latency: every contender scores one candidate per round, sequentially, contenders interleaved and rotated
round by round; p50/p95 over the rounds (after one untimed warm-up candidate each: the first container start,
the warm slots learning the service mounts). Throughput: a batch of `--batch` distinct candidates per engine
contender with --jobs workers. The goal printed at the end: warm <= 1.3x local (p50).

Usage: python bench/bench_docker.py [--repeat 6] [--batch 6] [--jobs 2] [--profile strict] [--ray] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cvdp import benchmark_way, default_image, docker_problem, layout
from common import Missing, header, require_python, require_tools, run_main, table, temp_dir

TASK_ID = "cvdp_copilot_lfsr_0001"
GOAL = 1.3  # warm docker p50 at most this many times the local executor's


def candidates(task: Any, n: int, tag: str) -> list[dict[str, str]]:
    """n copies of the reference answer, each with its own trailing comment (distinct fingerprints)."""
    out = []
    for i in range(n):
        files = dict(task.reference)
        for rel in files:
            if rel.endswith((".v", ".sv")):
                files[rel] = files[rel].rstrip("\n") + f"\n// {tag} copy {i} {uuid.uuid4().hex[:8]}\n"
        out.append(files)
    return out


# --- the references ---------------------------------------------------------------------------------------------


def compose_way(task: Any, answer: dict[str, str], image: str, project: str) -> dict[str, Any]:
    """One candidate the benchmark's way: lay out the problem, `docker-compose run --rm` each service."""
    import yaml

    with temp_dir("compose") as root:
        layout(root, task, answer)
        dockerfile = root / "Dockerfile"
        if dockerfile.is_file():
            dockerfile.write_text(dockerfile.read_text().replace("__OSS_SIM_IMAGE__", image))
        compose = yaml.safe_load((root / "docker-compose.yml").read_text())
        codes = []
        for name, svc in (compose.get("services") or {}).items():
            if not (svc or {}).get("build") and "image" in (svc or {}):
                text = (root / "docker-compose.yml").read_text().replace("__OSS_SIM_IMAGE__", image)
                (root / "docker-compose.yml").write_text(text)
            argv = ["docker-compose", "-p", project, "run", "--rm", "-w", "/code/rundir"]
            argv += ["-u", f"{os.getuid()}:{os.getgid()}"]
            for d in ("docs", "rtl", "verif", "src", "rundir"):
                argv += ["-v", f"{root / d}:/code/{d}"]
            r = subprocess.run([*argv, name], cwd=root, capture_output=True, text=True, timeout=900)
            codes.append(r.returncode)
            if r.returncode != 0 and os.environ.get("RTLREWARD_BENCH_VERBOSE"):
                print(r.stdout[-3000:], r.stderr[-3000:], file=sys.stderr)
        return {"passed": bool(codes) and all(c == 0 for c in codes), "codes": codes}


def compose_build(task: Any, image: str, project: str) -> str | None:
    """Build the compose service image once (untimed), as the benchmark's first run does; None when
    docker-compose cannot be used here (then the `docker run` form is the reference)."""
    if shutil.which("docker-compose") is None:
        return "docker-compose is not installed"
    with temp_dir("compose-build") as root:
        layout(root, task, dict(task.reference))
        dockerfile = root / "Dockerfile"
        if dockerfile.is_file():
            dockerfile.write_text(dockerfile.read_text().replace("__OSS_SIM_IMAGE__", image))
        r = subprocess.run(
            ["docker-compose", "-p", project, "build"], cwd=root, capture_output=True, text=True, timeout=900
        )
        if r.returncode != 0:
            return f"docker-compose build failed: {(r.stderr or r.stdout).strip()[-300:]}"
    return None


def compose_down(project: str) -> None:
    """Remove what `docker-compose build` tagged for this run (`<project>_<service>`)."""
    r = subprocess.run(
        ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    tags = [t for t in r.stdout.split() if t.startswith(f"{project}_")]
    if tags:
        subprocess.run(["docker", "rmi", *tags], capture_output=True, timeout=120)


def raw_harness(task: Any, answer: dict[str, str]) -> dict[str, Any]:
    """The harness's own pytest command, run directly on this machine with the /code paths rewritten."""
    import yaml

    with temp_dir("harness") as root:
        layout(root, task, answer)
        compose = yaml.safe_load((root / "docker-compose.yml").read_text())
        codes = []
        for svc in (compose.get("services") or {}).values():
            env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TMPDIR")}
            for ef in (
                [svc.get("env_file")] if isinstance(svc.get("env_file"), str) else svc.get("env_file") or []
            ):
                for line in (root / ef).read_text().splitlines():
                    if "=" in line and not line.lstrip().startswith("#"):
                        k, _, v = line.partition("=")
                        env[k.strip()] = (
                            v.strip().replace("/code/", f"{root}/").replace("/src", f"{root}/src")
                        )
            env["PYTHONPATH"] = f"{root}/src"
            env["HOME"] = str(root / "rundir")
            cmd = svc["command"]
            argv = shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]
            argv = [a.replace("/rundir/", f"{root}/rundir/").replace("/src/", f"{root}/src/") for a in argv]
            if argv and argv[0] == "pytest":
                argv = [sys.executable, "-m", "pytest", *argv[1:]]
            r = subprocess.run(
                argv, cwd=root / "rundir", env=env, capture_output=True, text=True, timeout=900
            )
            codes.append(r.returncode)
            if r.returncode != 0 and os.environ.get("RTLREWARD_BENCH_VERBOSE"):
                print(r.stdout[-3000:], r.stderr[-3000:], file=sys.stderr)
        return {"passed": bool(codes) and all(c == 0 for c in codes), "codes": codes}


# --- rtlreward ------------------------------------------------------------------------------------------------


class Contender:
    """One rtlreward engine kept for the whole run (warm containers are about the steady state); closed (with
    its executor) by `close`."""

    def __init__(self, profile: str, executor: Any) -> None:
        from rtlreward.engine import Engine

        self.executor = executor
        self.engine = Engine(profile=profile, executor=executor, cache=False, jobs=1)

    def one(self, task: Any, files: dict[str, str]) -> Any:
        from rtlreward.model import Candidate

        return self.engine.score(task, Candidate(files=files))

    def batch(self, task: Any, answers: list[dict[str, str]], jobs: int) -> list[Any]:
        from rtlreward.model import Candidate

        items = [(task, Candidate(files=f, sample=i)) for i, f in enumerate(answers)]
        return self.engine.score_batch(items, jobs=jobs)

    def close(self) -> None:
        self.engine.close()


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


LOOKUPS = 20000
LOOKUP_SNIPPET = (
    "import os, time\n"
    f"t = time.perf_counter()\nfor _ in range({LOOKUPS}): os.stat('/usr/lib')\n"
    f"print((time.perf_counter() - t) / {LOOKUPS} * 1e6)"
)


def lookup_cost(image: str) -> dict[str, Any]:
    """What one absolute path lookup (`os.stat("/usr/lib")`) costs on the host and inside a container of
    `image` as root and as the sandbox's unprivileged user (the one the docker executor runs commands as), in
    microseconds, and the daemon's storage driver. Python imports, pytest and cocotb make tens of thousands of
    such lookups per harness run."""
    from rtlreward.sandbox.users import sandbox_user

    uid, gid = sandbox_user()

    def inside(user: str) -> float | None:
        argv = [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "--user",
            user,
            "--entrypoint",
            "python3",
            image,
        ]
        r = subprocess.run(
            [*argv, "-c", LOOKUP_SNIPPET],
            capture_output=True,
            text=True,
            timeout=300,
        )
        try:
            return float(r.stdout)
        except ValueError:
            return None

    driver = subprocess.run(
        ["docker", "info", "--format", "{{.Driver}}"], capture_output=True, text=True, timeout=60
    ).stdout.strip()
    host = subprocess.run([sys.executable, "-c", LOOKUP_SNIPPET], capture_output=True, text=True, timeout=120)
    try:
        host_us = float(host.stdout)
    except ValueError:
        host_us = None
    return {
        "driver": driver or "?",
        "host_us": host_us,
        "root_us": inside("0:0"),
        "user_us": inside(f"{uid}:{gid}"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=6, help="latency rounds (one candidate per contender each)")
    ap.add_argument("--batch", type=int, default=6, help="distinct candidates in the throughput batch")
    ap.add_argument("--jobs", type=int, default=2, help="workers of the throughput batch")
    ap.add_argument("--profile", default="strict", help="rtlreward profile (default strict: CVDP's verdict)")
    ap.add_argument("--image", default=None, help="sim image (default: rtlreward's)")
    ap.add_argument("--json", type=Path, help="also write the numbers to this JSON file")
    ap.add_argument(
        "--ray",
        action="store_true",
        help="also the ray executor on a Ray started on this machine (scaling over nodes: bench_ray.py)",
    )
    args = ap.parse_args()

    require_tools("iverilog", "docker")
    require_python("cocotb_tools.runner", "yaml", "docker", "rtlreward.engine", "cvdp_adapter")
    header("rtlreward bench_docker")
    from rtlreward.integration import load_tasks
    from rtlreward.sandbox.docker import DockerExecutor

    task = next((t for t in load_tasks("cvdp") if t.id == TASK_ID), None)
    if task is None or not task.reference:
        raise Missing(f"the vendored CVDP example {TASK_ID} (cvdp_adapter/data/) is missing")
    image = args.image or default_image()
    why: list[str] = []
    if not docker_problem(why, image):
        raise Missing("; ".join(why))
    project = f"rtlbench{uuid.uuid4().hex[:8]}"
    compose_why = compose_build(task, image, project)
    ref_name = "compose" if compose_why is None else "docker run"
    print(f"candidates: {TASK_ID} reference solution, a distinct copy per run; profile {args.profile}")
    print(
        "benchmark's own way: "
        + (
            "`docker-compose run --rm` per candidate (compose image built once, untimed)"
            if compose_why is None
            else f"one `docker run` per service as bench_cvdp.py ({compose_why})"
        )
    )

    def reference(files: dict[str, str]) -> Any:
        if compose_why is None:
            return compose_way(task, files, image, project)
        return benchmark_way(task, files, image)

    warm_ex = DockerExecutor(image=image, slots=args.jobs)
    cold_ex = DockerExecutor(image=image, warm=False)
    contenders = {
        "local": Contender(args.profile, "local"),
        "warm": Contender(args.profile, warm_ex),
        "cold": Contender(args.profile, cold_ex),
    }
    if args.ray:
        require_python("ray")
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        contenders["ray"] = Contender(args.profile, "ray")
    runs: dict[str, Any] = {
        ref_name: reference,
        "harness": lambda files: raw_harness(task, files),
        **{n: (lambda files, c=c: c.one(task, files)) for n, c in contenders.items()},
    }
    names = list(runs)
    lat: dict[str, list[float]] = {n: [] for n in names}
    passed: dict[str, list[bool]] = {n: [] for n in names}
    stages: dict[str, dict[str, list[float]]] = {n: {} for n in contenders}
    thr: dict[str, float] = {}
    try:
        print(f"latency: {args.repeat} rounds after one untimed warm-up each, contenders rotated per round")
        for n in names:  # the first container start, slots learning the service mounts, imports, disk caches
            runs[n](candidates(task, 1, f"warmup-{n}")[0])
        warm_ex.settle()
        for r in range(args.repeat):
            order = names[r % len(names) :] + names[: r % len(names)]
            for n in order:
                files = candidates(task, 1, f"{n}-{r}")[0]
                t0 = time.perf_counter()
                out = runs[n](files)  # warm: includes waiting for the slot's check after the last candidate
                lat[n].append(time.perf_counter() - t0)
                passed[n].append(bool(out["passed"] if isinstance(out, dict) else out.passed))
                for k, v in getattr(out, "stages", {}).items():
                    stages[n].setdefault(k, []).append(v.duration)
        print(
            f"throughput: a batch of {args.batch} distinct candidates, jobs={args.jobs}, per engine contender"
        )
        for n, c in contenders.items():
            t0 = time.perf_counter()
            out = c.batch(task, candidates(task, args.batch, f"batch-{n}"), args.jobs)
            thr[n] = len(out) / (time.perf_counter() - t0)
            passed[n].extend(r.passed for r in out)
        stats = warm_ex.stats()
    finally:
        for c in contenders.values():
            c.close()
        if compose_why is None:
            compose_down(project)

    lookups = lookup_cost(image)
    p50 = {n: statistics.median(v) for n, v in lat.items()}
    rows = []
    for n in names:
        rows.append(
            [
                n,
                p50[n],
                pct(lat[n], 0.95),
                f"{1 / statistics.mean(lat[n]):.3f}",
                f"{thr[n]:.3f}" if n in thr else "-",
                f"{p50[n] / p50['local']:.2f}x",
                f"{p50[n] / p50[ref_name]:.2f}x",
                f"{p50[n] / p50['harness']:.2f}x",
                f"{sum(passed[n])}/{len(passed[n])}",
            ]
        )
    print()
    print(
        table(
            rows,
            [
                "contender",
                "p50 s",
                "p95 s",
                "seq cand/s",
                f"batch cand/s (j={args.jobs})",
                "p50 / local",
                f"p50 / {ref_name}",
                "p50 / harness",
                "passed",
            ],
        )
    )
    goal = p50["warm"] / p50["local"]
    print()
    print(f"warm docker / local (p50): {goal:.2f}x (goal <= {GOAL}x): {'met' if goal <= GOAL else 'NOT met'}")
    print(f"cold docker / warm docker (p50): {p50['cold'] / p50['warm']:.2f}x")
    for n, per in stages.items():
        parts = ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in per.items())
        print(f"where the time goes ({n}, median s per stage): {parts}")
    print(f"warm executor: {dict(sorted(stats.items()))}")
    if all(lookups[k] for k in ("host_us", "root_us", "user_us")):
        print(
            f"one absolute path lookup (os.stat, {LOOKUPS}x; docker storage driver {lookups['driver']}): "
            f"host {lookups['host_us']:.1f} us, container as root {lookups['root_us']:.1f} us, container as the "
            f"sandbox user {lookups['user_us']:.1f} us ({lookups['user_us'] / lookups['host_us']:.1f}x the host)"
        )
    report = {
        "reference": ref_name,
        "profile": args.profile,
        "latency": lat,
        "p50": p50,
        "p95": {n: pct(v, 0.95) for n, v in lat.items()},
        "throughput": thr,
        "passed": {n: sum(v) for n, v in passed.items()},
        "warm_stats": stats,
        "lookups": lookups,
        "stages": {n: {k: statistics.median(v) for k, v in per.items()} for n, per in stages.items()},
        "load": os.getloadavg(),
    }
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if all(all(v) for v in passed.values()) else 1


if __name__ == "__main__":
    run_main(main)
