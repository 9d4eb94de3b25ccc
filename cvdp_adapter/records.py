"""CVDP JSONL records: reading both shapes, applying the reference patch, filtering, commercial detection.

CVDP ships two record shapes. Non-agentic (copilot) records carry `input.{prompt,context}`,
`output.{response,context}` (the reference files) and `harness.files`. Agentic records carry `system_message`,
`prompt`, `context` (the starting workspace), `patch` (the reference as unified-diff hunks *without* file headers,
per file) and `harness` (the file dict itself). `Record` folds both into one value so the rest of the adapter never
branches on the shape again.

The benchmark applies hunks by their new-file line numbers without checking context lines
(`src/merge_in_memory.py: diff_apply`). Applying a wrong hunk silently would hand us a wrong reference solution, so
`apply_hunks` checks the old lines, tolerates a shifted hunk (like `patch`'s offset search) and raises
`PatchError` naming the hunk otherwise.

The bottom of the adapter: this module imports no other part of it (prompts and tasks build on records).
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

# Categories whose harness needs Cadence Xcelium in the benchmark (src/constants.py: VERIF_EDA_CATEGORIES).
VERIF_EDA_CATEGORIES = frozenset({"cid012", "cid013", "cid014"})
# Code comprehension categories answer in prose ({"response": ...}), not files.
COMPREHENSION_CATEGORIES = frozenset({"cid006", "cid008", "cid009", "cid010"})


class RecordError(ValueError):
    """A CVDP file or record that cannot be read; the message names the file and line."""


class PatchError(ValueError):
    """A reference patch that does not apply to its context file."""


@attrs.frozen(slots=True)
class Record:
    """One CVDP datapoint, whichever shape it came in."""

    id: str
    category: str
    difficulty: str
    agentic: bool
    prompt: str
    system_message: str = ""
    context: dict[str, str] = attrs.field(factory=dict)  # files present before the answer
    expected_files: tuple[str, ...] = ()  # paths the answer must provide
    patch: dict[str, str] = attrs.field(factory=dict)  # agentic only: raw hunks per file
    reference_context: dict[str, str] = attrs.field(factory=dict)  # non-agentic only: output.context
    response: str = ""  # non-agentic output.response (comprehension categories)
    harness: dict[str, str] = attrs.field(factory=dict)  # harness files, verbatim
    source: str = ""  # file the record came from
    line: int = 0  # 1-based line in that file

    @property
    def comprehension(self) -> bool:
        return self.category in COMPREHENSION_CATEGORIES

    def reference(self) -> dict[str, str] | None:
        """The record's own correct answer {path: text}, or None when the release redacted it.

        Non-agentic: `output.context`. Agentic: each patched file with its hunks applied to the context (only the
        patched files: the answer is what the agent changed)."""
        if not self.agentic:
            if not self.reference_context or not any(self.reference_context.values()):
                return None
            return dict(self.reference_context)
        if not self.patch or not all(self.patch.values()):
            return None
        return {
            path: apply_hunks(self.context.get(path, ""), hunks, path=path)
            for path, hunks in self.patch.items()
        }

    def has_reference(self) -> bool:
        if self.agentic:
            return bool(self.patch) and all(self.patch.values())
        return any(self.reference_context.values())


# ---------------------------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------------------------


def _strs(value: Any, what: str, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RecordError(f"{where}: {what} must be an object of {{path: text}}, got {type(value).__name__}")
    out = {}
    for k, v in value.items():
        out[str(k)] = "" if v is None else str(v)
    return out


def parse_record(obj: Any, *, source: str = "", line: int = 0) -> Record:
    """Turn one decoded JSON object into a `Record`, whichever CVDP shape it has."""
    where = f"{source}:{line}" if source else f"record {line}"
    if not isinstance(obj, Mapping):
        raise RecordError(f"{where}: a CVDP record must be a JSON object, got {type(obj).__name__}")
    rid = obj.get("id")
    if not rid or not isinstance(rid, str):
        raise RecordError(f"{where}: record has no string 'id'")
    where = f"{where} ({rid})"
    cats = obj.get("categories") or []
    if isinstance(cats, str):
        cats = [cats]
    category = next((str(c) for c in cats if str(c).startswith("cid")), "")
    difficulty = next((str(c) for c in cats if not str(c).startswith("cid")), "")
    if "input" in obj:  # non-agentic
        inp = obj.get("input") or {}
        out = obj.get("output") or {}
        harness = obj.get("harness") or {}
        hfiles = harness.get("files", harness) if isinstance(harness, Mapping) else harness
        ref = _strs(out.get("context"), "output.context", where)
        expected = () if category in COMPREHENSION_CATEGORIES else tuple(ref)
        return Record(
            id=rid,
            category=category,
            difficulty=difficulty,
            agentic=False,
            prompt=str(inp.get("prompt") or ""),
            context=_strs(inp.get("context"), "input.context", where),
            expected_files=expected,
            reference_context=ref,
            response=str(out.get("response") or ""),
            harness=_strs(hfiles, "harness.files", where),
            source=source,
            line=line,
        )
    if "prompt" in obj and ("patch" in obj or "context" in obj):  # agentic
        patch = _strs(obj.get("patch"), "patch", where)
        return Record(
            id=rid,
            category=category,
            difficulty=difficulty,
            agentic=True,
            prompt=str(obj.get("prompt") or ""),
            system_message=str(obj.get("system_message") or ""),
            context=_strs(obj.get("context"), "context", where),
            expected_files=tuple(patch),
            patch=patch,
            harness=_strs(obj.get("harness"), "harness", where),
            source=source,
            line=line,
        )
    raise RecordError(
        f"{where}: not a CVDP record: expected 'input'/'output'/'harness' (non-agentic) or "
        f"'prompt'/'context'/'patch'/'harness' (agentic), found keys {sorted(obj)}"
    )


def _jsonl_files(source: str | Path) -> list[Path]:
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.glob("*.jsonl") if p.is_file())
        if not files:
            raise RecordError(
                f"{path}: no *.jsonl files in this folder; pass a CVDP .jsonl file or its folder"
            )
        return files
    if not path.exists():
        raise RecordError(f"{path}: no such file; pass a CVDP .jsonl file (or a folder of them)")
    return [path]


def iter_records(source: str | Path) -> Iterator[Record]:
    """Records of a CVDP .jsonl file (or every .jsonl in a folder), in file order. A line that is not JSON or
    not a record raises `RecordError` with its file and line number: a dataset with a broken line is a broken
    dataset, not something to skip quietly."""
    for path in _jsonl_files(source):
        with path.open(encoding="utf-8") as fh:
            for n, raw in enumerate(fh, 1):
                if not raw.strip():
                    continue
                try:
                    obj = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise RecordError(
                        f"{path}:{n}: not valid JSON ({exc.msg} at column {exc.colno})"
                    ) from None
                yield parse_record(obj, source=str(path), line=n)


def read_records(source: str | Path) -> list[Record]:
    """All records of `source`; a repeated id keeps the first occurrence (files in a folder overlap)."""
    seen: dict[str, Record] = {}
    for rec in iter_records(source):
        seen.setdefault(rec.id, rec)
    return list(seen.values())


def looks_like_cvdp(source: str | Path) -> bool:
    """Whether a path is a CVDP .jsonl (or a folder holding one): its first record parses as either shape."""
    try:
        path = Path(source)
        files = _jsonl_files(path) if (path.is_dir() or path.suffix == ".jsonl") else []
        for f in files[:1]:
            with f.open(encoding="utf-8") as fh:
                for raw in fh:
                    if raw.strip():
                        obj = json.loads(raw)
                        parse_record(obj)
                        return isinstance(obj, Mapping) and "categories" in obj and "harness" in obj
    except (OSError, ValueError):
        return False
    return False


# ---------------------------------------------------------------------------------------------------------------
# Harness facts (.env, docker-compose) used by filters, tasks and listings
# ---------------------------------------------------------------------------------------------------------------


def parse_env(text: str) -> dict[str, str]:
    """A docker `env_file`: KEY = value lines (CVDP pads the `=` with spaces), comments and blanks ignored."""
    env: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        env[key.strip()] = value
    return env


_KEYVAL = re.compile(r"^\s*(image|env_file|command|working_dir|build)\s*:\s*(.*?)\s*$")


def parse_compose(text: str) -> dict[str, dict[str, str]]:
    """The services of a CVDP docker-compose.yml: {service: {image, env_file, command, ...}}.

    A deliberately small reader, not YAML: CVDP's files are all the same simple shape, some are not valid YAML
    (a service indented by one space), and the core must not need PyYAML."""
    services: dict[str, dict[str, str]] = {}
    in_services = False
    service_indent: int | None = None
    current: dict[str, str] | None = None
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            in_services = line.strip() == "services:"
            service_indent, current = None, None
            continue
        if not in_services:
            continue
        if service_indent is None:
            service_indent = indent
        m = re.match(r"^\s*([\w.-]+)\s*:\s*$", line)
        if indent <= service_indent and m:
            current = services.setdefault(m.group(1), {})
            continue
        kv = _KEYVAL.match(line)
        if current is not None and kv:
            current.setdefault(kv.group(1), kv.group(2).strip().strip("\"'"))
    return services


def env_files(harness: Mapping[str, str]) -> list[tuple[str, dict[str, str]]]:
    """The harness's env files in the order its services use them (first service first), falling back to
    `src/.env` and then any other `.env*` file. Paths are harness-relative (`src/.env`)."""
    order: list[str] = []
    for svc in parse_compose(harness.get("docker-compose.yml", "")).values():
        ref = svc.get("env_file", "")
        if ref:
            rel = ref[2:] if ref.startswith("./") else ref.lstrip("/")
            if rel in harness and rel not in order:
                order.append(rel)
    rest = sorted(n for n in harness if n.rsplit("/", 1)[-1].startswith(".env") and n not in order)
    order.extend(sorted(rest, key=lambda n: n != "src/.env"))  # src/.env first among the unreferenced
    return [(name, parse_env(harness[name])) for name in order]


def main_env(harness: Mapping[str, str]) -> dict[str, str]:
    """The env of the harness's first service: where TOPLEVEL and VERILOG_SOURCES of the answer come from."""
    envs = env_files(harness)
    return envs[0][1] if envs else {}


