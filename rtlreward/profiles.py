"""Reward profiles: which stages run, and how their results fold into one number.

A profile is data (TOML), not code, so an experiment's reward can be written down next to its logs and reproduced.
It names *terms*: a term is one stage or a composite (`{all = [a, b]}`, which passes only when every member
passes). Each term has a weight and gives either pass/fail credit (1 when it passed) or partial credit (the stage's
score, e.g. tests passed / tests run). *Gates* are stages that must pass or the whole reward is 0 (a candidate that
tries `$system` earns nothing, however well it lints). The *verdict* stage is the benchmark's own pass/fail:
`Reward.passed` is "verdict passed and every gate passed", whatever the combiner; a profile without a verdict
never passes (the presets name theirs). *Metrics* are the flat keys a trainer logs (`format_valid`,
`tests_passed`, ...): each names where its value comes from, so the engine itself names no stage. Stage names
appear only in profile data: the presets in `rtlreward/presets/*.toml` are the worked examples, docs/profiles.md
the reference.

Profile file (all keys optional; `extends` merges onto a preset or another file). The stage names here are
placeholders (`extract`, `gate`, `build`, `check`, `sim`):

    name = "my-profile"
    extends = "shaped"                 # start from a preset; tables merge, lists and values replace
    combiner = "weighted"              # weighted | strict | normalized | a plugin's combiner
    stages = ["extract", "gate", "build", "check", "sim"]
    gates = ["gate"]
    verdict = "sim"                    # no verdict: `passed` is always false
    partial = ["sim"]                  # terms with partial credit; the others are pass/fail

    [weights]
    extract = 0.1
    syntax = 0.3
    sim = 1.0

    [terms]
    syntax = { all = ["build", "check"] }

    [metrics]                          # flat metric = its source (one of these forms)
    syntax_valid = { passed = ["build", "check"] }     # 1 when the listed stages that ran all passed
    sim_score = { score = "sim" }                      # the stage's score when it passed or failed, else 0
    sim_total = { stage = "sim", metric = "tests_total" }   # a number from the stage's own metrics
    syntax_credit = { term = "syntax" }                # a weighted term's credit in [0, 1]

    [stage.sim]                        # per-stage settings
    requires = ["build"]               # replaces the stage's own requirements (e.g. [] to run it ungated)
    timeout = 120                      # per command, seconds (ctx.timeout)
    deadline = 600                     # whole stage, seconds (engine guard; default 3 * timeout + 30)
    memory_mb = 4096
    options = { simulator = "icarus" } # ctx.options
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

DEFAULT_PROFILE = "shaped"
PRESETS = ("seed", "shaped", "strict", "normalized")


class ProfileError(ValueError):
    """A profile file or preset name is wrong; the message names the key or the file."""


@attrs.frozen(slots=True)
class StageSettings:
    timeout: float | None = None  # per command; None: the stage's default_timeout
    deadline: float | None = None  # whole stage; None: 3 * timeout + 30
    memory_mb: int | None = None  # None: the engine's default (4096)
    options: dict[str, Any] = attrs.field(factory=dict, converter=dict)
    requires: tuple[str, ...] | None = None  # replaces the stage's own `requires` (None: keep them)


@attrs.frozen(slots=True)
class Term:
    """One weighted part of the reward: a stage, or several stages that must all pass."""

    name: str
    weight: float
    stages: tuple[str, ...]
    partial: bool = False

    def value(self, results: Mapping[str, Any]) -> float:
        """Credit in [0, 1]. Pass/fail: 1 when every member passed. Partial: the members' mean score, counting
        only stages that ran to a verdict (passed or failed); an error, timeout or skip gives 0."""
        members = [results.get(s) for s in self.stages]
        if not self.partial:
            return 1.0 if members and all(r is not None and r.passed for r in members) else 0.0
        scores = []
        for r in members:
            if r is None or str(r.status) not in ("passed", "failed"):
                scores.append(0.0)
            else:
                scores.append(max(0.0, min(1.0, float(r.score))))
        return sum(scores) / len(scores) if scores else 0.0


_METRIC_FORMS = ("passed", "score", "metric", "term")
_METRIC_KEYS = {"passed", "score", "stage", "metric", "term"}
RESERVED_METRIC_PREFIXES = ("reward/", "stage/", "term/", "answer/")


@attrs.frozen(slots=True)
class MetricSource:
    """One flat metric and where it comes from (`[metrics]` in a profile). Stage names live here, in profile
    data, not in the engine: a profile that swaps a stage names the new one."""

    name: str
    kind: str  # "passed" | "score" | "metric" | "term"
    stages: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    key: str = ""  # the stage metric's name (kind "metric") or the term's name (kind "term")

    def value(self, results: Mapping[str, Any], terms: Mapping[str, float]) -> int | float:
        """Present for every candidate: a stage that did not run (or is not enabled) counts as 0."""
        if self.kind == "passed":
            ran = [results[s] for s in self.stages if s in results]
            return int(bool(ran) and all(r.passed for r in ran))
        if self.kind == "score":
            r = results.get(self.stages[0])
            ok = r is not None and str(r.status) in ("passed", "failed")
            return float(r.score) if ok else 0.0
        if self.kind == "metric":
            r = results.get(self.stages[0])
            v = r.metrics.get(self.key) if r is not None else None
            if isinstance(v, int):  # bool is an int: True counts 1
                return int(v)
            return float(v) if isinstance(v, float) and v == v else 0
        return float(terms.get(self.key, 0.0))

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "passed":
            return {"passed": list(self.stages)}
        if self.kind == "score":
            return {"score": self.stages[0]}
        if self.kind == "metric":
            return {"stage": self.stages[0], "metric": self.key}
        return {"term": self.key}


@attrs.frozen(slots=True)
class Profile:
    name: str
    combiner: str = "weighted"
    stages: tuple[str, ...] = attrs.field(default=(), converter=tuple)  # enabled stages
    terms: tuple[Term, ...] = attrs.field(default=(), converter=tuple)
    gates: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    verdict: str | None = None  # the stage whose pass is the benchmark's pass; None: `passed` is always False
    stage_settings: dict[str, StageSettings] = attrs.field(factory=dict, converter=dict)
    description: str = ""
    source: str = ""  # preset name or file path, for messages
    metrics: tuple[MetricSource, ...] = attrs.field(default=(), converter=tuple)

    @property
    def max_weighted(self) -> float:
        return sum(t.weight for t in self.terms)

    @property
    def weights(self) -> dict[str, float]:
        return {t.name: t.weight for t in self.terms}

    def settings(self, stage: str) -> StageSettings:
        return self.stage_settings.get(stage, StageSettings())

    def options(self, stage: str) -> dict[str, Any]:
        return dict(self.settings(stage).options)

    def term_values(self, results: Mapping[str, Any]) -> dict[str, float]:
        return {t.name: t.value(results) for t in self.terms}

    def metric_values(self, results: Mapping[str, Any]) -> dict[str, int | float]:
        """The `[metrics]` table evaluated for one candidate's results."""
        terms = self.term_values(results)
        return {m.name: m.value(results, terms) for m in self.metrics}

    def gates_passed(self, results: Mapping[str, Any]) -> bool:
        return all((r := results.get(g)) is not None and r.passed for g in self.gates)

    def verdict_passed(self, results: Mapping[str, Any]) -> bool:
        """The strict verdict: the verdict stage passed and every gate passed."""
        if not self.verdict:
            return False
        r = results.get(self.verdict)
        return r is not None and r.passed and self.gates_passed(results)

    def to_dict(self) -> dict[str, Any]:
        """The TOML-shaped content (what `load_profile` reads back)."""
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "combiner": self.combiner,
            "stages": list(self.stages),
            "gates": list(self.gates),
            "verdict": self.verdict or "",
            "partial": [t.name for t in self.terms if t.partial],
            "weights": {t.name: t.weight for t in self.terms},
            "terms": {t.name: {"all": list(t.stages)} for t in self.terms if t.stages != (t.name,)},
            "metrics": {m.name: m.to_dict() for m in self.metrics},
            "stage": {},
        }
        for name, s in self.stage_settings.items():
            d: dict[str, Any] = {k: v for k, v in attrs.asdict(s).items() if v is not None and v != {}}
            if "requires" in d:
                d["requires"] = list(d["requires"])
            out["stage"][name] = d
        return out


