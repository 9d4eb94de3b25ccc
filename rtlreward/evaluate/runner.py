"""The scheduling loop of a bulk evaluation: completions in, results appended as they arrive, resume, a progress
bar, and a Summary out.

Nothing here knows about a particular dataset or tool: tasks come from any dataset plugin, rewards from anything
with `score(task, candidate) -> Reward` (normally `rtlreward.engine.Engine`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from rtlreward.evaluate.completions import Completion, Problem, parse_completion, read_completions
from rtlreward.evaluate.results import ResultAppender, read_header, read_results, result_row
from rtlreward.evaluate.settings import check_resume, set_aside
from rtlreward.evaluate.summary import Summary, summarize
from rtlreward.model import Task
from rtlreward.passk import DEFAULT_KS


def warn_stderr(message: str) -> None:
    try:
        from rich.console import Console
        from rich.markup import escape

        Console(stderr=True).print(
            f"[yellow]warning:[/yellow] {escape(str(message))}", highlight=False, markup=True
        )
    except Exception:  # pragma: no cover - rich is a core dependency
        print(f"warning: {message}", file=sys.stderr)


def _warn_many(warn: Callable[[str], None], problems: Sequence[Any], limit: int = 20) -> None:
    for p in problems[:limit]:
        warn(str(p))
    if len(problems) > limit:
        warn(f"... and {len(problems) - limit} more like these")


def evaluate(
    tasks: Iterable[Task],
    completions: Iterable[Completion | Mapping[str, Any]] | str | Path,
    engine: Any,
    out_path: str | Path | None = None,
    jobs: int | None = None,
    progress: bool | Callable[[int, int, Mapping[str, Any]], None] = True,
    *,
    warn: Callable[[str], None] | None = None,
    ks: Iterable[int] = DEFAULT_KS,
    settings: Mapping[str, Any] | None = None,
    rescore: bool = False,
    keep_replies: bool = False,
) -> Summary:
    """Score `completions` against `tasks` with `engine` (anything with `score(task, candidate) -> Reward`).

    `completions`: a JSONL path, or Completion objects / dicts in the JSONL shape. Results are appended to
    `out_path` as they arrive; (id, sample) pairs already there are not scored again. `progress`: True for a rich
    progress bar on stderr, a callable `(done, total, row)`, or False. Returns the Summary of everything in
    `out_path` for these tasks (this run and earlier ones).

    `settings` (`rtlreward.evaluate.settings.run_settings`): recorded in a new results file's header; resuming a
    file whose header differs raises `SettingsMismatch`, unless `rescore` (the old file becomes FILE.prev).
    `keep_replies`: each row also holds its reply. A completions input none of whose ids is a task, or with no
    usable line, raises ValueError (nothing to score is the caller's mistake, not an empty success)."""
    t0 = time.monotonic()
    warn = warn or warn_stderr
    by_id = {t.id: t for t in tasks}
    problems: list[Problem] = []
    if isinstance(completions, (str, Path)):
        items, problems = read_completions(completions)
    else:
        items = []
        for i, c in enumerate(completions, 1):
            if isinstance(c, Completion):
                items.append(c)
                continue
            try:
                items.append(parse_completion(c, i))
            except ValueError as exc:
                problems.append(Problem(i, f"{exc}; skipped"))
    bad_lines = sum(1 for p in problems if p.line)
    _warn_many(warn, problems)

    # Assign sample numbers and drop what cannot be scored.
    next_sample: dict[str, int] = defaultdict(int)
    todo: list[tuple[Task, int, Completion]] = []
    seen: set[tuple[str, int]] = set()
    unknown: list[Problem] = []
    dups: list[Problem] = []
    for c in items:
        task = by_id.get(c.id)
        if task is None:
            unknown.append(Problem(c.line, f"id {c.id!r} is not a task of this dataset selection; skipped"))
            continue
        sample = c.sample if c.sample is not None else next_sample[c.id]
        next_sample[c.id] = max(next_sample[c.id], sample + 1)
        if (c.id, sample) in seen:
            dups.append(Problem(c.line, f"{c.id!r} sample {sample} appears twice; the later one is skipped"))
            continue
        seen.add((c.id, sample))
        todo.append((task, sample, c))
    if unknown:
        _warn_many(warn, unknown)
        warn(
            f"{len(unknown)} completion(s) name ids outside this selection of {len(by_id)} task(s): filtered "
            "out (--filter, --category, --id, --open-source), or not in the dataset (wrong dataset file?)"
        )
    _warn_many(warn, dups)
    if not todo:
        if unknown:
            ids = [c.id for c in items if c.id not in by_id]
            shown = ", ".join(repr(i) for i in ids[:3]) + (", ..." if len(ids) > 3 else "")
            raise ValueError(
                f"none of the {len(unknown)} completion id(s) ({shown}) is a task of this dataset selection "
                f"({len(by_id)} tasks): wrong dataset, or filters that leave them out?"
            )
        if not items:
            raise ValueError(
                "no usable completion: "
                + (
                    f"{bad_lines} line(s) could not be read (see above)"
                    if bad_lines
                    else "the input is empty"
                )
                + ' (expected JSONL lines {"id", "completion"} or {"id", "files": {path: text}})'
            )

    out = Path(out_path) if out_path is not None else None
    done_rows: list[dict[str, Any]] = []
    if out is not None:
        done_rows, result_problems = read_results(out)
        if settings is not None:
            try:
                note = check_resume(out, read_header(out), done_rows, settings)
            except ValueError:
                if not rescore:
                    raise
                prev = set_aside(out)
                warn(f"--rescore: the earlier results are in {prev}; scoring everything again")
                done_rows, result_problems, note = [], [], None
            if note:
                warn(note)
        _warn_many(warn, result_problems)
    # A row counts as done only for the task it was checked against (rows written before task_hash: always).
    current = {tid: t.stimulus_fingerprint()[:16] for tid, t in by_id.items()}
    stale = {
        (r["id"], int(r["sample"]))
        for r in done_rows
        if r.get("task_hash") and r["id"] in current and r["task_hash"] != current[r["id"]]
    }
    if stale:
        warn(
            f"{len(stale)} result(s) in {out} were scored against another version of their task (harness, "
            "interface or files changed): they are scored again"
        )
    done = {(r["id"], int(r["sample"])) for r in done_rows} - stale
    pending = [(t, s, c) for t, s, c in todo if (t.id, s) not in done]
    resumed = len(todo) - len(pending)

    appender = ResultAppender(out, settings)
    new_rows: list[dict[str, Any]] = []
    errors: list[str] = []
    bar = None
    bar_task = None
    callback = progress if callable(progress) else None
    log_line = None
    if progress is True and pending and not _is_terminal(sys.stderr):
        # A log (stderr not a terminal) gets a line per tenth instead of a bar that rich only draws at the end.
        log_line = _tenths(len(pending), time.monotonic())
    elif progress is True and pending:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        bar = Progress(
            SpinnerColumn(),
            TextColumn("[bold]scoring"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[passed]} passed"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        bar_task = bar.add_task("scoring", total=len(pending), passed=0)
        bar.start()
    workers = max(1, int(jobs or os.cpu_count() or 1))
    passed = 0

    written: set[tuple[str, int]] = set()

    def record(task: Task, sample: int, row: dict[str, Any] | None, error: BaseException | None) -> None:
        """One outcome in: a row appended (at most one per (id, sample), whatever retried underneath), or the
        error reported. Only the main thread calls this, so only it writes the file."""
        nonlocal passed
        if error is not None:  # the engine broke on this one: report, do not record
            errors.append(f"{task.id} sample {sample}: {type(error).__name__}: {error}")
            warn(
                f"engine error on {task.id} sample {sample} (not recorded; rerun retries it): "
                f"{type(error).__name__}: {error}"
            )
        elif (task.id, sample) in written:
            return
        else:
            assert row is not None
            written.add((task.id, sample))
            appender.write(row)
            new_rows.append(row)
            passed += bool(row["passed"])
        if bar is not None:
            bar.update(bar_task, advance=1, passed=passed)
        if callback is not None and row is not None and error is None:
            callback(len(new_rows) + len(errors), len(pending), row)
        if log_line is not None:
            log_line(len(new_rows) + len(errors), len(pending), row or {})

    def score(task: Task, sample: int, c: Completion) -> dict[str, Any]:
        started = time.monotonic()
        candidate = c.candidate(sample)
        reward = engine.score(task, candidate)
        row = result_row(task, sample, reward, candidate if keep_replies else None)
        row["seconds"] = round(time.monotonic() - started, 3)
        return row

    # An engine that scores whole candidates elsewhere (the ray executor) streams results as they finish, with
    # as many in flight as its cluster takes; the thread pool below would cap that at this machine's cores.
    stream = getattr(getattr(engine, "remote", None), "stream", None)
    try:
        if callable(stream):
            submitted: dict[int, float] = {}

            def feed() -> Any:
                for i, (task, sample, c) in enumerate(pending):
                    submitted[i] = time.monotonic()
                    yield task, c.candidate(sample)

            # closing(): on Ctrl-C or an error the stream cancels what is still running on the cluster
            with contextlib.closing(stream(feed(), window=jobs)) as outcomes:
                for i, outcome in outcomes:
                    task, sample, c = pending[i]
                    if isinstance(outcome, BaseException):
                        record(task, sample, None, outcome)
                        continue
                    row = result_row(task, sample, outcome, c.candidate(sample) if keep_replies else None)
                    row["seconds"] = round(time.monotonic() - submitted.pop(i, time.monotonic()), 3)
                    record(task, sample, row, None)
        else:
            it = iter(pending)
            inflight: dict[Future, tuple[Task, int, Completion]] = {}
            pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rtlreward-eval")
            try:
                while True:
                    while len(inflight) < 2 * workers:
                        nxt = next(it, None)
                        if nxt is None:
                            break
                        inflight[pool.submit(score, *nxt)] = nxt
                    if not inflight:
                        break
                    finished, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
                    for fut in finished:
                        task, sample, c = inflight.pop(fut)
                        try:
                            row = fut.result()
                        except Exception as exc:
                            record(task, sample, None, exc)
                        else:
                            record(task, sample, row, None)
            except BaseException:
                # Interrupted: what is written stays written; do not wait for the running scores (a rerun redoes
                # them), and only the main thread ever writes, so nothing lands in the file after this.
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            pool.shutdown(wait=True)
    finally:
        appender.close()
        if bar is not None:
            bar.stop()

    return summarize(
        by_id,
        [*done_rows, *new_rows],
        ks=ks,
        scored=len(new_rows),
        resumed=resumed,
        unknown_ids=len(unknown),
        bad_lines=bad_lines,
        duplicates=len(dups),
        errors=len(errors),
        duration=time.monotonic() - t0,
        out_path=str(out) if out else None,
        problems=tuple(str(p) for p in problems) + tuple(errors),
    )


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _tenths(total: int, start: float) -> Callable[[int, int, Mapping[str, Any]], None]:
    """A progress callback for logs: one line on stderr each time another tenth of `total` is done."""
    state = {"shown": 0, "passed": 0}

    def line(done: int, _total: int, row: Mapping[str, Any]) -> None:
        state["passed"] += bool(row.get("passed"))
        tenth = 10 * done // max(1, total)
        if tenth > state["shown"] or done == total:
            state["shown"] = tenth
            elapsed = time.monotonic() - start
            print(
                f"scoring: {done}/{total} ({100 * done // max(1, total)}%), {state['passed']} passed, "
                f"{elapsed:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    return line