def simulators(harness: Mapping[str, str]) -> list[str]:
    sims = []
    for _, env in env_files(harness):
        sim = env.get("SIM", "").lower()
        if sim and sim not in sims:
            sims.append(sim)
    return sims


def images(harness: Mapping[str, str]) -> list[str]:
    """Container images the harness names (compose `image:` and Dockerfile `FROM`), placeholders included."""
    found: list[str] = []
    for svc in parse_compose(harness.get("docker-compose.yml", "")).values():
        if svc.get("image") and svc["image"] not in found:
            found.append(svc["image"])
    for name, text in harness.items():
        if name.rsplit("/", 1)[-1].startswith("Dockerfile"):
            for m in re.finditer(r"^\s*FROM\s+(\S+)", text, re.M | re.I):
                if m.group(1) not in found:
                    found.append(m.group(1))
    return found


def cocotb_generation(harness: Mapping[str, str]) -> str:
    """Which cocotb the harness was written for: "cocotb2" (`cocotb_tools.runner`), "cocotb1"
    (`cocotb.runner`, removed in cocotb 2) or "" when no runner import is found."""
    texts = [t for n, t in harness.items() if n.endswith(".py")]
    if any(re.search(r"\bcocotb_tools\.runner\b|from\s+cocotb_tools\s+import\s+runner", t) for t in texts):
        return "cocotb2"
    if any(re.search(r"\bcocotb\.runner\b|from\s+cocotb\s+import\s+runner", t) for t in texts):
        return "cocotb1"
    return ""


