"""Value types shared by the engine, the stages and every plugin.

They are frozen attrs classes so a result can be cached, hashed, sent to another process and compared without
anyone mutating it behind the engine's back. Mappings inside them are plain dicts by convention: treat them as
read-only.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from typing import Any

import attrs


class Status(enum.StrEnum):
    """How a stage ended. Only PASSED counts as passing a gate. A StrEnum, so f-strings and tables show
    "passed", not "Status.PASSED"."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    ERROR = "error"  # the stage or its tool broke: never the candidate's credit, never a pass
    TIMEOUT = "timeout"


def _dict(value: Mapping | None) -> dict:
    return dict(value) if value else {}


@attrs.frozen(slots=True)
class Port:
    name: str
    direction: str  # "input" | "output" | "inout"
    width: int | None = None  # None: unknown (e.g. parameterised and not resolved)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "direction": self.direction, "width": self.width}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Port:
        return cls(name=d["name"], direction=d.get("direction", "input"), width=d.get("width"))


@attrs.frozen(slots=True)
class Interface:
    """The top module a task expects: its name and ports (order does not matter)."""

    module: str
    ports: tuple[Port, ...] = attrs.field(default=(), converter=tuple)
    source: str = ""  # where it came from: "task", "reference", "spec", "harness"

    def to_dict(self) -> dict[str, Any]:
        return {"module": self.module, "ports": [p.to_dict() for p in self.ports], "source": self.source}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Interface:
        return cls(
            module=d["module"],
            ports=tuple(Port.from_dict(p) for p in d.get("ports", ())),
            source=d.get("source", ""),
        )


@attrs.frozen(slots=True)
class Diagnostic:
    """One finding a human or a model can act on: file:line: message."""

    message: str
    file: str | None = None
    line: int | None = None
    severity: str = "error"  # "error" | "warning" | "info"
    code: str | None = None  # a stable id: `<namespace>.<name>`, e.g. `interface.port_missing`, `lint.WIDTH`
    # Structured facts a report can group by without parsing the message (a port's name, width and direction;
    # a mismatch count). Not part of the hash: two findings differing only here are still equal-or-not by eq.
    fields: dict[str, Any] = attrs.field(factory=dict, converter=_dict, hash=False)

    def __str__(self) -> str:
        loc = ""
        if self.file:
            loc = f"{self.file}:{self.line}: " if self.line else f"{self.file}: "
        return f"{loc}{self.severity}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Diagnostic:
        fields = d.get("fields")
        return cls(
            **{k: d.get(k) for k in ("message", "file", "line", "code")},
            severity=d.get("severity", "error"),
            fields=dict(fields) if isinstance(fields, Mapping) else {},
        )


@attrs.frozen(slots=True)
class Harness:
    """How a task's functional tests run. `kind` selects a harness runner registered by a plugin
    (`cocotb`, `cvdp`, `verilog-eval`, `rtllm`, ...); `files` are written into the workspace as they are;
    `options` are the runner's own (toplevel, test module, simulator, ...)."""

    kind: str
    files: dict[str, str] = attrs.field(factory=dict, converter=_dict)
    options: dict[str, Any] = attrs.field(factory=dict, converter=_dict)


ORIGIN_DATASET = "dataset"
ORIGIN_INLINE = "inline"


