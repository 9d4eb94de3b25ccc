"""`rtlreward corpus ...`: load, check, dedup, decontaminate, split and near-miss data for a reference-carrying
corpus (docs/corpora.md)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

SchemaOpt = Annotated[
    str | None,
    typer.Option(
        "--schema", help="The corpus's shape: generic, rtlcoder, verithoughts, codev-r1 (docs/corpora.md)."
    ),
]
FieldsOpt = Annotated[
    str | None,
    typer.Option(
        "--fields",
        help="Field mapping on top of the schema: prompt=COL,reference=COL[,id=,difficulty=,tags=,header=,keep=,top=,interface=]; "
        "a dotted path reads nested records.",
    ),
]


def _read(corpus: Path, schema: str | None, fields: str | None):
    from rtlreward.cli import fail
    from rtlreward_corpus.load import CorpusError, mapping_from, read_corpus

    try:
        fmap = mapping_from({"schema": schema, "fields": fields})
        t0 = time.perf_counter()
        tasks, rejected = read_corpus(corpus, fmap)
        return tasks, rejected, time.perf_counter() - t0
    except (CorpusError, OSError) as exc:
        raise fail(str(exc)) from None


def add_commands(app: typer.Typer) -> None:
    from rtlreward.cli import command_group

    group = command_group(
        app,
        "corpus",
        help="Reference-carrying training corpora: load, check, dedup, decontaminate, split, near-miss.",
    )

    @group.command("load")
    def load(
        corpus: Annotated[Path, typer.Argument(help="A JSONL or Parquet corpus file.")],
        schema: SchemaOpt = None,
        fields: FieldsOpt = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
        show_rejected: Annotated[int, typer.Option("--rejected", help="Print up to N rejected rows.")] = 5,
    ) -> None:
        """Read a corpus into tasks and say how many rows became tasks, which were rejected and why."""
        from rtlreward.cli import console

        tasks, rejected, seconds = _read(corpus, schema, fields)
        kinds: dict[str, int] = {}
        for t in tasks:
            kinds[t.difficulty or "-"] = kinds.get(t.difficulty or "-", 0) + 1
        doc: dict[str, Any] = {
            "corpus": str(corpus),
            "tasks": len(tasks),
            "rejected": len(rejected),
            "seconds": round(seconds, 2),
            "difficulty": kinds,
            "rejected_rows": [{"row": r.row, "reason": r.reason} for r in rejected[:show_rejected]],
        }
        if as_json:
            typer.echo(json.dumps(doc, indent=2))
            return
        out = console()
        out.print(f"{len(tasks)} tasks, {len(rejected)} rows rejected, read in {seconds:.2f} s", markup=False)
        out.print("difficulty: " + ", ".join(f"{k}={v}" for k, v in sorted(kinds.items())), markup=False)
        for r in rejected[:show_rejected]:
            out.print(f"  row {r.row}: {r.reason}", markup=False)
