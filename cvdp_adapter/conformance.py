"""Conformance of our CVDP verdict with the benchmark's own.

Two checks (`rtlreward cvdp conformance`, whose command is in `cvdp_adapter.cli`):
- the official v1.1.0 examples: each passes with its reference answer and fails with an empty answer, on the
  local runner and (when Docker and the sim image are there) on the Docker runner;
- a set of real LLM candidates with recorded verdicts (the reconstructed 50-problem spec-to-RTL set in
  `../shared/data/cvdp/reconstructed`, read in place, never copied): our strict verdict against the recorded one,
  every disagreement listed with its cause.

Records become Tasks and reference answers exactly as the dataset loads them (`cvdp_adapter.records`,
`cvdp_adapter.tasks`): a check that converted them its own way would check a different task.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from cvdp_adapter.records import Record, read_records
from cvdp_adapter.tasks import record_to_task
from rtlreward.model import Candidate, StageResult, Status, Task, hash_json

DEFAULT_SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cvdp"
EXAMPLES = (
    "cvdp_v1.1.0_example_nonagentic_code_generation_no_commercial_with_solutions.jsonl",
    "cvdp_v1.1.0_example_agentic_code_generation_no_commercial_with_solutions.jsonl",
)
RECONSTRUCTED_JSONL = "cvdp_nonagentic_spec_to_rtl_icarus_50.reconstructed.jsonl"
CANDIDATES_DIR = "candidates_gpt-5.5_direct-verilog"


# -- records ---------------------------------------------------------------------------------------------------
def reference_files(rec: Record) -> dict[str, str]:
    """The record's own answer as {path: text} ({} when the release redacted it)."""
    return dict(rec.reference() or {})


# -- running one candidate -------------------------------------------------------------------------------------
def make_executor(name: str) -> Any:
    """An executor by its registered name (local, docker, ...)."""
    from rtlreward.plugins import get_registry

    factories = get_registry().executors()
    if name not in factories:
        raise SystemExit(f"executor {name!r} is not available (registered: {', '.join(sorted(factories))})")
    return factories[name]()


def score_files(
    task: Task,
    files: Mapping[str, str],
    executor: Any,
    *,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
) -> StageResult:
    """Our strict CVDP verdict for an answer: the harness runner driven through a StageContext, the way the
    tests stage drives it (formatting and the other stages are not part of the benchmark's verdict)."""
    from cvdp_adapter.runner import CvdpHarnessRunner
    from rtlreward.answers import restrict_answer
    from rtlreward.stage import StageContext

    # The same rule the engine applies: an answer writes only the task's answer paths, harness files win.
    kept = restrict_answer(task, files).files
    with tempfile.TemporaryDirectory(prefix=f"cvdp-{task.id[:40]}-") as tmp:
        ctx = StageContext(
            task=task,
            candidate=Candidate(files=dict(kept)),
            workspace=Path(tmp),
            executor=executor,
            files=dict(kept),
            options=dict(options or {}),
            seed=seed,
            timeout=600,
        )
        return CvdpHarnessRunner().run(ctx)


def strict_engine(executor: Any, jobs: int = 2) -> Any:
    """The strict Engine with CVDP's limits (profile `cvdp-strict`: 600 s per service) on this executor, without
    the result cache (a conformance run measures) and without calibrated limits (the benchmark's own hold)."""
    from rtlreward.engine import Engine

    return Engine(profile="cvdp-strict", executor=executor, cache=False, jobs=jobs, calibrate=False)


def engine_verdict(engine: Any, task: Task, files: Mapping[str, str]) -> StageResult:
    """The strict reward's verdict as one StageResult: the tests stage's when it ran, else the first stage that
    stopped the candidate (an empty answer fails `format`, a design that does not elaborate fails `compile`)."""
    reward = engine.score(task, Candidate(files=dict(files)))
    tests = reward.stages.get("tests")
    if tests is not None and tests.status is not Status.SKIPPED:
        return (
            tests
            if reward.passed or tests.status is not Status.PASSED
            else attrs.evolve(tests, status=Status.FAILED)
        )
    for r in reward.stages.values():
        if r.status is not Status.PASSED and r.status is not Status.SKIPPED:
            return r
    return tests if tests is not None else StageResult(name="tests", status=Status.ERROR)


