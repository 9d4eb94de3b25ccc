"""Reading what a report is made of: the results file of `rtlreward eval`, or a training run's `metrics.jsonl`.

Results rows grow over time (per-stage diagnostics with stable codes, metrics, feedback, the reply, run settings),
and files written by older versions lack all of that. So every field is read defensively: what a row has is used,
what it lacks is taken from elsewhere when the user gives it (`--dataset` for categories and difficulties,
`--completions` for the replies), and otherwise left out of the report with a note saying why.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from rtlreward.evaluate.completions import read_completions
from rtlreward.evaluate.results import read_results
from rtlreward.model import Task

__all__ = ["Finding", "Run", "RunError", "Sample", "StageView", "load_run", "read_jsonl_objects"]

# Keys a tinker-cookbook metrics.jsonl row carries (one of them is enough to tell it from a results file).
TRAINING_PREFIXES = ("env/", "test/", "optim/", "progress/", "time/", "teacher_kl", "reward/")
# Row keys that describe one sample; the others, when constant over a file, are the run's settings.
SAMPLE_KEYS = frozenset(
    {
        "id",
        "sample",
        "reward",
        "passed",
        "stages",
        "max_total",
        "category",
        "difficulty",
        "task_hash",
        "tests",
        "seconds",
        "reply",
        "completion",
        "text",
        "files",
        "diagnostics",
        "metrics",
        "feedback",
        "error",
    }
)
REPLY_KEYS = ("reply", "completion", "text")
FAILING = ("failed", "error", "timeout")


class RunError(ValueError):
    """A run the report cannot read; the message says what was expected."""


@attrs.frozen
class Finding:
    """One diagnostic, normalised. `derived`: computed by the report (from the reply and the task), not recorded by
    the stage, so the page can say where it came from."""

    stage: str
    code: str
    message: str
    severity: str = "error"
    file: str | None = None
    line: int | None = None
    fields: dict[str, Any] = attrs.field(factory=dict)
    derived: bool = False


@attrs.frozen
class StageView:
    name: str
    status: str
    score: float
    diagnostics: tuple[Finding, ...] = ()
    metrics: dict[str, Any] = attrs.field(factory=dict)
    feedback: str = ""
    seconds: float | None = None  # the stage's wall time in this run (None: not recorded, or from the cache)

    @property
    def failing(self) -> bool:
        return self.status in FAILING


@attrs.frozen
class Sample:
    """One scored reply. `index` is its position in the run: anchors use it, never the (hostile) task id."""

    index: int
    task_id: str
    sample: int
    reward: float
    passed: bool
    max_total: float | None
    stages: dict[str, StageView]
    category: str | None = None
    difficulty: str | None = None
    reply: str | None = None
    files: dict[str, str] | None = None
    tests: tuple[Any, ...] | None = None
    diagnostics: tuple[Finding, ...] = ()  # row-level (e.g. dropped answer files)
    feedback: str = ""

    @property
    def normalized(self) -> float | None:
        return self.reward / self.max_total if self.max_total else None

    def first_failing_stage(self) -> str | None:
        return next((n for n, s in self.stages.items() if s.failing), None)


@attrs.frozen
class Run:
    """A results file (`kind == "results"`: samples) or a training run (`kind == "training"`: steps)."""

    label: str
    path: str
    kind: str
    samples: tuple[Sample, ...] = ()
    steps: tuple[dict[str, Any], ...] = ()
    settings: dict[str, Any] = attrs.field(factory=dict)
    notes: tuple[str, ...] = ()  # what the report could not use, and why

    @property
    def producer(self) -> str:
        """Who produced the replies, from the settings `rtlreward eval` copies out of the completions file
        (`model`, `sampler`): e.g. `Qwen/Qwen2.5-Coder-7B-Instruct, temperature 0.8, max tokens 4096`; "" when
        the file does not say."""
        model = self.settings.get("model")
        sampler = self.settings.get("sampler")
        parts = []
        if isinstance(model, list):
            parts.append(" + ".join(str(m) for m in model))
        elif model:
            parts.append(str(model))
        if isinstance(sampler, Mapping):
            parts += [
                f"{k.replace('_', ' ')} {sampler[k]}"
                for k in ("temperature", "max_tokens", "seed")
                if sampler.get(k) is not None
            ]
        elif isinstance(sampler, list) and sampler:
            parts.append(f"{len(sampler)} sampler settings")
        return ", ".join(parts)

    @property
    def stage_order(self) -> list[str]:
        """Stages in the order the rows list them (the engine writes them in its topological order); a stage
        seen only in later rows goes after the ones it followed."""
        order: list[str] = []
        for s in self.samples:
            prev = -1
            for name in s.stages:
                if name in order:
                    prev = order.index(name)
                else:
                    order.insert(prev + 1, name)
                    prev += 1
        return order


# -- reading ------------------------------------------------------------------------------------------------------
def read_jsonl_objects(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects of a JSONL file, and how many non-empty lines were not objects."""
    objs: list[dict[str, Any]] = []
    bad = 0
    with path.open(encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except ValueError:
                bad += 1
                continue
            if isinstance(obj, dict):
                objs.append(obj)
            else:
                bad += 1
    return objs, bad


def _is_result(obj: Mapping[str, Any]) -> bool:
    return "id" in obj and "sample" in obj and "passed" in obj


def _is_training(obj: Mapping[str, Any]) -> bool:
    return any(isinstance(k, str) and k.startswith(TRAINING_PREFIXES) for k in obj)


def load_run(
    path: str | Path,
    label: str,
    *,
    tasks: Mapping[str, Task] | None = None,
    completions: str | Path | None = None,
) -> Run:
    """Read a run: a results JSONL, a tinker-cookbook `metrics.jsonl`, or a folder holding one."""
    p = Path(path)
    if p.is_dir():
        if (p / "metrics.jsonl").is_file():
            p = p / "metrics.jsonl"
        else:
            raise RunError(
                f"{path} is a folder without metrics.jsonl: give a results file of `rtlreward eval` or a "
                "training run folder"
            )
    if not p.is_file():
        raise RunError(f"{path}: no such file (give a results JSONL of `rtlreward eval` or a metrics.jsonl)")
    try:
        objs, bad = read_jsonl_objects(p)
    except OSError as exc:
        raise RunError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if any(_is_result(o) for o in objs):
        return _load_results(p, label, tasks=tasks, completions=completions)
    if any(_is_training(o) for o in objs):
        steps = tuple(o for o in objs if _is_training(o))
        notes = (f"{bad} line(s) of {p.name} are not JSON objects and were left out",) if bad else ()
        return Run(label=label, path=str(p), kind="training", steps=steps, notes=notes)
    raise RunError(
        f"{path} holds neither result rows ({{'id', 'sample', 'passed', ...}} lines written by `rtlreward eval`) "
        "nor training metrics (a tinker-cookbook metrics.jsonl); check the path"
    )


def _float(value: Any, default: float = 0.0) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return default
    return f if math.isfinite(f) else default


def _opt_str(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return str(value)


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def finding(stage: str, d: Any) -> Finding | None:
    """A recorded diagnostic (a dict in the newer rows, a "file:line: message" string in hand-made ones)."""
    if isinstance(d, str):
        return Finding(stage=stage, code="", message=d)
    if not isinstance(d, Mapping):
        return None
    fields = d.get("fields")
    return Finding(
        stage=stage,
        code=str(d.get("code") or ""),
        message=str(d.get("message") or ""),
        severity=str(d.get("severity") or "error"),
        file=_opt_str(d.get("file")),
        line=_int_or_none(d.get("line")),
        fields=dict(fields) if isinstance(fields, Mapping) else {},
    )


def _diagnostics(stage: str, raw: Any) -> tuple[Finding, ...]:
    if not isinstance(raw, list | tuple):
        return ()
    return tuple(f for f in (finding(stage, d) for d in raw) if f is not None)


def _stage_view(name: str, st: Any) -> StageView:
    if not isinstance(st, Mapping):
        return StageView(name=name, status=str(st), score=0.0)
    status = st.get("status")
    return StageView(
        name=name,
        status=str(getattr(status, "value", status) or "unknown"),
        score=_float(st.get("score")),
        diagnostics=_diagnostics(name, st.get("diagnostics")),
        metrics=dict(st["metrics"]) if isinstance(st.get("metrics"), Mapping) else {},
        feedback=str(st.get("feedback") or ""),
        seconds=None if st.get("cached") or st.get("seconds") is None else _float(st.get("seconds")),
    )


def _reply(row: Mapping[str, Any]) -> str | None:
    for key in REPLY_KEYS:
        v = row.get(key)
        if isinstance(v, str):
            return v
    return None


def _replies_from(completions: str | Path) -> tuple[dict[tuple[str, int], tuple[str | None, Any]], list[str]]:
    """(id, sample) -> (reply text, files), numbered exactly as `rtlreward eval` numbers them (file order per id;
    an explicit "sample" wins; a repeated pair keeps the first, as eval does)."""
    items, problems = read_completions(completions)
    next_sample: dict[str, int] = defaultdict(int)
    out: dict[tuple[str, int], tuple[str | None, Any]] = {}
    for c in items:
        sample = c.sample if c.sample is not None else next_sample[c.id]
        next_sample[c.id] = max(next_sample[c.id], sample + 1)
        out.setdefault((c.id, sample), (c.text, c.files))
    return out, [str(p) for p in problems]


def _header(p: Path) -> tuple[dict[str, Any], set[int]]:
    """The run's settings from the results file's header line(s) (`{"rtlreward": "results", "format", "settings"}`,
    written by newer versions of `eval`), and their line numbers. Matched by shape, not by version: any line
    without an "id" that holds a "settings" object."""
    settings: dict[str, Any] = {}
    lines: set[int] = set()
    with p.open(encoding="utf-8", errors="replace") as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.strip() or '"settings"' not in raw:
                continue
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if isinstance(obj, dict) and "id" not in obj and isinstance(obj.get("settings"), Mapping):
                settings.update(obj["settings"])
                lines.add(n)
    return settings, lines


def _load_results(
    p: Path, label: str, *, tasks: Mapping[str, Task] | None, completions: str | Path | None
) -> Run:
    rows, problems = read_results(p)
    header, header_lines = _header(p)
    notes = [str(x) for x in problems if x.line not in header_lines]  # a header is not a bad row
    latest: dict[tuple[str, int], Mapping[str, Any]] = {}
    for r in rows:
        key = (str(r["id"]), _int_or_none(r.get("sample")) or 0)
        latest[key] = r  # a pair written twice counts once, the latest (as the eval summary does)
    replies: dict[tuple[str, int], tuple[str | None, Any]] = {}
    if completions is not None:
        if not Path(completions).is_file():
            raise RunError(f"{completions}: no such completions file")
        replies, cproblems = _replies_from(completions)
        notes += [f"{Path(completions).name}: {x}" for x in cproblems[:5]]
    unknown_tasks = 0
    samples: list[Sample] = []
    for (tid, n), r in latest.items():
        task = tasks.get(tid) if tasks else None
        if tasks is not None and task is None:
            unknown_tasks += 1
        stages_raw = r.get("stages") if isinstance(r.get("stages"), Mapping) else {}
        stages = {str(name): _stage_view(str(name), st) for name, st in stages_raw.items()}
        reply = _reply(r)
        files = dict(r["files"]) if isinstance(r.get("files"), Mapping) else None
        if reply is None and files is None and (tid, n) in replies:
            reply, cfiles = replies[(tid, n)]
            files = dict(cfiles) if cfiles else None
        tests = r.get("tests")  # rows written before the schema carried this pair; now it is in the metrics
        metrics = r.get("metrics") if isinstance(r.get("metrics"), Mapping) else {}
        if tests is None and "tests_total" in metrics:
            tests = [metrics.get("tests_passed"), metrics.get("tests_total")]
        samples.append(
            Sample(
                index=len(samples),
                task_id=tid,
                sample=n,
                reward=_float(r.get("reward")),
                passed=bool(r.get("passed")),
                max_total=_float(r["max_total"]) if r.get("max_total") is not None else None,
                stages=stages,
                category=_opt_str(r.get("category")) or (task.category if task else None) or None,
                difficulty=_opt_str(r.get("difficulty")) or (task.difficulty if task else None) or None,
                reply=reply,
                files=files,
                tests=tuple(tests) if isinstance(tests, list | tuple) else None,
                diagnostics=_diagnostics("answer", r.get("diagnostics")),
                feedback=str(r.get("feedback") or ""),
            )
        )
    samples.sort(key=lambda s: (s.task_id, s.sample))
    samples = [attrs.evolve(s, index=i) for i, s in enumerate(samples)]
    if unknown_tasks:
        notes.append(f"{unknown_tasks} result(s) name task ids the dataset does not have")
    return Run(
        label=label,
        path=str(p),
        kind="results",
        samples=tuple(samples),
        settings={**header, **_settings(latest.values())},
        notes=tuple(notes),
    )


def _settings(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Row keys that are not about one sample: a value shared by every row is a setting of the run; differing
    values are listed (a results file resumed under other settings shows it here)."""
    values: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        for k, v in r.items():
            if k not in SAMPLE_KEYS:
                values[str(k)].append(v)
    out: dict[str, Any] = {}
    for k, vs in values.items():
        distinct: list[Any] = []
        for v in vs:
            if v not in distinct:
                distinct.append(v)
        out[k] = distinct[0] if len(distinct) == 1 else distinct
    return out


def task_map(tasks: Sequence[Task] | None) -> dict[str, Task] | None:
    return None if tasks is None else {t.id: t for t in tasks}
