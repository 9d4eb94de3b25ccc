"""Decontamination of a training corpus against the benchmarks (VerilogEval, RTLLM, CVDP): a training problem is
the benchmark's problem when its prompt shares enough word n-grams with a benchmark prompt, or when its reference
design is equivalent to a benchmark reference with the same interface, whatever its prompt says.

The interface test ignores names: the ports are compared as a multiset of (direction, width). For each benchmark
reference with the same multiset, the training reference is renamed to the benchmark's module and port names
(ports paired by exact name, then by role: clocks with clocks, resets with resets, then in every order when a
group is small) and the renamed copy is scored against the benchmark task by the `equivalence` stage through the
engine and its sandbox (Yosys miter + SAT, or differential simulation): a pass is the same problem.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from rtlreward.model import Candidate, Interface, Task

__all__ = ["BENCHMARKS", "Bench", "DecontamSettings", "benchmark_tasks", "decontaminate", "renamed_design"]

BENCHMARKS = ("verilog-eval", "rtllm", "cvdp")
EQUIV_PROFILE = {
    "name": "corpus-equivalence",
    "combiner": "weighted",
    "stages": ["format", "equivalence"],
    "verdict": "equivalence",
    "weights": {"equivalence": 1.0},
}
_WORDS = re.compile(r"[a-z0-9_]+")
_CLOCK = re.compile(r"cl(?:oc)?k", re.I)
_RESET = re.compile(r"re?se?t|rst|clr|clear", re.I)
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


@attrs.frozen
class DecontamSettings:
    ngram: int = 8
    threshold: float = 0.5  # share of the training prompt's n-grams found in one benchmark prompt
    prove: bool = True
    mappings: int = 6  # port pairings tried per (training, benchmark) pair
    executor: str = "local"
    jobs: int | None = None


@attrs.frozen
class Bench:
    task: Task
    benchmark: str
    interface: Interface | None

    @property
    def key(self) -> str:
        return f"{self.benchmark}:{self.task.id}"


def shared_data() -> Path | None:
    """../shared/data beside the working folder or the checkout, where the benchmarks live on this machine."""
    for base in (Path.cwd(), Path(__file__).resolve().parents[2]):
        p = (base / ".." / "shared" / "data").resolve()
        if p.is_dir():
            return p
    return None


def _reference_interface(task: Task) -> Interface | None:
    from rtlreward_hdl.slang import parse_modules

    if not task.reference:
        return None
    if task.interface is not None and task.interface.ports:
        return task.interface
    try:
        modules = parse_modules({p: t for p, t in task.reference.items() if p.endswith((".v", ".sv"))})
    except Exception:
        return None
    if task.toplevel and task.toplevel in modules:
        return modules[task.toplevel]
    return next(iter(modules.values()), None) if len(modules) == 1 else None


def benchmark_tasks(
    names: Iterable[str] = BENCHMARKS, cvdp_sources: Iterable[str | Path] = ()
) -> tuple[list[Bench], list[str]]:
    """The benchmarks' tasks (and notes on what could not be read). CVDP reads the given JSONL files, by default
    every JSONL under ../shared/data/cvdp."""
    from rtlreward.integration import load_tasks

    out: list[Bench] = []
    notes: list[str] = []
    for name in names:
        sources: list[Any] = [None]
        if name == "cvdp":
            sources = list(cvdp_sources)
            if not sources:
                root = shared_data()
                sources = sorted((root / "cvdp").glob("*.jsonl")) if root else []
            if not sources:
                notes.append("cvdp: no JSONL given (--cvdp) and none under ../shared/data/cvdp")
        seen: set[str] = set()
        for src in sources:
            try:
                tasks = load_tasks(name, source=str(src)) if src else load_tasks(name)
            except Exception as exc:  # a benchmark missing here is reported, not fatal
                notes.append(f"{name}{f' ({src})' if src else ''}: {exc}")
                continue
            for t in tasks:
                if t.id in seen:
                    continue
                seen.add(t.id)
                out.append(Bench(t, name, _reference_interface(t)))
    return out, notes


def ngrams(text: str, n: int) -> set[int]:
    words = _WORDS.findall(text.lower())
    if len(words) < n:
        words = words + [""] * (n - len(words)) if words else []
    grams = set()
    for i in range(max(0, len(words) - n + 1)):
        h = hashlib.blake2b(" ".join(words[i : i + n]).encode(), digest_size=8).digest()
        grams.add(int.from_bytes(h, "big"))
    return grams


def signature(iface: Interface | None) -> tuple | None:
    if iface is None or not iface.ports or any(p.width is None for p in iface.ports):
        return None
    return tuple(sorted((p.direction, int(p.width or 0)) for p in iface.ports))


def _role(name: str) -> str:
    if _CLOCK.search(name):
        return "clock"
    if _RESET.search(name):
        return "reset"
    return ""


def port_mappings(train: Interface, bench: Interface, limit: int = 6) -> list[dict[str, str]]:
    """Pairings of the training ports with the benchmark's (same direction and width), most plausible first."""
    groups: dict[tuple, tuple[list[str], list[str]]] = defaultdict(lambda: ([], []))
    for p in train.ports:
        groups[(p.direction, p.width)][0].append(p.name)
    for p in bench.ports:
        groups[(p.direction, p.width)][1].append(p.name)
    options: list[list[dict[str, str]]] = []
    for mine, theirs in groups.values():
        if len(mine) != len(theirs):
            return []
        # A clock pairs with a clock and a reset with a reset: a sequential design is never the same problem
        # as a combinational one with the same port widths (this keeps the proofs few).
        for role in ("clock", "reset"):
            if sum(_role(m) == role for m in mine) != sum(_role(t) == role for t in theirs):
                return []
        fixed = {m: m for m in mine if m in theirs}
        rest_m = [m for m in mine if m not in fixed]
        rest_t = [t for t in theirs if t not in fixed]
        for role in ("clock", "reset"):
            rm = [m for m in rest_m if _role(m) == role]
            rt = [t for t in rest_t if _role(t) == role]
            if len(rm) == 1 and len(rt) == 1:
                fixed[rm[0]] = rt[0]
                rest_m.remove(rm[0])
                rest_t.remove(rt[0])
        if len(rest_m) <= 3:
            perms = [dict(zip(rest_m, p, strict=True)) for p in itertools.permutations(rest_t)]
        else:
            perms = [dict(zip(rest_m, rest_t, strict=True))]
        options.append([{**fixed, **p} for p in perms])
    out = []
    for combo in itertools.product(*options):
        merged: dict[str, str] = {}
        for part in combo:
            merged.update(part)
        out.append(merged)
        if len(out) >= limit:
            break
    return out