# -- check (a): the official examples --------------------------------------------------------------------------
@attrs.frozen
class ExampleCheck:
    task_id: str
    executor: str
    answer: str  # "reference" | "empty"
    expected_pass: bool
    status: str
    score: float

    @property
    def ok(self) -> bool:
        return (self.status == Status.PASSED.value) == self.expected_pass


def check_examples(
    cvdp_dir: Path = DEFAULT_SHARED,
    executors: Iterable[str] = ("local",),
    *,
    mode: str = "engine",
    progress: Callable[[ExampleCheck], None] | None = None,
) -> list[ExampleCheck]:
    """`mode="engine"`: the strict Engine's verdict (what a trainer gets); "harness": the cvdp runner alone.
    `progress` is called with each check as it ends (a harness run takes minutes: say so as it goes)."""
    out = []
    for name in executors:
        ex = make_executor(name)
        engine = strict_engine(ex) if mode == "engine" else None
        for fname in EXAMPLES:
            for rec in read_records(Path(cvdp_dir) / fname):
                task = record_to_task(rec)
                for label, files, expect in (
                    ("reference", reference_files(rec), True),
                    ("empty", {}, False),
                ):
                    r = engine_verdict(engine, task, files) if engine else score_files(task, files, ex)
                    out.append(ExampleCheck(task.id, name, label, expect, r.status.value, r.score))
                    if progress is not None:
                        progress(out[-1])
    return out


# -- check (b): recorded verdicts of real candidates -----------------------------------------------------------
@attrs.frozen
class RecordedCandidate:
    task: Task
    label: str  # "first_pass" | "repair_attempt_01" ...
    file: str  # the candidate's file name in the candidates folder
    files: dict[str, str]
    recorded_pass: bool
    recorded_log: str  # the recorded run's output tail (for explaining disagreements)


def reconstructed_candidates(root: Path | None = None) -> list[RecordedCandidate]:
    """Every candidate of the reconstructed set with its recorded verdict, read from ../shared in place."""
    root = Path(root or DEFAULT_SHARED / "reconstructed")
    tasks = {rec.id: record_to_task(rec) for rec in read_records(root / RECONSTRUCTED_JSONL)}
    cand_root = root / CANDIDATES_DIR
    index = json.loads((cand_root / "candidates_index.json").read_text())
    out = []
    for entry in index:
        task = tasks.get(entry["id"])
        if task is None:
            continue
        folder = cand_root / entry["id"]
        items = [("first_pass", entry["first_pass_file"], entry["first_pass_status"], "first_pass_eval.log")]
        items += [
            (Path(a["file"]).stem, a["file"], a["status"], a.get("log", "")) for a in entry["repair_attempts"]
        ]
        for label, fname, status, log in items:
            path = folder / fname
            if not path.is_file():
                continue
            log_text = ""
            if log and (folder / log).is_file():
                log_text = _recorded_output(folder / log)
            out.append(
                RecordedCandidate(
                    task=task,
                    label=label,
                    file=fname,
                    files={entry["target_file"]: path.read_text(errors="replace")},
                    recorded_pass=status == "pass",
                    recorded_log=log_text,
                )
            )
    return out


def _recorded_output(path: Path) -> str:
    text = path.read_text(errors="replace")
    try:
        first = json.loads(text.splitlines()[0])
        return str(first.get("stdout_tail", "")) + str(first.get("stderr_tail", ""))
    except (ValueError, IndexError):
        return text[-4000:]


@attrs.frozen
class Comparison:
    task_id: str
    label: str
    recorded_pass: bool
    our_status: str
    our_score: float
    cocotb_api: str
    python_env: str
    cause: str = ""  # why we disagree (empty when we agree)
    detail: str = ""

    @property
    def agree(self) -> bool:
        return (self.our_status == Status.PASSED.value) == self.recorded_pass

    def to_dict(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "agree": self.agree}


