"""The `corpus` dataset: any reference-carrying JSONL or Parquet corpus (CodeV-R1's RL set, VeriThoughts,
RTLCoder-style pairs, your own) as tasks every profile with a reference can score (`equiv`, `trusted`), and the
`rtlreward corpus ...` commands that turn one into a training set: load, check, dedup, decontaminate, split,
near-miss. docs/corpora.md.

The field mapping comes from `--filter schema=NAME`, `--filter fields=prompt=COL,reference=COL,...`, or a
`[corpus]` table in `rtlreward.toml` (`schema = "rtlcoder"`, `fields = {prompt = "Instruction"}`); filters win.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from rtlreward import hookimpl
from rtlreward.model import Task
from rtlreward_corpus.load import (
    SCHEMAS,
    SUFFIXES,
    CorpusError,
    FieldMap,
    mapping_from,
    project_mapping,
    read_corpus,
    read_rows,
)

__all__ = ["CorpusDataset", "CorpusError", "FieldMap", "project_mapping", "read_corpus"]
__version__ = "0.1"

FILTERS = ("schema", "fields", "split", "ratios", "seed", "ids", "id", "difficulty", "limit")


def _sniff(path: Path) -> bool:
    """A record whose keys match a known schema's prompt and reference fields (the first row only)."""
    try:
        row = next(iter(read_rows(path)), None)
    except Exception:
        return False
    if not isinstance(row, dict):
        return False
    maps = list(SCHEMAS.values())
    if project_mapping():
        with contextlib.suppress(CorpusError):
            maps.append(mapping_from({}))
    return any(fm.prompt.split(".")[0] in row and fm.reference.split(".")[0] in row for fm in maps)


class CorpusDataset:
    name = "corpus"
    description = "a reference-carrying JSONL/Parquet corpus (CodeV-R1, VeriThoughts, RTLCoder, your own)"
    filters = FILTERS

    def detect(self, source: str | Path) -> bool:
        p = Path(source)
        return p.is_file() and p.suffix in SUFFIXES and _sniff(p)

    def messages(self, task: Task, style: str = "auto") -> list[dict[str, str]]:
        """`benchmark` (= `auto`): the corpus's own prompt; `spec`: the interface spelled out for exact
        compliance (rtlreward_corpus.styles)."""
        from rtlreward_corpus.styles import messages

        return messages(task, style)

    def load(self, source: str | Path | None = None, **filters: Any) -> list[Task]:
        if source is None:
            raise CorpusError("the corpus dataset needs a path: a JSONL or Parquet file (docs/corpora.md)")
        unknown = sorted(k for k, v in filters.items() if v is not None and k not in FILTERS)
        if unknown:
            raise CorpusError(
                f"unknown filter(s) {', '.join(unknown)}; the corpus filters are {', '.join(FILTERS)}"
            )
        tasks, _ = read_corpus(source, mapping_from(filters))
        ids = filters.get("ids") or filters.get("id")
        if ids:
            wanted = set(ids.split(",") if isinstance(ids, str) else ids)
            tasks = [t for t in tasks if t.id in wanted]
        if filters.get("difficulty"):
            tasks = [t for t in tasks if t.difficulty == str(filters["difficulty"])]
        if filters.get("split"):
            from rtlreward_corpus.split import parse_ratios, split_of

            ratios = parse_ratios(filters.get("ratios"))
            names = {n for n, _ in ratios}
            if filters["split"] not in names:
                raise CorpusError(
                    f"unknown split {filters['split']!r}; the splits are {', '.join(sorted(names))}"
                )
            seed = int(filters.get("seed") or 0)
            tasks = [t for t in tasks if split_of(t, ratios, seed) == filters["split"]]
        if filters.get("limit"):
            tasks = tasks[: int(filters["limit"])]
        return tasks


@hookimpl
def rtlreward_register_datasets(register):
    register("corpus", CorpusDataset())


@hookimpl
def rtlreward_register_commands(app):
    from rtlreward_corpus.cli import add_commands

    add_commands(app)