def commercial_reasons(rec: Record) -> list[str]:
    """Why a record needs Cadence Xcelium (empty: it runs on open-source simulators). Several signals, because
    the releases mark it differently: the EDA image placeholder, `SIM=xcelium`, an `xrun` service/command, the
    licence-network placeholder, and the categories the benchmark itself reserves for the commercial image. A bare
    `licnetwork` is not a reason on its own: the benchmark's processed compose files all carry it, Icarus ones too."""
    reasons: list[str] = []
    blob = "\n".join(rec.harness.values())
    if "__VERIF_EDA_IMAGE__" in blob:
        reasons.append("harness image __VERIF_EDA_IMAGE__ (Cadence Xcelium)")
    for name, env in env_files(rec.harness):
        if env.get("SIM", "").lower() == "xcelium":
            reasons.append(f"SIM=xcelium in {name}")
            break
    if re.search(r"\bxrun\b", blob):
        reasons.append("xrun (Xcelium) in the harness")
    if "__LICENSE_NETWORK__" in blob:
        reasons.append("needs the EDA licence network (__LICENSE_NETWORK__)")
    elif reasons and "licnetwork" in blob:
        # only supporting evidence: the benchmark adds `licnetwork` to every compose file it processes
        reasons.append("joins the EDA licence network (licnetwork)")
    if rec.category in VERIF_EDA_CATEGORIES and not reasons:
        reasons.append(f"category {rec.category} runs on the commercial EDA image in the benchmark")
    return reasons