# Signatures of known causes in our own run's output, checked in order.
_CAUSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "harness installs packages at run time (the network is off)",
        re.compile(r"No matching distribution found|Failed to establish a new connection", re.S),
    ),
    (
        "X/Z read as an integer (simulator or cocotb value-resolution difference)",
        re.compile(r"contains non-0/1 values|Unresolvable bit in binary string|non-0/1", re.S),
    ),
    (
        "cocotb API drift",
        re.compile(
            r"BinaryValue|to_unsigned|to_signed|sim_time_utils|not representable|units=|unexpected keyword argument "
            r"'units'|has no attribute '(?:_type|integer|binstr|signed_integer|value|_name|_path)'|"
            r"Bad `period`|Must be divisible by 2|illegal transition|awaiting ReadOnly in ReadOnly|"
            r"cocotb\.result|TestFailure|cocotb\.binary|ModuleNotFoundError: No module named 'cocotb",
            re.S,
        ),
    ),
    (
        "Icarus 11 vs 13",
        re.compile(r"sorry:|syntax error|Unable to bind|not supported|error: .*unpacked", re.S),
    ),
    ("time limit", re.compile(r"exceeded its time limit|timed out")),
)


_XZ = re.compile(r"Logic(?:Array)?\('[01]*[ZXzx]|: [ZX]+\b|contains non-0/1 values|Unresolvable bit")
UNEXPLAINED = ("functional difference (see detail)", "we pass a recorded test failure")


def classify(
    result: StageResult,
    candidate: RecordedCandidate,
    *,
    conflict: bool = False,
    reseeded: dict[int, str] | None = None,
) -> tuple[str, str]:
    """A cause and a one-line detail for a disagreement. Checked in order: the recording contradicts itself
    (identical file recorded both ways), our verdict changes with the seed, a known signature in our output,
    the recorded run's own failure."""
    if conflict:
        hint = _first_error(candidate.recorded_log)
        return "recorded verdicts contradict each other (identical file recorded as pass and as fail)", hint
    seed0 = result.status.value
    if reseeded and any(v != seed0 for v in reseeded.values()):
        flips = ", ".join(f"seed {k}: {v}" for k, v in sorted(reseeded.items()))
        return "harness nondeterminism (verdict depends on the random draw)", f"seed 0: {seed0}, {flips}"
    text = result.feedback + "\n" + "\n".join(d.message for d in result.diagnostics)
    text += "\n" + "\n".join((result.artifacts.get("outputs") or {}).values())
    if result.status is not Status.PASSED:
        harness_py = "\n".join(
            t
            for p, t in (candidate.task.harness.files if candidate.task.harness else {}).items()
            if p.endswith(".py")
        )
        m = _XZ.search(text)
        if m and '"GPI_NET"' in harness_py:
            return (
                "cocotb API drift (GPI_NET became GPI_LOGIC in cocotb 2: the harness's dut_init leaves "
                "inputs undriven)",
                _around(text, m.start()),
            )
        for cause, pat in _CAUSES:
            m = pat.search(text)
            if m:
                return cause, _around(text, m.start())
        return "functional difference (see detail)", _first_error(text)
    log = candidate.recorded_log
    if candidate.task.harness is not None:
        from cvdp_adapter.harness import HarnessError, analyse

        try:
            api = analyse(candidate.task.harness.files).cocotb_api
        except HarnessError:
            api = ""
        if api == "cocotb19":
            return (
                "recorded run: a cocotb 1.9 harness run on cocotb 2.0.0.dev0 through an import shim; "
                "it passes on cocotb 1.9.2",
                _first_error(log),
            )
    if "stdin and input arguments may not both be used" in log or "CalledProcessError" in log:
        return "recorded run: build/evaluator error, not a test failure", _first_error(log)
    return "we pass a recorded test failure", _first_error(log)


def _around(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start : end if end > 0 else None].strip()[:300]


def _first_error(log: str) -> str:
    pats = (r"^E\s+\w*(Error|Exception)", r"AssertionError|assert ", r"(Error|error):", r"FAILED|failed")
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for pat in pats:
        for line in lines:
            if re.search(pat, line):
                return line[:300]
    return lines[-1][:300] if lines else ""