@attrs.frozen(slots=True)
class Task:
    """One problem: what the model is asked and how its answer is checked.

    `expected_files` are the workspace-relative paths the answer must provide (e.g. `rtl/arbiter.sv`); they are
    also the only paths an answer may write (`rtlreward.answers`). `context` files are in the workspace before the
    answer is written (specs, other RTL, testbenches). `compile_sources` are the workspace-relative HDL files that
    elaborate together with the answer; empty means "the expected files plus any HDL in the context under rtl/".

    `origin` says where the task came from: `"dataset"` (loaded by a registered dataset, or built in code) or
    `"inline"` (sent in a request, e.g. to the HTTP server). It is part of the fingerprint, so a task someone
    sent can never share a cached result or an in-flight evaluation with a dataset task, even an identical one.
    """

    id: str
    prompt: str = ""
    expected_files: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    toplevel: str | None = None
    interface: Interface | None = None
    context: dict[str, str] = attrs.field(factory=dict, converter=_dict)
    compile_sources: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    harness: Harness | None = None
    reference: dict[str, str] | None = None  # a known-good answer: {path: text}
    dataset: str = ""
    category: str = ""
    difficulty: str = ""
    system_prompt: str = ""
    metadata: dict[str, Any] = attrs.field(factory=dict, converter=_dict)
    origin: str = ORIGIN_DATASET

    def fingerprint(self) -> str:
        """A content hash of the WHOLE task, every field (taken from `attrs.fields`, so a field added later is
        covered without anyone remembering to add it). It keys the result cache and the in-flight dedupe: a
        stage may read any field (the format stage reads the reference, a prompt-aware stage the prompt), so
        leaving one out would let two different tasks share a verdict."""
        return hash_json({"task": 2, **attrs.asdict(self, recurse=True)})

    def stimulus_fingerprint(self) -> str:
        """What a candidate's seed is derived from: the parts of a task that define its checks (not the prompt,
        reference, metadata or origin), so rewording a prompt keeps the same stimulus. Not a cache key: use
        `fingerprint()` for that."""
        payload = {
            "id": self.id,
            "expected_files": list(self.expected_files),
            "toplevel": self.toplevel,
            "interface": self.interface.to_dict() if self.interface else None,
            "context": self.context,
            "compile_sources": list(self.compile_sources),
            "harness": None
            if self.harness is None
            else {"kind": self.harness.kind, "files": self.harness.files, "options": self.harness.options},
        }
        return hash_json(payload)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form, so a task can travel inside a trainer's dataset row or an HTTP request."""
        return {
            "id": self.id,
            "prompt": self.prompt,
            "expected_files": list(self.expected_files),
            "toplevel": self.toplevel,
            "interface": self.interface.to_dict() if self.interface else None,
            "context": self.context,
            "compile_sources": list(self.compile_sources),
            "harness": None
            if self.harness is None
            else {"kind": self.harness.kind, "files": self.harness.files, "options": self.harness.options},
            "reference": self.reference,
            "dataset": self.dataset,
            "category": self.category,
            "difficulty": self.difficulty,
            "system_prompt": self.system_prompt,
            "metadata": self.metadata,
            "origin": self.origin,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, origin: str | None = None) -> Task:
        """The inverse of `to_dict`. `origin` overrides whatever the mapping says: code that builds a task from a
        request passes `origin=ORIGIN_INLINE`, so a client cannot claim a dataset's cache namespace. A mapping
        without an origin (not written by `to_dict`) is `inline`: it did not come from a registered dataset."""
        h = d.get("harness")
        iface = d.get("interface")
        return cls(
            id=d["id"],
            prompt=d.get("prompt", ""),
            expected_files=tuple(d.get("expected_files", ())),
            toplevel=d.get("toplevel"),
            interface=Interface.from_dict(iface) if iface else None,
            context=d.get("context") or {},
            compile_sources=tuple(d.get("compile_sources", ())),
            harness=Harness(kind=h["kind"], files=h.get("files") or {}, options=h.get("options") or {})
            if h
            else None,
            reference=d.get("reference"),
            dataset=d.get("dataset", ""),
            category=d.get("category", ""),
            difficulty=d.get("difficulty", ""),
            system_prompt=d.get("system_prompt", ""),
            metadata=d.get("metadata") or {},
            origin=str(origin if origin is not None else d.get("origin") or ORIGIN_INLINE),
        )


@attrs.frozen(slots=True)
class Candidate:
    """A model's answer: the raw reply (`text`), or files already extracted (`files`, e.g. an agent's
    workspace). `sample` tells several samples of one task apart."""

    text: str | None = None
    files: dict[str, str] | None = None
    sample: int = 0

    def fingerprint(self) -> str:
        return hash_json({"text": self.text, "files": self.files})