# ---------------------------------------------------------------------------------------------------------------
# Filtering
# ---------------------------------------------------------------------------------------------------------------


def _as_set(value: str | Iterable[str] | None) -> set[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [v for v in re.split(r"[,\s]+", value) if v]
    out = {str(v).lower() for v in value}
    return out or None


def _normalise_category(c: str) -> str:
    c = c.lower().strip()
    if c.isdigit():
        return f"cid{int(c):03d}"
    if c.startswith("cid") and c[3:].isdigit():
        return f"cid{int(c[3:]):03d}"
    return c


def id_matcher(pattern: str | None):
    """`--id` semantics: a glob (`*fifo*`, `cvdp_agentic_*_0001`), or a regex when written `re:...` or `/.../`;
    a plain word matches ids containing it. Several patterns separated by commas match any."""
    if not pattern:
        return lambda _id: True
    preds = []
    for pat in [p.strip() for p in pattern.split(",") if p.strip()]:
        if pat.startswith("re:"):
            rx = re.compile(pat[3:])
            preds.append(lambda s, rx=rx: bool(rx.search(s)))
        elif len(pat) > 2 and pat.startswith("/") and pat.endswith("/"):
            rx = re.compile(pat[1:-1])
            preds.append(lambda s, rx=rx: bool(rx.search(s)))
        elif any(ch in pat for ch in "*?["):
            preds.append(lambda s, pat=pat: fnmatch.fnmatchcase(s, pat))
        else:
            preds.append(lambda s, pat=pat: pat in s)
    return lambda s: any(p(s) for p in preds)


@attrs.frozen(slots=True)
class Selection:
    """The outcome of filtering: records kept, and records left out with the reason (for listings)."""

    kept: tuple[Record, ...]
    excluded: tuple[tuple[Record, str], ...]


def select(
    records: Iterable[Record],
    *,
    category: str | Iterable[str] | None = None,
    difficulty: str | Iterable[str] | None = None,
    id: str | None = None,
    open_source_only: bool = False,
    with_reference: bool = False,
) -> Selection:
    """Filter records. Category/difficulty/id filters drop silently (the user asked for a subset);
    `open_source_only` and `with_reference` keep the dropped records with a reason, since those are facts about
    the record a user wants to see."""
    cats = {_normalise_category(c) for c in _as_set(category) or ()} or None
    diffs = _as_set(difficulty)
    match = id_matcher(id)
    kept: list[Record] = []
    excluded: list[tuple[Record, str]] = []
    for rec in records:
        if cats and rec.category.lower() not in cats:
            continue
        if diffs and rec.difficulty.lower() not in diffs:
            continue
        if not match(rec.id):
            continue
        if open_source_only:
            reasons = commercial_reasons(rec)
            if reasons:
                excluded.append((rec, "needs Cadence Xcelium: " + "; ".join(reasons)))
                continue
        if with_reference and not rec.has_reference():
            excluded.append((rec, "no reference solution in this release (redacted)"))
            continue
        kept.append(rec)
    return Selection(kept=tuple(kept), excluded=tuple(excluded))


# ---------------------------------------------------------------------------------------------------------------
# Unified-diff hunks without file headers
# ---------------------------------------------------------------------------------------------------------------

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@attrs.frozen(slots=True)
class Hunk:
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    lines: tuple[tuple[str, str], ...]  # (" " | "-" | "+", text)
    header_line: int  # 1-based line of the @@ header inside the patch text
    no_newline_old: bool = False  # "\ No newline at end of file" after the last old line
    no_newline_new: bool = False


def parse_hunks(patch: str, *, path: str = "") -> list[Hunk]:
    """Parse hunks (`@@ -a,b +c,d @@` and their body). Line counts in the header decide where a hunk ends, so
    an empty body line (a blank context line whose space an editor stripped) is read as context, not as the end.
    Anything that does not add up raises `PatchError` naming the hunk."""
    where = f"patch for {path}" if path else "patch"
    lines = patch.split("\n")
    hunks: list[Hunk] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(("--- ", "+++ ", "diff ", "index ")) or not line.strip():
            i += 1
            continue
        m = _HUNK.match(line)
        if not m:
            raise PatchError(
                f"{where}: line {i + 1}: expected a hunk header '@@ -a,b +c,d @@', got {line[:60]!r}"
            )
        old_start, new_start = int(m.group(1)), int(m.group(3))
        old_count = int(m.group(2)) if m.group(2) is not None else 1
        new_count = int(m.group(4)) if m.group(4) is not None else 1
        header = i + 1
        body: list[tuple[str, str]] = []
        seen_old = seen_new = 0
        no_nl_old = no_nl_new = False
        i += 1
        while i < len(lines) and (seen_old < old_count or seen_new < new_count):
            text = lines[i]
            if text == "" and i == len(lines) - 1:
                break  # the end of the patch text, not a blank context line
            if text.startswith("\\"):
                i += 1
                continue
            tag = text[:1] if text else " "
            if tag not in " -+":
                break
            body.append((tag, text[1:]))
            if tag in " -":
                seen_old += 1
            if tag in " +":
                seen_new += 1
            i += 1
        # "\ No newline at end of file" markers directly after the body
        while i < len(lines) and lines[i].startswith("\\"):
            prev = body[-1][0] if body else " "
            if prev in " -":
                no_nl_old = True
            if prev in " +":
                no_nl_new = True
            i += 1
        if seen_old != old_count or seen_new != new_count:
            raise PatchError(
                f"{where}: hunk at line {header} ({line.strip()}) promises {old_count} old / {new_count} new lines "
                f"but has {seen_old} / {seen_new}; the patch is truncated or malformed"
            )
        hunks.append(
            Hunk(old_start, old_count, new_start, new_count, tuple(body), header, no_nl_old, no_nl_new)
        )
    if not hunks:
        raise PatchError(f"{where}: no hunks found (expected '@@ -a,b +c,d @@' headers)")
    return hunks


def _find(lines: list[str], want: list[str], start: int, max_offset: int) -> int | None:
    """Where `want` occurs in `lines` nearest to `start` (the `patch` tool's offset search); trailing whitespace
    is ignored as a second try, since CVDP's hunks sometimes lost it."""
    n = len(want)
    for strip in (False, True):
        norm = (lambda s: s.rstrip()) if strip else (lambda s: s)
        w = [norm(x) for x in want]
        for off in range(max_offset + 1):
            for pos in (start - off, start + off) if off else (start,):
                if 0 <= pos <= len(lines) - n and [norm(x) for x in lines[pos : pos + n]] == w:
                    return pos
    return None


def apply_hunks(original: str, patch: str, *, path: str = "", max_offset: int = 200) -> str:
    """Apply header-less unified-diff hunks to `original` and return the new text.

    `@@ -0,0 +1,N @@` creates a file (original ignored when empty). Modifying hunks are checked against the
    original: their context and removed lines must match at the stated line or within `max_offset` lines of it;
    otherwise `PatchError` says which hunk failed. A file ends with a newline unless the patch says
    `\\ No newline at end of file` for its last new line."""
    hunks = parse_hunks(patch, path=path)
    where = f"patch for {path}" if path else "patch"
    had_final_newline = original.endswith("\n")
    lines = original.split("\n")
    if had_final_newline:
        lines.pop()
    if original == "":
        lines = []
    out: list[str] = []
    cursor = 0  # index in `lines` of the first line not yet copied
    final_newline = had_final_newline or not lines
    for h in hunks:
        old = [t for tag, t in h.lines if tag in " -"]
        new = [t for tag, t in h.lines if tag in " +"]
        if h.old_count == 0:
            # pure insertion after line old_start (0 = at the top)
            pos = h.old_start
            if pos < cursor or pos > len(lines):
                raise PatchError(
                    f"{where}: hunk at line {h.header_line} inserts after line {pos}, outside the file"
                )
        else:
            pos = _find(lines, old, h.old_start - 1, max_offset)
            if pos is None or pos < cursor:
                shown = old[0] if old else ""
                raise PatchError(
                    f"{where}: hunk at line {h.header_line} (@@ -{h.old_start},{h.old_count} @@) does not match "
                    f"the context file near line {h.old_start} (first expected line {shown!r})"
                )
        out.extend(lines[cursor:pos])
        out.extend(new)
        cursor = pos + len(old)
        if cursor >= len(lines):
            if h.no_newline_new:
                final_newline = False
            elif new or h.no_newline_old:
                final_newline = True
    out.extend(lines[cursor:])
    text = "\n".join(out)
    if out and final_newline:
        text += "\n"
    return text