_TOP_KEYS = {
    "name",
    "description",
    "extends",
    "combiner",
    "stages",
    "gates",
    "verdict",
    "partial",
    "weights",
    "terms",
    "metrics",
    "stage",
}
_STAGE_KEYS = {"timeout", "deadline", "memory_mb", "options", "requires"}
_TERM_KEYS = {"all"}


def _preset_dir() -> Any:
    return resources.files("rtlreward") / "presets"


def preset_path(name: str) -> Any:
    return _preset_dir() / f"{name}.toml"


def _read_toml(path: Any, label: str) -> dict[str, Any]:
    try:
        text = path.read_text() if hasattr(path, "read_text") else Path(path).read_text()
    except OSError as exc:
        raise ProfileError(f"cannot read profile {label}: {exc.strerror or exc}") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"profile {label} is not valid TOML: {exc}") from exc


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(dict(out[k]), v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _registered_profiles(registry: Any) -> dict[str, Any]:
    if registry is None:
        return {}
    try:
        return registry.profiles()
    except Exception:  # a broken plugin must not stop a preset from loading
        return {}


def _raw(name_or_path: str | Path, registry: Any, seen: tuple[str, ...] = ()) -> tuple[dict[str, Any], str]:
    """The merged raw mapping of a preset name, registered profile or file, with `extends` resolved."""
    key = str(name_or_path)
    if key in seen:
        raise ProfileError(f"profile {key!r} extends itself (chain: {' -> '.join((*seen, key))})")
    registered = _registered_profiles(registry)
    path = Path(key)
    if key in registered:
        obj = registered[key]
        if isinstance(obj, Mapping):
            data, label = dict(obj), key
        else:
            data, label = _read_toml(obj, f"{key!r} ({obj})"), key
        data.setdefault("name", key)
    elif key in PRESETS:
        data, label = _read_toml(preset_path(key), key), key
    elif path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise ProfileError(f"profile file {key} does not exist")
        data, label = _read_toml(path, key), str(path)
        data.setdefault("name", path.stem)
    else:
        known = sorted(set(PRESETS) | set(registered))
        raise ProfileError(
            f"unknown profile {key!r}: use one of {', '.join(known)} or a path to a .toml file"
        )
    base_name = data.get("extends")
    if base_name:
        if not isinstance(base_name, str):
            raise ProfileError(
                f"profile {label}: 'extends' must be a profile name or path, not {base_name!r}"
            )
        if not Path(base_name).is_absolute() and path.is_file() and (path.parent / base_name).is_file():
            base_name = str(path.parent / base_name)
        base, _ = _raw(base_name, registry, (*seen, key))
        own_name = data.get("name")
        data = _merge(base, {k: v for k, v in data.items() if k != "extends"})
        data["name"] = own_name or base.get("name", key)
        data.pop("extends", None)
    return data, label


def _str_list(data: Mapping[str, Any], key: str, label: str) -> list[str]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ProfileError(f"profile {label}: {key!r} must be a list of names, got {value!r}")
    return value


def parse_profile(data: Mapping[str, Any], label: str = "<dict>") -> Profile:
    """Validate a profile mapping (already merged); every error names the bad key."""
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ProfileError(
            f"profile {label}: unknown key {sorted(unknown)[0]!r} (known keys: {', '.join(sorted(_TOP_KEYS))})"
        )
    stages = _str_list(data, "stages", label)
    gates = _str_list(data, "gates", label)
    partial = set(_str_list(data, "partial", label))
    weights = data.get("weights", {})
    if not isinstance(weights, Mapping):
        raise ProfileError(f"profile {label}: 'weights' must be a table of term = number")
    composite = data.get("terms", {})
    if not isinstance(composite, Mapping):
        raise ProfileError(f"profile {label}: 'terms' must be a table of term = {{all = [stages]}}")
    for tname, spec in composite.items():
        if not isinstance(spec, Mapping):
            raise ProfileError(
                f'profile {label}: terms.{tname} must be a table like {{all = ["stage_a", "stage_b"]}}'
            )
        bad = set(spec) - _TERM_KEYS
        if bad:
            raise ProfileError(f"profile {label}: unknown key terms.{tname}.{sorted(bad)[0]} (use 'all')")
        _str_list(spec, "all", f"{label} terms.{tname}")
    enabled = set(stages)
    terms = []
    for tname, w in weights.items():
        if isinstance(w, bool) or not isinstance(w, int | float):
            raise ProfileError(f"profile {label}: weights.{tname} must be a number, got {w!r}")
        if w < 0:
            raise ProfileError(f"profile {label}: weights.{tname} must not be negative")
        members = tuple(composite[tname]["all"]) if tname in composite else (tname,)
        if not members:
            raise ProfileError(f"profile {label}: terms.{tname}.all is empty")
        for m in members:
            if m not in enabled:
                where = f"terms.{tname}" if tname in composite else f"weights.{tname}"
                raise ProfileError(
                    f"profile {label}: {where} refers to stage {m!r}, which is not in 'stages' ({', '.join(stages)})"
                )
        terms.append(Term(name=tname, weight=float(w), stages=members, partial=tname in partial))
    for p in partial:
        if p not in weights:
            raise ProfileError(f"profile {label}: partial lists {p!r}, which has no entry in [weights]")
    for g in gates:
        if g not in enabled:
            raise ProfileError(f"profile {label}: gates lists {g!r}, which is not in 'stages'")
    verdict = data.get("verdict", "")
    if not isinstance(verdict, str):
        raise ProfileError(f"profile {label}: 'verdict' must be a stage name")
    if verdict and verdict not in enabled:
        raise ProfileError(f"profile {label}: verdict {verdict!r} is not in 'stages'")
    metrics = _parse_metrics(data.get("metrics", {}), label, {t.name for t in terms})
    settings: dict[str, StageSettings] = {}
    stage_tbl = data.get("stage", {})
    if not isinstance(stage_tbl, Mapping):
        raise ProfileError(f"profile {label}: 'stage' must be a table of [stage.<name>] sections")
    for sname, s in stage_tbl.items():
        if not isinstance(s, Mapping):
            raise ProfileError(f"profile {label}: stage.{sname} must be a table")
        bad = set(s) - _STAGE_KEYS
        if bad:
            raise ProfileError(
                f"profile {label}: unknown key stage.{sname}.{sorted(bad)[0]} "
                f"(known: {', '.join(sorted(_STAGE_KEYS))}; put stage options under stage.{sname}.options)"
            )
        for k in ("timeout", "deadline"):
            v = s.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or v <= 0):
                raise ProfileError(f"profile {label}: stage.{sname}.{k} must be a positive number of seconds")
        mem = s.get("memory_mb")
        if mem is not None and (isinstance(mem, bool) or not isinstance(mem, int) or mem <= 0):
            raise ProfileError(f"profile {label}: stage.{sname}.memory_mb must be a positive integer")
        opts = s.get("options", {})
        if not isinstance(opts, Mapping):
            raise ProfileError(f"profile {label}: stage.{sname}.options must be a table")
        requires = None
        if "requires" in s:
            requires = tuple(_str_list(s, "requires", f"{label} stage.{sname}"))
        settings[sname] = StageSettings(
            timeout=float(s["timeout"]) if s.get("timeout") is not None else None,
            deadline=float(s["deadline"]) if s.get("deadline") is not None else None,
            memory_mb=mem,
            options=dict(opts),
            requires=requires,
        )
    combiner = data.get("combiner", "weighted")
    if not isinstance(combiner, str) or not combiner:
        raise ProfileError(f"profile {label}: 'combiner' must be a combiner name")
    name = data.get("name") or label
    return Profile(
        name=str(name),
        combiner=combiner,
        stages=tuple(stages),
        terms=tuple(terms),
        gates=tuple(gates),
        verdict=verdict or None,
        stage_settings=settings,
        description=str(data.get("description", "")),
        source=label,
        metrics=metrics,
    )


