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

    def _bar(what: str, quiet: bool):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from rtlreward.cli import console

        err = console(stderr=True)
        return Progress(
            TextColumn(what),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=True,
            disable=quiet or not err.is_terminal,
        )

    def _progress(bar):
        ids: list[int] = []

        def update(done: int, total: int) -> None:
            if not ids:
                ids.append(bar.add_task("", total=total))
            bar.update(ids[0], completed=done, total=total)

        return update

    def _write_json(path: Path | None, doc: Any) -> None:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc, indent=2))

    @group.command("check")
    def check(
        corpus: Annotated[Path, typer.Argument(help="A JSONL or Parquet corpus file.")],
        schema: SchemaOpt = None,
        fields: FieldsOpt = None,
        out: Annotated[
            Path | None, typer.Option("--out", "-o", help="Write the clean corpus here (its own schema).")
        ] = None,
        report: Annotated[Path | None, typer.Option("--report", help="Write the JSON report here.")] = None,
        dedup_: Annotated[
            bool, typer.Option("--dedup/--no-dedup", help="Group identical and equivalent references.")
        ] = True,
        prove_duplicates: Annotated[
            bool,
            typer.Option(
                "--prove-duplicates/--text-duplicates", help="Also prove same-interface references."
            ),
        ] = True,
        executor: Annotated[str, typer.Option("--executor", "-x", help="local | docker | ray")] = "local",
        jobs: Annotated[int | None, typer.Option("--jobs", "-j", help="Candidates in flight.")] = None,
        no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not use the result cache.")] = False,
    ) -> None:
        """Check every reference (compile, synth when registered, proof against itself), group duplicates, and
        write the clean corpus: healthy references, one per group. Parallel (-j) and resumable (result cache)."""
        from rtlreward.cli import console, fail
        from rtlreward.engine import EngineError
        from rtlreward_corpus.check import CorpusCheck, check_corpus, dedup
        from rtlreward_corpus.load import write_rows

        tasks, rejected, load_s = _read(corpus, schema, fields)
        settings = CorpusCheck(
            executor=executor, jobs=jobs, cache=not no_cache, prove_duplicates=prove_duplicates
        )
        t0 = time.perf_counter()
        try:
            with _bar("references", False) as bar:
                entries, stages = check_corpus(tasks, settings, progress=_progress(bar))
            check_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            groups = [[t.id] for t in tasks]
            if dedup_:
                with _bar("duplicates", False) as bar:
                    groups = dedup(tasks, settings, progress=_progress(bar))
            dedup_s = time.perf_counter() - t0
        except EngineError as exc:
            raise fail(str(exc)) from None
        healthy = {e["id"] for e in entries if e["status"] == "ok"}
        row = {t.id: t.metadata.get("row") for t in tasks}
        keep: list[str] = []
        for g in groups:
            first = next((i for i in g if i in healthy), None)
            if first is not None:
                keep.append(first)
        doc = {
            "corpus": str(corpus),
            "stages": stages,
            "tasks": len(tasks),
            "rejected_rows": [{"row": r.row, "reason": r.reason} for r in rejected],
            "broken": [e for e in entries if e["status"] != "ok"],
            "duplicate_groups": [g for g in groups if len(g) > 1],
            "kept": len(keep),
            "cached": sum(1 for e in entries if e.get("cached")),
            "seconds": {"load": round(load_s, 2), "check": round(check_s, 2), "dedup": round(dedup_s, 2)},
            "entries": entries,
        }
        _write_json(report, doc)
        if out is not None:
            write_rows(corpus, [row[i] for i in keep], out)
        con = console()
        dups = sum(len(g) - 1 for g in groups)
        con.print(
            f"{len(tasks)} tasks ({len(rejected)} rows rejected): {len(healthy)} healthy "
            f"({', '.join(stages)}), {len(tasks) - len(healthy)} broken, {dups} duplicates in "
            f"{sum(1 for g in groups if len(g) > 1)} groups; {len(keep)} kept"
            + (f" -> {out}" if out else ""),
            markup=False,
        )
        con.print(
            f"time: load {load_s:.1f} s, check {check_s:.1f} s ({doc['cached']} references from the result "
            f"cache), dedup {dedup_s:.1f} s",
            markup=False,
        )
        for e in doc["broken"][:5]:
            con.print(f"  {e['id']}: {e.get('cause', '')}", markup=False)

    @group.command("decontaminate")
    def decontaminate_cmd(
        corpus: Annotated[Path, typer.Argument(help="A JSONL or Parquet corpus file.")],
        schema: SchemaOpt = None,
        fields: FieldsOpt = None,
        out: Annotated[
            Path | None,
            typer.Option("--out", "-o", help="Write the rows that are not benchmark problems here."),
        ] = None,
        report: Annotated[Path | None, typer.Option("--report", help="Write the JSON report here.")] = None,
        against: Annotated[
            str, typer.Option("--against", help="Benchmarks, comma-separated: verilog-eval, rtllm, cvdp.")
        ] = "verilog-eval,rtllm,cvdp",
        cvdp: Annotated[
            list[Path],
            typer.Option("--cvdp", help="CVDP JSONL files (default: ../shared/data/cvdp/*.jsonl)."),
        ] = [],  # noqa: B006
        ngram: Annotated[int, typer.Option("--ngram", help="Words per prompt n-gram.")] = 8,
        threshold: Annotated[
            float, typer.Option("--threshold", help="Share of a prompt's n-grams in one benchmark prompt.")
        ] = 0.5,
        prove: Annotated[
            bool, typer.Option("--prove/--no-prove", help="Prove references against same-interface ones.")
        ] = True,
        mappings: Annotated[
            int,
            typer.Option("--mappings", help="Port pairings tried per (training, benchmark) pair, at most."),
        ] = 6,
        executor: Annotated[str, typer.Option("--executor", "-x", help="local | docker | ray")] = "local",
        jobs: Annotated[int | None, typer.Option("--jobs", "-j", help="Candidates in flight.")] = None,
    ) -> None:
        """Find training problems that are benchmark problems: by prompt n-grams and by a reference equivalent to
        a benchmark reference with the same interface (names aside). Writes a report and the clean rows."""
        from rtlreward.cli import console, fail
        from rtlreward.engine import EngineError
        from rtlreward_corpus.decontam import BENCHMARKS, DecontamSettings, benchmark_tasks, decontaminate
        from rtlreward_corpus.load import write_rows

        names = [n.strip() for n in against.split(",") if n.strip()]
        bad = [n for n in names if n not in BENCHMARKS]
        if bad:
            raise fail(f"unknown benchmark(s) {', '.join(bad)}; choose from {', '.join(BENCHMARKS)}")
        tasks, _, _ = _read(corpus, schema, fields)
        t0 = time.perf_counter()
        bench, notes = benchmark_tasks(names, cvdp)
        if not bench:
            raise fail("no benchmark task could be read: " + "; ".join(notes))
        settings = DecontamSettings(
            ngram=ngram,
            threshold=threshold,
            prove=prove,
            mappings=max(1, mappings),
            executor=executor,
            jobs=jobs,
        )
        try:
            with _bar("proofs", False) as bar:
                entries = decontaminate(tasks, bench, settings, progress=_progress(bar))
        except EngineError as exc:
            raise fail(str(exc)) from None
        seconds = time.perf_counter() - t0
        flagged = [e for e in entries if e["contaminated"]]
        doc = {
            "corpus": str(corpus),
            "benchmarks": {n: sum(1 for b in bench if b.benchmark == n) for n in names},
            "notes": notes,
            "settings": {"ngram": ngram, "threshold": threshold, "prove": prove},
            "tasks": len(tasks),
            "contaminated": len(flagged),
            "proofs": sum(e["proofs"] for e in entries),
            "seconds": round(seconds, 2),
            "entries": entries,
        }
        _write_json(report, doc)
        if out is not None:
            write_rows(corpus, [e["row"] for e in entries if not e["contaminated"]], out)
        con = console()
        con.print(
            f"{len(flagged)} of {len(tasks)} tasks are benchmark problems "
            f"({sum(1 for e in flagged if e['ngram_contaminated'])} by prompt, "
            f"{sum(1 for e in flagged if e['equivalent_to'])} by an equivalent reference; "
            f"{doc['proofs']} proofs, {seconds:.1f} s)" + (f"; clean rows -> {out}" if out else ""),
            markup=False,
        )
        for e in flagged[:10]:
            why = (
                e.get("equivalent_to") or f"{e.get('ngram_match')} ({e['ngram_overlap']:.2f} of its n-grams)"
            )
            con.print(f"  {e['id']}: {why}", markup=False)
        for n in notes:
            con.print(f"  note: {n}", markup=False)

    @group.command("split")
    def split_cmd(
        corpus: Annotated[Path, typer.Argument(help="A JSONL or Parquet corpus file.")],
        out_dir: Annotated[
            Path,
            typer.Option("--out-dir", "-o", help="Write one file per split here (<stem>.<split>.jsonl)."),
        ],
        schema: SchemaOpt = None,
        fields: FieldsOpt = None,
        ratios: Annotated[
            str, typer.Option("--ratios", help="name=weight,... (normalised).")
        ] = "train=0.8,validation=0.1,test=0.1",
        seed: Annotated[int, typer.Option("--seed", help="Another seed, another (deterministic) split.")] = 0,
    ) -> None:
        """Deterministic splits by hash of each reference (copies of one design share a split); the same split
        is `--filter split=NAME` on the corpus."""
        from rtlreward.cli import console, fail
        from rtlreward_corpus.load import write_rows
        from rtlreward_corpus.split import parse_ratios, split_of

        try:
            parts = parse_ratios(ratios)
        except ValueError as exc:
            raise fail(str(exc)) from None
        tasks, _, _ = _read(corpus, schema, fields)
        rows: dict[str, list[int]] = {n: [] for n, _ in parts}
        for t in tasks:
            rows[split_of(t, parts, seed)].append(t.metadata["row"])
        suffix = ".parquet" if corpus.suffix == ".parquet" else ".jsonl"
        stem = corpus.name.split(".")[0]
        con = console()
        for name, picked in rows.items():
            dest = out_dir / f"{stem}.{name}{suffix}"
            write_rows(corpus, picked, dest)
            con.print(f"{name}: {len(picked)} -> {dest}", markup=False)

    @group.command("near-miss")
    def near_miss(
        dataset: Annotated[
            str,
            typer.Argument(help="A corpus file, or any dataset with references (verilog-eval, rtllm, ...)."),
        ],
        pairs: Annotated[
            Path | None, typer.Option("--pairs", help="Write DPO preference pairs here (JSONL).")
        ] = None,
        repairs: Annotated[
            Path | None, typer.Option("--repairs", help="Write SFT repair conversations here (JSONL).")
        ] = None,
        schema: SchemaOpt = None,
        fields: FieldsOpt = None,
        ids: Annotated[list[str], typer.Option("--id", help="Only these task ids (repeatable).")] = [],  # noqa: B006
        limit: Annotated[int | None, typer.Option("--limit", help="Only the first N tasks.")] = None,
        per_task: Annotated[int, typer.Option("--per-task", help="Refuted mutants kept per task.")] = 3,
        tried: Annotated[int, typer.Option("--tried", help="Mutants tried per task.")] = 10,
        executor: Annotated[str, typer.Option("--executor", "-x", help="local | docker | ray")] = "local",
        jobs: Annotated[int | None, typer.Option("--jobs", "-j", help="Candidates in flight.")] = None,
    ) -> None:
        """Refuted single-site mutants of each reference, with their counterexamples, as DPO preference pairs
        (chosen = reference, rejected = mutant) and SFT repair examples (mutant + counterexample -> reference)."""
        from rtlreward.cli import _load_tasks, console, fail
        from rtlreward.engine import EngineError
        from rtlreward_corpus.load import SUFFIXES
        from rtlreward_corpus.nearmiss import NearMissSettings, near_misses, preference_row, repair_row

        if pairs is None and repairs is None:
            raise fail("say where to write: --pairs FILE and/or --repairs FILE")
        path = Path(dataset)
        if path.is_file() and path.suffix in SUFFIXES and (schema or fields):
            tasks = _read(path, schema, fields)[0]
        else:
            tasks = _load_tasks(dataset)
        if ids:
            wanted = {i for i in ids}
            tasks = [t for t in tasks if t.id in wanted or any(t.id.startswith(w + "_") for w in wanted)]
        if limit is not None:
            tasks = tasks[:limit]
        tasks = [t for t in tasks if t.reference]
        if not tasks:
            raise fail(f"{dataset}: no task with a reference design to mutate")
        settings = NearMissSettings(
            per_task=max(1, per_task), tried=max(1, tried), executor=executor, jobs=jobs
        )
        t0 = time.perf_counter()
        try:
            with _bar("mutants", False) as bar:
                found = near_misses(tasks, settings, progress=_progress(bar))
        except EngineError as exc:
            raise fail(str(exc)) from None
        for dest, make in ((pairs, preference_row), (repairs, repair_row)):
            if dest is None:
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text("".join(json.dumps(make(nm), ensure_ascii=False) + "\n" for nm in found))
        covered = len({nm["task"].id for nm in found})
        console().print(
            f"{len(found)} refuted mutants for {covered} of {len(tasks)} tasks in {time.perf_counter() - t0:.1f} s"
            + "".join(f"; -> {d}" for d in (pairs, repairs) if d is not None),
            markup=False,
        )

    @group.command("curriculum")
    def curriculum(
        corpus: Annotated[Path, typer.Argument(help="A JSONL or Parquet corpus file.")],
        results: Annotated[
            list[Path], typer.Option("--results", "-r", help="Results files of past samples (repeatable).")
        ],
        out: Annotated[
            Path,
            typer.Option("--out", "-o", help="Write the selected rows here, easy to hard (its own schema)."),
        ],
        schema: SchemaOpt = None,
        fields: FieldsOpt = None,
        keep: Annotated[
            str, typer.Option("--keep", help="disagree: tasks whose samples' rewards differ (+ unseen); all.")
        ] = "disagree",
        unseen: Annotated[
            bool, typer.Option("--unseen/--no-unseen", help="Keep tasks no results file has tried.")
        ] = True,
        report: Annotated[Path | None, typer.Option("--report", help="Per-task figures as JSON.")] = None,
    ) -> None:
        """Difficulty from past results (pass rate, reward spread), keep the problems whose GRPO groups disagree,
        and write them easy to hard: a file the trainers read in order."""
        from rtlreward.cli import console, fail
        from rtlreward_corpus.curriculum import schedule, select, task_stats
        from rtlreward_corpus.load import write_rows

        if keep not in ("disagree", "all"):
            raise fail(f"--keep is disagree or all, not {keep!r}")
        tasks, _, _ = _read(corpus, schema, fields)
        try:
            stats = task_stats(results)
        except (OSError, ValueError) as exc:
            raise fail(str(exc)) from None
        picked = select(tasks, stats, keep_unseen=unseen) if keep == "disagree" else list(tasks)
        ordered = schedule(picked, stats)
        write_rows(corpus, [t.metadata["row"] for t in ordered], out, keep_order=True)
        _write_json(report, {"stats": stats, "order": [t.id for t in ordered]})
        tried = sum(1 for t in tasks if t.id in stats)
        flat = sum(1 for t in tasks if t.id in stats and stats[t.id]["spread"] <= 1e-6)
        console().print(
            f"{len(tasks)} tasks, {tried} with results ({flat} whose samples all earned the same reward); "
            f"{len(ordered)} kept, easy to hard -> {out}",
            markup=False,
        )

    @group.command("ab")
    def ab(
        run_a: Annotated[Path, typer.Argument(help="Results JSONL of run A (e.g. --style benchmark).")],
        run_b: Annotated[Path, typer.Argument(help="Results JSONL of run B (e.g. --style spec).")],
        as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
        resamples: Annotated[int, typer.Option("--resamples", help="Bootstrap resamples.")] = 2000,
        seed: Annotated[int, typer.Option("--seed", help="Bootstrap seed.")] = 0,
    ) -> None:
        """B minus A in pass rate and mean reward over the tasks both runs scored, with a 95% paired-bootstrap
        confidence interval: two prompt styles on one model, two checkpoints, two profiles."""
        from rtlreward.cli import console, fail
        from rtlreward_corpus.ab import compare_runs, per_task

        try:
            doc = compare_runs(per_task(run_a), per_task(run_b), resamples=max(100, resamples), seed=seed)
        except (OSError, ValueError) as exc:
            raise fail(str(exc)) from None
        doc = {"a": str(run_a), "b": str(run_b), **doc}
        if as_json:
            typer.echo(json.dumps(doc, indent=2))
            return
        con = console()
        con.print(f"{doc['tasks']} tasks in both runs (A: {run_a.name}, B: {run_b.name})", markup=False)
        for name in ("pass_rate", "reward"):
            d = doc[name]
            lo, hi = d["ci95"]
            con.print(
                f"{name}: A {d['a']:.3f}, B {d['b']:.3f}, B-A {d['diff']:+.3f} (95% CI {lo:+.3f} .. {hi:+.3f})"
                + (" significant" if d["significant"] else ""),
                markup=False,
            )
