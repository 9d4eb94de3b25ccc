"""Command-line glue: `rtlreward eval DATASET` and what dataset front doors (`rtlreward cvdp eval`) share with it.

A dataset-specific eval command is the generic one with its dataset's filters as options: it calls
`run_eval_command` with the dataset's name and a dict of filters, so every eval command reads, resumes, scores
and reports the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rtlreward.evaluate.completions import Problem, empty_completions, reference_completions
from rtlreward.evaluate.runner import evaluate, warn_stderr
from rtlreward.evaluate.summary import Summary, render_summary
from rtlreward.model import Task


def dataset_identity(dataset: str, source: str | Path | None = None) -> str:
    """What a run's dataset is, for its results header and file name: a registered name, with `:SOURCE` when a
    source is given (`cvdp:/data/cvdp_open_codegen.jsonl`), or a path made absolute, so the same data reached by
    another relative path is the same dataset and two files of one benchmark are not."""
    if source is not None:
        src = Path(source)
        return f"{dataset}:{src.resolve() if src.exists() else source}"
    p = Path(dataset)
    return str(p.resolve()) if p.exists() else dataset


def _label(name: str | Path | None) -> str:
    """A dataset or profile as a file-name part: a registered name as it is, a path by its file or folder stem
    (for `name:SOURCE`, the source's)."""
    if name is None:
        return "-"
    text = str(name)
    if ":" in text and not Path(text).exists():
        text = text.split(":", 1)[1]
    if "/" in text or text.endswith((".jsonl", ".json", ".toml")):
        name = Path(text.rstrip("/")).name
        for suffix in (".jsonl", ".json", ".toml"):
            name = name.removesuffix(suffix)
        text = name
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", text) or "-"


def default_out_path(
    completions: str | Path | None,
    *,
    reference: bool = False,
    empty: bool = False,
    dataset: str | Path | None = None,
    profile: str | Path | None = None,
    out_dir: str | Path | None = None,
) -> Path:
    """Where results go when `--out` is not given: `<out_dir>/<completions stem>.<dataset>.<profile>.jsonl`
    (a profile file by the `name` it declares)
    (`reference` / `empty` for the stem with --reference / --empty), so rerunning the same command resumes and
    another dataset or profile never lands in the same file. `out_dir`: `results` in the working folder unless
    the project config (`output_dir`) or `--out-dir` says otherwise."""
    if completions is not None:
        name = Path(completions).name
        stem = name[: -len(".jsonl")] if name.endswith(".jsonl") else name
    else:
        stem = "reference" if reference else "empty"
    folder = Path(out_dir) if out_dir is not None else Path("results")
    return folder / f"{stem}.{_label(dataset)}.{_label(_profile_name(profile))}.jsonl"


def _profile_name(profile: str | Path | None) -> str | Path | None:
    """A profile file by the name it declares (`name = ...`, what the rows record as their profile), so the
    default results file says which profile it holds; the file's stem when it declares none."""
    if profile is None:
        return None
    path = Path(str(profile))
    if path.suffix != ".toml" or not path.is_file():
        return profile
    import tomllib

    try:
        name = tomllib.loads(path.read_text(encoding="utf-8")).get("name")
    except (OSError, ValueError):
        return profile
    return name.strip() if isinstance(name, str) and name.strip() else profile


def check_completions_file(path: str | Path) -> None:
    """A completions path a user can get wrong, as one clear ValueError: missing, a folder, empty, binary."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f'{p}: no such completions file (JSONL lines {{"id", "completion"}})')
    if p.is_dir():
        raise ValueError(f"{p} is a folder: give the completions JSONL file (-c FILE)")
    try:
        with p.open("rb") as fh:
            head = fh.read(1 << 16)
    except OSError as exc:
        raise ValueError(f"cannot read {p}: {exc.strerror or exc}") from None
    if not head.strip():
        raise ValueError(f'{p} is empty: nothing to score (expected JSONL lines {{"id", "completion"}})')
    if b"\x00" in head:
        raise ValueError(f"{p} holds NUL bytes (a binary file?): give the completions JSONL file")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        cut = len(head) == 1 << 16 and exc.start >= len(head) - 3  # a character cut at the end of the sample
        if not cut:
            raise ValueError(
                f"{p} is not UTF-8 text (a binary file?): give the completions JSONL file"
            ) from None


def check_out_path(path: Path) -> None:
    if path.is_dir():
        raise ValueError(f"{path} is a folder: give the results file to write (-o FILE), or --out-dir {path}")


def run_eval(
    tasks: Sequence[Task],
    *,
    completions: str | Path | None = None,
    reference: bool = False,
    empty: bool = False,
    profile: str = "shaped",
    executor: str = "local",
    out: str | Path | None = None,
    jobs: int | None = None,
    progress: bool = True,
    engine: Any = None,
    console: Any = None,
    ray_address: str | None = None,
    dataset: str | None = None,
    out_dir: str | Path | None = None,
    rescore: bool = False,
    keep_replies: bool = False,
) -> Summary:
    """What the eval commands do: pick the completions (a file, the references, or empty answers), build an
    engine, evaluate with resume, print the summary tables. `ray_address`: the Ray cluster of `--executor ray`
    (default: Ray's own lookup, `RAY_ADDRESS` or the cluster started on this machine). `dataset`: the dataset's
    name, recorded in the results header and part of the default results file name; `rescore`, `keep_replies`:
    see `evaluate`."""
    from rich.console import Console

    console = console or Console()
    chosen = sum([completions is not None, bool(reference), bool(empty)])
    if chosen != 1:
        raise ValueError("give exactly one of --completions FILE, --reference or --empty")
    if not tasks:
        raise ValueError("the dataset selection has no tasks; check the path and the filters")
    extra: list[Problem] = []
    if reference:
        items, extra = reference_completions(tasks)
        source: Any = items
    elif empty:
        source = empty_completions(tasks)
    else:
        check_completions_file(completions)  # type: ignore[arg-type]
        source = completions
    for p in extra:
        warn_stderr(str(p))
    out_path = (
        Path(out)
        if out
        else default_out_path(
            completions, reference=reference, empty=empty, dataset=dataset, profile=profile, out_dir=out_dir
        )
    )
    check_out_path(out_path)
    own_engine = engine is None
    if own_engine:
        from rtlreward.engine import Engine

        engine = Engine(
            profile=profile, executor=executor, jobs=jobs, **executor_settings(executor, ray_address)
        )
    try:
        from rtlreward.config import quiet
        from rtlreward.evaluate.completions import producer
        from rtlreward.evaluate.settings import run_settings

        settings = run_settings(
            engine,
            dataset=dataset,
            completions=str(completions)
            if completions is not None
            else ("reference" if reference else "empty"),
            # who produced the replies (model, sampler settings), so two runs tell apart without a --title
            **(producer(completions) if completions is not None else {}),
        )
        summary = evaluate(
            tasks,
            source,
            engine,
            out_path=out_path,
            jobs=jobs,
            progress=progress and not quiet(),
            settings=settings,
            rescore=rescore,
            keep_replies=keep_replies,
        )
    finally:
        if own_engine and hasattr(engine, "close"):
            engine.close()
    render_summary(summary, console)
    return summary


def executor_settings(executor: str, ray_address: str | None) -> dict[str, Any]:
    """Engine keyword arguments for the executor options the eval commands take (`--ray-address`)."""
    if ray_address is None:
        return {}
    if executor != "ray":
        raise ValueError(f"--ray-address is for --executor ray, not {executor!r}; add --executor ray")
    return {"executor_options": {"address": ray_address}}


def parse_filters(items: Iterable[str] | None) -> dict[str, Any]:
    """`--filter key=value` pairs as dataset.load keyword arguments (true/false and integers converted)."""
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--filter {item!r}: expected key=value (e.g. --filter category=cid003)")
        v: Any = value.strip()
        if v.lower() in ("true", "yes", "1", "false", "no", "0") and key.strip() not in ("id", "category"):
            v = v.lower() in ("true", "yes", "1")
        elif v.isdigit():
            v = int(v)
        out[key.strip().replace("-", "_")] = v
    return out


def run_eval_command(
    dataset: str,
    *,
    source: str | None = None,
    filters: Mapping[str, Any] | Iterable[str] | None = None,
    completions: str | Path | None = None,
    reference: bool = False,
    empty: bool = False,
    profile: str | None = None,
    executor: str | None = None,
    out: str | Path | None = None,
    jobs: int | None = None,
    summary_json: str | Path | None = None,
    explain_empty: Callable[[], str | None] | None = None,
    health: str | Path | None = None,
    skip_broken: bool = False,
    ray_address: str | None = None,
    out_dir: str | Path | None = None,
    rescore: bool = False,
    keep_replies: bool = False,
    fail_under: float | None = None,
    fail_under_reward: float | None = None,
) -> Summary:
    """The body of every eval command: load the dataset's tasks (`filters`: the loader's keyword arguments, or
    `key=value` strings as `--filter` gives them), score, print the summary, write `summary_json`.

    A user's mistake (bad filter, unknown dataset, missing file) prints `error: ...` and exits 2; Ctrl-C says the
    results so far are kept and exits 130. `explain_empty`, when the selection has no tasks, may return a better
    message than the generic one (CVDP: every selected record needs Cadence Xcelium). `health`: a report of
    `rtlreward tasks check`; its calibrated time limits apply, and with `skip_broken` the tasks whose reference
    fails are left out (one line each on stderr).

    `profile`, `executor`, `jobs` and `out_dir` left None take the project config's (rtlreward.config), then the
    built-in defaults. Exit codes CI can trust: 1 when nothing was scored for the selection, when engine errors
    left completions unscored, or when the pass rate is below `fail_under` / the mean reward below
    `fail_under_reward`."""
    import typer

    from rtlreward.config import ConfigError, load_config
    from rtlreward.engine import EngineError
    from rtlreward.integration import load_tasks
    from rtlreward.plugins import PluginError

    try:
        cfg = load_config()
        profile, executor, jobs = cfg.pick_profile(profile), cfg.pick_executor(executor), cfg.pick_jobs(jobs)
        out_dir = out_dir if out_dir is not None else cfg.pick_output_dir()
        kwargs = dict(filters) if isinstance(filters, Mapping) else parse_filters(filters)
        tasks = load_tasks(dataset, source, **kwargs)
        if health is not None:
            tasks = apply_health(tasks, health, skip_broken=skip_broken)
        if not tasks and explain_empty is not None:
            why = explain_empty()
            if why:
                raise ValueError(why)
        summary = run_eval(
            tasks,
            completions=completions,
            reference=reference,
            empty=empty,
            profile=profile,
            executor=executor,
            out=out,
            jobs=jobs,
            ray_address=ray_address,
            dataset=dataset_identity(dataset, source),
            out_dir=out_dir,
            rescore=rescore,
            keep_replies=keep_replies,
        )
    except (ValueError, ConfigError, EngineError, PluginError, OSError) as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        typer.secho(
            "interrupted: results so far are saved; waiting for the running evaluations to stop (their time "
            "limits bound this; Ctrl-C again abandons them). Rerun the same command to resume.",
            err=True,
        )
        raise typer.Exit(130) from None
    if summary_json:
        Path(summary_json).write_text(json.dumps(summary.to_dict(), indent=2))
    failures = exit_failures(summary, fail_under=fail_under, fail_under_reward=fail_under_reward)
    for line in failures:
        typer.secho(f"error: {line}", fg="red", err=True)
    if failures:
        raise typer.Exit(1)
    return summary


def exit_failures(
    summary: Summary, *, fail_under: float | None = None, fail_under_reward: float | None = None
) -> list[str]:
    """Why an eval run must exit 1 (empty: it exits 0): nothing scored, engine errors, a threshold missed."""
    out: list[str] = []
    if not summary.results:
        out.append("nothing was scored for this selection (no result rows): see the warnings above")
    if summary.errors:
        out.append(
            f"{summary.errors} completion(s) hit an engine error and have no result; rerun to retry them"
        )
    if fail_under is not None and summary.results and (summary.pass_rate or 0.0) < fail_under:
        out.append(f"pass rate {summary.pass_rate:.3f} is below --fail-under {fail_under:g}")
    if fail_under_reward is not None and summary.results and (summary.mean_reward or 0.0) < fail_under_reward:
        out.append(
            f"mean reward {summary.mean_reward:.3f} is below --fail-under-reward {fail_under_reward:g}"
        )
    return out


def apply_health(tasks: list[Any], path: str | Path, *, skip_broken: bool) -> list[Any]:
    """Calibrated limits from a task health report, and (optionally) its broken tasks left out, each named on
    stderr so a run never shrinks silently."""
    import typer

    from rtlreward.health import load_report

    report = load_report(path)
    if skip_broken:
        tasks, skipped = report.select(tasks)
        for task, why in skipped:
            typer.secho(f"skipped {task.id}: {why}", fg="yellow", err=True)
    return report.calibrate(tasks)


def register_eval_command(app: Any, name: str = "eval") -> None:
    """Add the dataset-agnostic `rtlreward eval DATASET --completions FILE` command to a typer app."""
    import typer

    from rtlreward.completion import complete_dataset, complete_profile

    @app.command(name)
    def eval_command(
        dataset: str = typer.Argument(
            ...,
            help="A registered dataset name (cvdp, verilog-eval, ...) or a path a dataset plugin recognises.",
            autocompletion=complete_dataset,
        ),
        completions: Path = typer.Option(
            None,
            "--completions",
            "-c",
            help='JSONL: {"id", "completion"} or {"id", "files": {path: text}} per line.',
        ),
        source: str = typer.Option(None, "--source", help="Where a named dataset reads its files from."),
        profile: str = typer.Option(
            None,
            "--profile",
            "-p",
            help="Reward profile name or TOML file (default: shaped, or the config's).",
            autocompletion=complete_profile,
        ),
        executor: str = typer.Option(
            None, "--executor", "-x", help="local | docker | ray (default: local, or the config's)."
        ),
        ray_address: str = typer.Option(
            None,
            "--ray-address",
            help="With --executor ray: the cluster's head, HOST:PORT (default: RAY_ADDRESS, or the cluster "
            "`ray start` began on this machine, or a new local one).",
        ),
        out: Path = typer.Option(
            None,
            "--out",
            "-o",
            help="Results JSONL (appended; rerun with it to resume). Default: "
            "<out-dir>/<completions stem>.<dataset>.<profile>.jsonl.",
        ),
        out_dir: Path = typer.Option(
            None, "--out-dir", help="Folder of the default results file (default: results, or the config's)."
        ),
        rescore: bool = typer.Option(
            False,
            "--rescore",
            help="The results file was scored under other settings: keep it as FILE.prev and score everything "
            "again (default: refuse).",
        ),
        keep_replies: bool = typer.Option(
            False, "--keep-replies", help="Write each reply into its result row (for reports)."
        ),
        fail_under: float = typer.Option(
            None, "--fail-under", help="Exit 1 when the pass rate (0..1) is below this (CI)."
        ),
        fail_under_reward: float = typer.Option(
            None, "--fail-under-reward", help="Exit 1 when the mean reward is below this (CI)."
        ),
        jobs: int = typer.Option(
            None, "--jobs", "-j", help="Completions scored at once (default: CPU cores)."
        ),
        reference: bool = typer.Option(
            False, "--reference", help="Score the tasks' own reference solutions."
        ),
        empty: bool = typer.Option(False, "--empty", help="Score an empty answer per task (sanity check)."),
        filters: list[str] = typer.Option(
            None,
            "--filter",
            "-f",
            help="key=value passed to the dataset loader (repeatable), e.g. category=cid003.",
        ),
        json_out: Path = typer.Option(None, "--summary-json", help="Also write the summary as JSON here."),
        health: Path = typer.Option(
            None, "--health", help="A `rtlreward tasks check --out` report: use its calibrated time limits."
        ),
        skip_broken: bool = typer.Option(
            False,
            "--skip-broken",
            help="With --health: leave out tasks whose reference fails (named on stderr).",
        ),
    ) -> None:
        """Score a file of model completions (or the references) against a dataset; resumable."""
        run_eval_command(
            dataset,
            source=source,
            filters=filters,
            completions=completions,
            reference=reference,
            empty=empty,
            profile=profile,
            executor=executor,
            out=out,
            jobs=jobs,
            summary_json=json_out,
            health=health,
            skip_broken=skip_broken,
            ray_address=ray_address,
            out_dir=out_dir,
            rescore=rescore,
            keep_replies=keep_replies,
            fail_under=fail_under,
            fail_under_reward=fail_under_reward,
        )