def _parse_metrics(table: Any, label: str, terms: set[str]) -> tuple[MetricSource, ...]:
    """`[metrics]`: name = {passed = [stages]} | {score = stage} | {stage = s, metric = key} | {term = name}.
    A stage that the profile does not enable is allowed (it counts as not run), so a profile that extends a
    preset with fewer stages keeps the preset's metrics."""
    if not isinstance(table, Mapping):
        raise ProfileError(f"profile {label}: 'metrics' must be a table of name = {{source}}")
    out = []
    for name, spec in table.items():
        where = f"profile {label}: metrics.{name}"
        if name.startswith(RESERVED_METRIC_PREFIXES):
            raise ProfileError(
                f"{where}: names starting with {', '.join(RESERVED_METRIC_PREFIXES)} are the engine's own"
            )
        if not isinstance(spec, Mapping):
            raise ProfileError(f'{where} must be a table like {{ passed = ["stage_a", "stage_b"] }}')
        bad = set(spec) - _METRIC_KEYS
        if bad:
            raise ProfileError(
                f"{where}: unknown key {sorted(bad)[0]!r} (use one of {', '.join(_METRIC_FORMS)})"
            )
        forms = [f for f in _METRIC_FORMS if f in spec]
        if len(forms) != 1 or ("stage" in spec) != (forms == ["metric"]):
            raise ProfileError(
                f"{where}: give exactly one source: passed = [stages], score = stage, "
                "stage = name with metric = key, or term = name"
            )
        kind = forms[0]
        if kind == "passed":
            stages = _str_list(spec, "passed", f"{label} metrics.{name}")
            if not stages:
                raise ProfileError(f"{where}.passed is empty")
            out.append(MetricSource(name=name, kind=kind, stages=tuple(stages)))
            continue
        value = spec[kind]
        if not isinstance(value, str) or not value:
            raise ProfileError(f"{where}.{kind} must be a name")
        if kind == "score":
            out.append(MetricSource(name=name, kind=kind, stages=(value,)))
        elif kind == "metric":
            stage = spec["stage"]
            if not isinstance(stage, str) or not stage:
                raise ProfileError(f"{where}.stage must be a stage name")
            out.append(MetricSource(name=name, kind=kind, stages=(stage,), key=value))
        else:
            if value not in terms:
                raise ProfileError(f"{where}.term {value!r} is not a term in [weights]")
            out.append(MetricSource(name=name, kind=kind, key=value))
    return tuple(out)


def load_profile(
    name_or_path: str | Path | Profile | Mapping[str, Any] = DEFAULT_PROFILE, *, registry: Any = None
) -> Profile:
    """A `Profile` from a preset name (`seed`, `shaped`, `strict`, `normalized`), a profile registered by a plugin,
    a path to a TOML file, a parsed mapping, or a `Profile` (returned as is)."""
    if isinstance(name_or_path, Profile):
        return name_or_path
    if isinstance(name_or_path, Mapping):
        data = dict(name_or_path)
        if data.get("extends"):
            base, _ = _raw(data.pop("extends"), registry)
            own = data.get("name")
            data = _merge(base, data)
            data["name"] = own or base.get("name", "<dict>")
        return parse_profile(data, str(data.get("name", "<dict>")))
    data, label = _raw(name_or_path, registry)
    return parse_profile(data, label)


def available_profiles(registry: Any = None) -> dict[str, str]:
    """{name: description} of the presets and every plugin-registered profile."""
    out = {}
    for name in (*PRESETS, *_registered_profiles(registry)):
        try:
            out[name] = load_profile(name, registry=registry).description
        except ProfileError as exc:
            out[name] = f"(broken: {exc})"
    return out