@attrs.frozen(slots=True)
class StageResult:
    name: str
    status: Status
    score: float = 0.0  # in [0, 1]: partial credit
    metrics: dict[str, Any] = attrs.field(factory=dict, converter=_dict)
    diagnostics: tuple[Diagnostic, ...] = attrs.field(default=(), converter=tuple)
    feedback: str = ""  # short text fit to show a model
    duration: float = 0.0
    version: str = ""
    cached: bool = False
    # Outputs later stages consume (e.g. the format stage's extracted files under "files"). Not serialised.
    artifacts: dict[str, Any] = attrs.field(factory=dict, converter=_dict, eq=False, repr=False)

    @property
    def passed(self) -> bool:
        return self.status is Status.PASSED

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.value,
            "score": self.score,
            "metrics": self.metrics,
            "diagnostics": [d.to_dict() for d in self.diagnostics],
            "feedback": self.feedback,
            "duration": round(self.duration, 6),
            "version": self.version,
            "cached": self.cached,
        }

    @classmethod
    def from_dict(
        cls, d: Mapping[str, Any], artifacts: Mapping[str, Any] | None = None, name: str | None = None
    ) -> StageResult:
        """From `to_dict()` or from a stage entry of the reward schema (`rtlreward.schema`: `seconds`, and the
        name is its key, given as `name`)."""
        return cls(
            name=d.get("name") or name or "",
            status=Status(d["status"]),
            score=float(d.get("score", 0.0)),
            metrics=d.get("metrics") or {},
            diagnostics=tuple(Diagnostic.from_dict(x) for x in d.get("diagnostics", ())),
            feedback=d.get("feedback", ""),
            duration=float(d.get("duration", d.get("seconds", 0.0)) or 0.0),
            version=d.get("version", ""),
            cached=bool(d.get("cached", False)),
            artifacts=artifacts or {},
        )


@attrs.frozen(slots=True)
class Reward:
    """What a trainer gets back: the total, the strict verdict, every stage, and flat metrics to log."""

    total: float
    profile: str
    passed: bool  # the strict verdict: the benchmark's own pass/fail
    max_total: float
    stages: dict[str, StageResult] = attrs.field(factory=dict, converter=_dict)
    metrics: dict[str, Any] = attrs.field(factory=dict, converter=_dict)
    task_id: str = ""
    sample: int = 0
    files: dict[str, str] = attrs.field(factory=dict, converter=_dict, eq=False, repr=False)
    # What the engine itself found about the candidate, outside any stage (e.g. answer files it dropped because
    # the task does not expect them: code `answer.unexpected_path`). Also on the files provider's result.
    diagnostics: tuple[Diagnostic, ...] = attrs.field(default=(), converter=tuple)

    def feedback(self) -> str:
        """The stages' feedback joined, for the next turn of a refinement loop, plus the engine's own findings
        that no stage reported."""
        parts = [f"[{r.name}] {r.feedback}" for r in self.stages.values() if r.feedback]
        reported = {d for r in self.stages.values() for d in r.diagnostics}
        parts += [f"[answer] {d.message}" for d in self.diagnostics if d not in reported]
        return "\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "sample": self.sample,
            "total": self.total,
            "max_total": self.max_total,
            "profile": self.profile,
            "passed": self.passed,
            "stages": {name: r.to_dict() for name, r in self.stages.items()},
            "metrics": self.metrics,
            "diagnostics": [d.to_dict() for d in self.diagnostics],
        }

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Reward:
        """From `to_dict()` or from the reward schema (`rtlreward.schema.reward_record`: `score --json`, the
        server's answers, a results row), whose `reward` and `id` are `total` and `task_id` here."""
        return cls(
            total=float(d["total"] if "total" in d else d["reward"]),
            profile=d["profile"],
            passed=bool(d["passed"]),
            max_total=float(d.get("max_total", 0.0)),
            stages={k: StageResult.from_dict(v, name=k) for k, v in d.get("stages", {}).items()},
            metrics=d.get("metrics") or {},
            task_id=d.get("task_id") or d.get("id") or "",
            sample=int(d.get("sample", 0)),
            diagnostics=tuple(Diagnostic.from_dict(x) for x in d.get("diagnostics", ())),
        )


def as_candidate(candidate: Candidate | str | Mapping[str, str]) -> Candidate:
    """What callers may hand as a candidate: a Candidate, a raw reply, or extracted files {path: text}."""
    if isinstance(candidate, Candidate):
        return candidate
    if isinstance(candidate, str):
        return Candidate(text=candidate)
    if isinstance(candidate, Mapping):
        return Candidate(files=dict(candidate))
    raise TypeError(
        f"a candidate is a Candidate, a reply string or a {{path: text}} mapping, not {type(candidate)}"
    )


def hash_json(obj: Any) -> str:
    """A stable sha256 of a JSON-able value (sorted keys), used for cache keys and seeds."""
    data = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(data).hexdigest()
