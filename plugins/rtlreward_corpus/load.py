"""Reference-carrying corpora (JSONL or Parquet) as Tasks: a field mapping says which column is the prompt, the
reference design, and optionally the id, interface, difficulty and tags; the module and its interface come from
the reference itself (pyslang), so every profile with a reference (`equiv`, `trusted`) can score the tasks.

A field is a column name or a dotted path into nested records (`reward_model.ground_truth`). A prompt that is a
chat (a list of `{role, content}`) gives its last user message as the prompt and its system message as the
system prompt; a reference that is a list gives its first element (RTLCoder's `Response`); a reference wrapped
in prose, fences or `CODE BEGIN`/`CODE END` is cut down to its modules. Pickled fields (bytes) are refused:
unpickling a downloaded file runs whatever code it holds.

Rows that cannot become a task (no prompt, no module in the reference, a reference pyslang cannot elaborate) are
rejected with a reason instead of failing the whole load.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from rtlreward.model import Interface, Port, Task

__all__ = [
    "SCHEMAS",
    "CorpusError",
    "FieldMap",
    "Rejected",
    "extract_design",
    "field_map",
    "mapping_from",
    "project_mapping",
    "read_corpus",
    "read_rows",
    "top_module",
]

SUFFIXES = (".jsonl", ".json", ".parquet")
_MAX_REFERENCE = 256 * 1024


class CorpusError(ValueError):
    """The corpus file or the field mapping is unusable; the message says what to change."""


@attrs.frozen
class FieldMap:
    prompt: str = "prompt"
    reference: str = "reference"
    id: str | None = None
    # a column naming the expected top: {"module", "ports"} JSON or a module header
    interface: str | None = None
    difficulty: str | None = None
    tags: str | None = None
    header: str | None = None  # a module header appended to the prompt as a code block (RTLCoder's `Input`)
    # a boolean column: rows where it is false are rejected (VeriThoughts' `verified`)
    keep: str | None = None
    top: str | None = None  # a column naming the top module, when the reference declares several

    def describe(self) -> str:
        return ",".join(f"{k}={v}" for k, v in attrs.asdict(self).items() if v)


# The published shapes of the public corpora (docs/corpora.md has the sources).
SCHEMAS: dict[str, FieldMap] = {
    "generic": FieldMap(id="id", difficulty="difficulty", tags="tags"),
    "rtlcoder": FieldMap(prompt="Instruction", reference="Response", header="Input"),
    "verithoughts": FieldMap(prompt="question", reference="ground_truth", keep="verified"),
    "codev-r1": FieldMap(prompt="prompt", reference="reward_model.ground_truth", id="extra_info.index"),
}
_FIELD_KEYS = {a.name for a in attrs.fields(FieldMap)}


def field_map(schema: str | None = None, fields: str | Mapping[str, str] | None = None) -> FieldMap:
    """A schema by name, with `fields` (`prompt=Instruction,reference=Response` or a mapping) on top."""
    base = SCHEMAS.get(schema or "generic")
    if base is None:
        raise CorpusError(f"unknown corpus schema {schema!r}; the schemas are {', '.join(SCHEMAS)}")
    if not fields:
        return base
    if isinstance(fields, str):
        pairs: dict[str, str] = {}
        for part in fields.split(","):
            if not part.strip():
                continue
            key, sep, value = part.partition("=")
            if not sep:
                raise CorpusError(f"field mapping {part!r} is not key=column (e.g. prompt=Instruction)")
            pairs[key.strip()] = value.strip()
        fields = pairs
    unknown = sorted(set(fields) - _FIELD_KEYS)
    if unknown:
        raise CorpusError(
            f"unknown mapping key(s) {', '.join(unknown)}; the keys are {', '.join(sorted(_FIELD_KEYS))}"
        )
    return attrs.evolve(base, **{k: (v or None) for k, v in fields.items()})


def read_rows(path: str | Path) -> Iterator[dict[str, Any]]:
    """The records of a JSONL (or JSON list) or Parquet file, in file order."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path} does not exist or is not a file")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise CorpusError(
                "reading Parquet needs pyarrow: pip install 'rtlreward[corpus]' (or convert the file to JSONL)"
            ) from None
        table = pq.read_table(path)
        for batch in table.to_batches(max_chunksize=1024):
            yield from batch.to_pylist()
        return
    with path.open(encoding="utf-8", errors="replace") as fh:
        first = fh.read(1)
        fh.seek(0)
        if path.suffix == ".json" and first == "[":
            data = json.load(fh)
            if not isinstance(data, list):
                raise CorpusError(f"{path}: a JSON corpus must be a list of records")
            yield from (r for r in data if isinstance(r, dict))
            return
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorpusError(f"{path}:{n}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise CorpusError(f"{path}:{n}: a record must be a JSON object")
            yield row


def get_field(row: Mapping[str, Any], path: str | None) -> Any:
    if not path:
        return None
    value: Any = row
    for part in path.split("."):
        if isinstance(value, Mapping):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


_CODE_BEGIN = re.compile(r"CODE BEGIN(.*?)CODE END", re.S)
_FENCE = re.compile(r"```[ \t]*(?:systemverilog|verilog|sv|v)?[ \t]*\n(.*?)```", re.S | re.I)
_MODULE_SPAN = re.compile(r"\bmodule\b.*\bendmodule\b", re.S)


def extract_design(value: Any) -> str:
    """The Verilog of a reference field: a list's first element, the last `CODE BEGIN` block, else the fenced
    blocks, cut from the first `module` to the last `endmodule`."""
    if isinstance(value, list | tuple):
        value = value[0] if value else ""
    if isinstance(value, bytes | bytearray):
        raise CorpusError("the reference is bytes (a pickle?): rtlreward does not unpickle downloaded data")
    text = str(value or "")
    blocks = _CODE_BEGIN.findall(text)
    if blocks:
        text = blocks[-1]
    else:
        fenced = _FENCE.findall(text)
        if fenced:
            text = "\n".join(fenced)
    m = _MODULE_SPAN.search(text)
    return (m.group(0) + "\n") if m else ""


def _chat(value: Any) -> tuple[str, str]:
    """(prompt, system prompt) from a prompt field: text, or a chat's last user turn and its system turn."""
    if isinstance(value, list | tuple):
        user = [m.get("content", "") for m in value if isinstance(m, Mapping) and m.get("role") == "user"]
        system = [m.get("content", "") for m in value if isinstance(m, Mapping) and m.get("role") == "system"]
        return (str(user[-1]) if user else ""), (str(system[0]) if system else "")
    return str(value or ""), ""


_WORD = r"[A-Za-z_]\w*"


def top_module(design: str, modules: list[str]) -> str | None:
    """The module no other module instantiates (the last such one declared when several are)."""
    if len(modules) == 1:
        return modules[0]
    bodies = {m: b for m, b in re.findall(rf"\bmodule\s+({_WORD})(.*?)\bendmodule\b", design, re.S)}
    tops = [
        m
        for m in modules
        if not any(re.search(rf"\b{re.escape(m)}\b", b) for other, b in bodies.items() if other != m)
    ]
    return tops[-1] if tops else None


@attrs.frozen
class Rejected:
    row: int
    reason: str


def _text_hash(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8", "backslashreplace"))
        h.update(b"\0")
    return h.hexdigest()


def row_task(row: Mapping[str, Any], index: int, fmap: FieldMap, name: str) -> Task:
    """One record as a Task; raises CorpusError with the reason it cannot be one."""
    from rtlreward_hdl.slang import module_infos

    if fmap.keep and not get_field(row, fmap.keep):
        raise CorpusError(f"{fmap.keep} is false")
    prompt, system = _chat(get_field(row, fmap.prompt))
    if not prompt.strip():
        raise CorpusError(f"no prompt in field {fmap.prompt!r}")
    design = extract_design(get_field(row, fmap.reference))
    if not design:
        raise CorpusError(f"no module ... endmodule in field {fmap.reference!r}")
    if len(design) > _MAX_REFERENCE:
        raise CorpusError(f"the reference is larger than {_MAX_REFERENCE >> 10} KiB")
    try:
        infos, parsed = module_infos({"reference.sv": design})
    except Exception as exc:  # pyslang on a malformed design: the row's fault
        raise CorpusError(f"pyslang cannot read the reference: {exc}") from None
    if parsed.errors:
        e = parsed.errors[0]
        raise CorpusError(f"the reference does not parse (line {e.line}: {e.message})")
    modules = {name: info.interface for name, info in infos.items()}
    wanted = get_field(row, fmap.top) if fmap.top else None
    declared = get_field(row, fmap.interface) if fmap.interface else None
    if isinstance(declared, str) and declared.strip().startswith("{"):
        with contextlib.suppress(json.JSONDecodeError):
            declared = json.loads(declared)
    if isinstance(declared, Mapping) and declared.get("module"):
        wanted = wanted or str(declared["module"])
    elif isinstance(declared, str):
        named = re.search(rf"\bmodule\s+({_WORD})", declared)
        wanted = wanted or (named.group(1) if named else None)
    top = str(wanted) if wanted else top_module(design, list(modules))
    if not top or top not in modules:
        raise CorpusError(
            "cannot tell the reference's top module" + (f" ({top!r} not declared)" if top else "")
        )
    iface = modules[top]
    if not iface.ports or not any(p.direction == "output" for p in iface.ports):
        raise CorpusError(f"the reference's {top} has no output port")
    header = get_field(row, fmap.header) if fmap.header else None
    if header:
        prompt = f"{prompt.rstrip()}\n\n```verilog\n{str(header).strip()}\n```\n"
    rid = get_field(row, fmap.id) if fmap.id else None
    tid = str(rid) if rid not in (None, "") else f"{name}-{_text_hash(prompt, design)[:12]}"
    tags = get_field(row, fmap.tags) if fmap.tags else None
    if isinstance(tags, str):
        tags = [t for t in re.split(r"[,\s]+", tags) if t]
    path = f"{top}.sv"
    return Task(
        id=tid,
        prompt=prompt,
        system_prompt=system,
        expected_files=(path,),
        toplevel=top,
        interface=Interface(
            module=top,
            ports=tuple(Port(p.name, p.direction, p.width) for p in iface.ports),
            source="reference",
        ),
        reference={path: design},
        dataset="corpus",
        category=str(get_field(row, "category") or ""),
        difficulty=str(get_field(row, fmap.difficulty) or "") if fmap.difficulty else "",
        metadata={"corpus": name, "row": index, "tags": list(tags or [])},
    )


def read_corpus(
    path: str | Path, fmap: FieldMap | None = None, *, name: str | None = None
) -> tuple[list[Task], list[Rejected]]:
    """Every row of the file as a Task, and the rows rejected with their reasons. Ids stay unique: a repeated id
    gets `#<row>` appended."""
    fmap = fmap or SCHEMAS["generic"]
    path = Path(path)
    name = name or path.name.split(".")[0]
    tasks: list[Task] = []
    rejected: list[Rejected] = []
    seen: set[str] = set()
    for i, row in enumerate(read_rows(path)):
        try:
            t = row_task(row, i, fmap, name)
        except CorpusError as exc:
            rejected.append(Rejected(i, str(exc)))
            continue
        if t.id in seen:
            t = attrs.evolve(t, id=f"{t.id}#{i}")
        seen.add(t.id)
        tasks.append(t)
    if not tasks and rejected:
        first = rejected[0]
        raise CorpusError(
            f"{path}: no row became a task (row {first.row}: {first.reason}); check the field mapping "
            f"({fmap.describe()}) or pick a schema ({', '.join(SCHEMAS)})"
        )
    return tasks, rejected


def project_mapping() -> dict[str, Any]:
    """The `[corpus]` table of the project's rtlreward.toml (or {} when there is none)."""
    from rtlreward.config import find_config

    try:
        found = find_config()
    except Exception:
        return {}
    if not found or not isinstance(found[1], dict):
        return {}
    table = found[1].get("corpus")
    return table if isinstance(table, dict) else {}


def mapping_from(filters: dict[str, Any]) -> FieldMap:
    conf = project_mapping()
    schema = filters.get("schema") or conf.get("schema")
    fields: Any = filters.get("fields") or conf.get("fields")
    return field_map(schema, fields)


def write_rows(source: str | Path, rows: Iterable[int], out: str | Path, *, keep_order: bool = False) -> int:
    """The given rows of `source` in its own schema, in file order (or in the order given, with `keep_order`),
    written to `out` (JSONL, or Parquet when `out` ends in .parquet). Returns how many were written."""
    order = list(rows)
    wanted = set(order)
    by_row = {i: r for i, r in enumerate(read_rows(source)) if i in wanted}
    kept = [by_row[i] for i in (order if keep_order else sorted(wanted)) if i in by_row]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise CorpusError("writing Parquet needs pyarrow: pip install 'rtlreward[corpus]'") from None
        pq.write_table(pa.Table.from_pylist(kept), out)
    else:
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in kept), encoding="utf-8")
        tmp.replace(out)
    return len(kept)