def compare_reconstructed(
    executor_name: str = "local",
    *,
    root: Path | None = None,
    jobs: int = 2,
    ids: Iterable[str] | None = None,
    limit: int | None = None,
    select: Iterable[tuple[str, str]] | None = None,
    recheck_seeds: Iterable[int] = (1, 2),
    mode: str = "engine",
    progress: Callable[[Comparison], None] | None = None,
    started: Callable[[int], None] | None = None,
) -> list[Comparison]:
    """Run every recorded candidate (or the given task ids) and compare verdicts. A disagreement is re-run
    with `recheck_seeds` to tell harness nondeterminism from a stable difference. `started(n)` is told how many
    candidates will run, `progress(comparison)` each one as it ends (for a progress bar)."""
    from concurrent.futures import ThreadPoolExecutor

    all_cands = reconstructed_candidates(root)
    recorded: dict[tuple[str, str], set[bool]] = {}
    for c in all_cands:
        key = (c.task.id, hash_json(c.files))
        recorded.setdefault(key, set()).add(c.recorded_pass)
    cands = all_cands
    if ids:
        wanted = set(ids)
        cands = [c for c in cands if c.task.id in wanted]
    if select is not None:
        chosen = set(select)
        cands = [c for c in cands if (c.task.id, c.label) in chosen]
    if limit:
        cands = cands[:limit]
    if started is not None:
        started(len(cands))
    executor = make_executor(executor_name)
    engine = strict_engine(executor, jobs) if mode == "engine" else None

    def one(c: RecordedCandidate) -> Comparison:
        r = (
            engine_verdict(engine, c.task, c.files)
            if engine
            else score_files(c.task, c.files, executor, seed=0)
        )
        comp = Comparison(
            task_id=c.task.id,
            label=c.label,
            recorded_pass=c.recorded_pass,
            our_status=r.status.value,
            our_score=round(r.score, 4),
            cocotb_api=str(r.metrics.get("cocotb_api", "")),
            python_env=str(r.metrics.get("python_env", "")),
        )
        if not comp.agree:
            conflict = len(recorded.get((c.task.id, hash_json(c.files)), ())) > 1
            cause, detail = classify(r, c, conflict=conflict)
            if cause in UNEXPLAINED and r.status is not Status.TIMEOUT:
                # No known signature: does the verdict depend on the random draw?
                reseeded = {
                    s: score_files(c.task, c.files, executor, seed=s).status.value for s in recheck_seeds
                }
                cause, detail = classify(r, c, conflict=conflict, reseeded=reseeded)
            comp = attrs.evolve(comp, cause=cause, detail=detail)
        if progress:
            progress(comp)
        return comp

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, cands))


def summarise(comps: list[Comparison]) -> dict[str, Any]:
    n = len(comps)
    agree = sum(c.agree for c in comps)
    rec_pass = [c for c in comps if c.recorded_pass]
    rec_fail = [c for c in comps if not c.recorded_pass]
    return {
        "candidates": n,
        "problems": len({c.task_id for c in comps}),
        "agree": agree,
        "agreement": round(agree / n, 4) if n else None,
        "recorded_pass": len(rec_pass),
        "recorded_pass_we_pass": sum(c.agree for c in rec_pass),
        "recorded_fail": len(rec_fail),
        "recorded_fail_we_fail": sum(c.agree for c in rec_fail),
        "causes": dict(Counter(c.cause for c in comps if not c.agree)),
        # The recording contradicting itself is no evidence either way: the figure without those candidates.
        "agreement_excluding_recording_conflicts": _ratio(
            [c for c in comps if not c.cause.startswith("recorded verdicts contradict")]
        ),
    }


def _ratio(comps: list[Comparison]) -> float | None:
    return round(sum(c.agree for c in comps) / len(comps), 4) if comps else None


def render_report(comps: list[Comparison]) -> str:
    s = summarise(comps)
    lines = [
        f"candidates {s['candidates']} on {s['problems']} problems: agree {s['agree']} ({s['agreement']:.1%})",
        f"recorded pass: {s['recorded_pass']}, we pass {s['recorded_pass_we_pass']}; "
        f"recorded fail: {s['recorded_fail']}, we fail {s['recorded_fail_we_fail']}",
        f"agreement without candidates whose recorded verdicts contradict each other: "
        f"{s['agreement_excluding_recording_conflicts']}",
        "disagreements:",
    ]
    for c in sorted((c for c in comps if not c.agree), key=lambda c: (c.cause, c.task_id, c.label)):
        rec = "pass" if c.recorded_pass else "fail"
        lines.append(
            f"  {c.task_id} [{c.label}] recorded {rec}, ours {c.our_status} ({c.cocotb_api}/"
            f"{c.python_env}): {c.cause}: {c.detail}"
        )
    return "\n".join(lines)