def renamed_design(design: str, renames: Mapping[str, str]) -> str:
    """`design` with identifiers renamed (comments dropped); an identifier that would collide with a new name is
    renamed out of the way."""
    from rtlreward_hdl.files import strip_comments

    text = strip_comments(design)
    targets = set(renames.values())
    idents = set(_IDENT.findall(text))
    full = dict(renames)
    for ident in idents:
        if ident in targets and ident not in full:
            full[ident] = f"{ident}__corpus"
    pattern = re.compile(
        r"(?<![\w$`\\])(" + "|".join(map(re.escape, sorted(full, key=len, reverse=True))) + r")\b"
    )
    return pattern.sub(lambda m: full[m.group(1)], text) if full else text


def decontaminate(
    tasks: list[Task],
    bench: list[Bench],
    settings: DecontamSettings = DecontamSettings(),
    *,
    progress: Callable[[int, int], Any] | None = None,
) -> list[dict[str, Any]]:
    """One entry per training task: the closest benchmark prompt by n-grams, the benchmark reference it is
    equivalent to (if any), and `contaminated`."""
    index: dict[int, list[int]] = defaultdict(list)
    for i, b in enumerate(bench):
        for g in ngrams(b.task.prompt, settings.ngram):
            index[g].append(i)
    by_sig: dict[tuple, list[Bench]] = defaultdict(list)
    for b in bench:
        sig = signature(b.interface)
        if sig is not None:
            by_sig[sig].append(b)
    entries: list[dict[str, Any]] = []
    items: list[tuple[Task, Candidate]] = []
    owners: list[tuple[int, str]] = []
    for k, t in enumerate(tasks):
        grams = ngrams(t.prompt, settings.ngram)
        hits: dict[int, int] = defaultdict(int)
        for g in grams:
            for i in set(index.get(g, ())):
                hits[i] += 1
        entry: dict[str, Any] = {"id": t.id, "row": t.metadata.get("row"), "ngram_overlap": 0.0}
        if hits and grams:
            best = max(hits, key=lambda i: hits[i])
            entry["ngram_overlap"] = round(hits[best] / len(grams), 4)
            entry["ngram_match"] = bench[best].key
        entry["ngram_contaminated"] = entry["ngram_overlap"] >= settings.threshold
        entries.append(entry)
        if not settings.prove or not t.reference or t.interface is None:
            continue
        design = "\n".join(v for p, v in sorted(t.reference.items()) if p.endswith((".v", ".sv")))
        for b in by_sig.get(signature(t.interface), []):
            assert b.interface is not None
            for mapping in port_mappings(t.interface, b.interface, settings.mappings):
                text = renamed_design(design, {t.interface.module: b.interface.module, **mapping})
                path = b.task.expected_files[0] if b.task.expected_files else f"{b.interface.module}.sv"
                items.append((b.task, Candidate(files={path: text}, sample=len(items))))
                owners.append((k, b.key))
    entries_proved: dict[int, str] = {}
    if items:
        from rtlreward.engine import Engine

        with Engine(EQUIV_PROFILE, executor=settings.executor, jobs=settings.jobs, calibrate=False) as eng:
            rewards = eng.score_batch(items, progress)
        for (k, key), r in zip(owners, rewards, strict=True):
            if r.passed and k not in entries_proved:
                entries_proved[k] = key
    for k, e in enumerate(entries):
        e["proofs"] = sum(1 for o, _ in owners if o == k)
        e["equivalent_to"] = entries_proved.get(k)
        e["contaminated"] = bool(e["ngram_contaminated"] or e["equivalent_to"])
    return entries
