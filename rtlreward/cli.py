"""The `rtlreward` command line. Plugins add commands through `rtlreward_register_commands(app)`; several plugins
share a sub-command group with `command_group(app, "train")`.

One name and short flag per concept in every command: `-p/--profile`, `-x/--executor`, `-j/--jobs`, `-o/--out`,
`-c/--completion(s)`, a positional DATASET. Defaults come from the project's `rtlreward.toml` or
`[tool.rtlreward]` (rtlreward.config), then the built-ins. `-h/--help`, `--version`, `-v/-q` and shell completion
(`--install-completion`, `--show-completion`) work everywhere.

Exit codes: 0 success, 1 a command's own failure (e.g. a check failed, nothing scored, `--fail-under` missed),
2 bad usage or bad input (one line on stderr saying what to do).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from rtlreward.completion import complete_dataset, complete_profile

app = typer.Typer(
    name="rtlreward",
    help="Rewards for LLM-written Verilog: format, safety, interface, lint, compile and functional tests.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    # Plain help, wrapped to the terminal: rich's option table cut long option names (`--no-inline-tas…`) at
    # 80 columns, and the help of a command is where a name must be whole.
    rich_markup_mode=None,
)


# What each shared group is for, whichever plugin creates it first (a group's help is its purpose, not its name).
GROUP_HELP = {
    "train": "Train a model with rtlreward as its reward (RL and on-policy distillation with tinker-cookbook).",
    "sandbox": "Where candidate code runs: isolation status, build the Docker sim image.",
    "cache": "The stage-result cache: where it is, how big, clear it.",
    "tasks": "Task health: broken references, weak harnesses, calibrated limits.",
}


def _version_callback(value: bool) -> None:
    if value:
        from rtlreward.version import __version__

        typer.echo(f"rtlreward {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version_callback, is_eager=True, help="Print rtlreward's version and exit."
        ),
    ] = False,
    verbose: Annotated[
        int, typer.Option("--verbose", "-v", count=True, help="More log output (-vv: debug).")
    ] = 0,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Only errors: no progress bars, no info logs.")
    ] = False,
) -> None:
    """Rewards for LLM-written Verilog: format, safety, interface, lint, compile and functional tests."""
    from rtlreward.config import set_verbosity

    set_verbosity(-1 if quiet else verbose)


def project_config() -> Any:
    """The project's rtlreward.toml / [tool.rtlreward] (rtlreward.config); a mistake in it is a usage error."""
    from rtlreward.config import ConfigError, load_config

    try:
        return load_config()
    except ConfigError as exc:
        raise fail(str(exc)) from None


def console(stderr: bool = False) -> Console:
    out = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not stderr and not out.is_terminal:
        out.width = max(out.width, 200)  # piped into a file or a log: do not fold or cut tables at 80 columns
    return out


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print one line saying what went wrong and what to do, and return the Exit to raise."""
    from rich.markup import escape

    # escape(): a message quoting a file or a reply (`[metadata]`, `[7:0]`) is printed as written, not as markup
    console(stderr=True).print(f"[bold red]error:[/] {escape(str(message))}", markup=True)
    return typer.Exit(code)


def command_group(parent: typer.Typer, name: str, help: str = "") -> typer.Typer:
    """The sub-command group `name` under `parent`, created on first use, so several plugins can add commands
    to one group (e.g. `rtlreward train tinker` and `rtlreward train trl`)."""
    # Found among the parent's own groups, not in a table keyed by id(parent): a freed app's id is reused by
    # the next one, which then got the old group and no commands of its own.
    for info in parent.registered_groups:
        if info.name == name and isinstance(info.typer_instance, typer.Typer):
            return info.typer_instance
    text = help or GROUP_HELP.get(name) or f"Commands of the {name} plugins."
    group = typer.Typer(name=name, help=text, no_args_is_help=True, rich_markup_mode=None)
    parent.add_typer(group, name=name)
    return group


def _warn_plain(
    message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    """Warnings as one readable line (a broken plugin prints a warning, never a traceback)."""
    from rich.markup import escape

    console(stderr=True).print(f"[yellow]warning:[/] {escape(str(message))}", markup=True)


def _registry() -> Any:
    from rtlreward.plugins import get_registry

    return get_registry()


def _engine(profile: Any, executor: str, no_cache: bool, jobs: int | None = None) -> Any:
    from rtlreward.engine import Engine, EngineError
    from rtlreward.plugins import PluginError
    from rtlreward.profiles import ProfileError

    try:
        return Engine(profile, executor=executor, cache=not no_cache, jobs=jobs)
    except (ProfileError, EngineError, PluginError) as exc:
        raise fail(str(exc)) from None


def _load_tasks(source: str) -> list[Any]:
    """Tasks from a path or dataset name; a problem with it is a one-line usage error."""
    from rtlreward.integration import load_tasks
    from rtlreward.plugins import PluginError

    try:
        if not Path(source).exists() and source not in _registry().datasets():
            raise fail(f"{source} does not exist: pass a task folder (with task.toml) or a dataset name")
        return load_tasks(source)
    except (ValueError, OSError, KeyError, PluginError) as exc:
        raise fail(str(exc)) from None


def _status_style(status: str) -> str:
    return {
        "passed": "green",
        "failed": "red",
        "skipped": "dim",
        "error": "magenta",
        "timeout": "yellow",
    }.get(status, "")


def _short(text: str, n: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def status_cell(status: str, score: float) -> str:
    """A stage's status and score as two words (`failed 1.00`, `passed 0.80`), so full credit on a failed stage
    or a pass with partial credit reads as what it is."""
    return f"[{_status_style(status)}]{status}[/] {score:.2f}"


def reward_table(reward: Any, title: str = "") -> Table:
    """One row per stage: status, score, time and its first findings (`--feedback` prints all of them)."""
    from rich.markup import escape

    table = Table(title=title or None, show_lines=False)
    table.add_column("stage")
    table.add_column("status")
    table.add_column("score", justify="right")
    table.add_column("time", justify="right")
    table.add_column("diagnostics / feedback", overflow="fold")
    for name, r in reward.stages.items():
        status = r.status.value
        diag = "; ".join(str(d) for d in r.diagnostics[:2])
        if len(r.diagnostics) > 2:
            diag += f"; (+{len(r.diagnostics) - 2} more: --feedback shows all)"
        text = diag or r.feedback
        table.add_row(
            name,
            f"[{_status_style(status)}]{status}[/]" + (" (cached)" if r.cached else ""),
            f"{r.score:.2f}",
            f"{r.duration:.2f}s",
            escape(_short(text, 160)),
        )
    return table


def print_feedback(reward: Any, out: Console) -> None:
    """Every diagnostic of every stage in full (stable code, place, message), then the feedback a model would
    get: nothing cut, long lines wrapped, markup in messages shown as written."""
    from rtlreward.codes import stable_code

    out.print("[bold]Diagnostics[/]")
    any_diag = False
    for name, r in reward.stages.items():
        for d in r.diagnostics:
            any_diag = True
            code = stable_code(name, d.code, d.severity)
            loc = f"{d.file}:{d.line}: " if d.file and d.line else (f"{d.file}: " if d.file else "")
            fields = ", ".join(f"{k}={v}" for k, v in d.fields.items() if v is not None)
            line = f"  {name:<11} {d.severity:<7} {code}  {loc}{d.message}" + (
                f"  ({fields})" if fields else ""
            )
            typer.echo(line)  # plain: never cut, the terminal wraps it
    reported = {d for r in reward.stages.values() for d in r.diagnostics}
    for d in reward.diagnostics:
        if d not in reported:
            any_diag = True
            line = f"  {'answer':<11} {d.severity:<7} {d.code}  {d.message}"
            typer.echo(line)  # plain: never cut, the terminal wraps it
    if not any_diag:
        out.print("  (none)")
    out.print("[bold]Feedback[/] (what a model would be told)")
    typer.echo(reward.feedback() or "  (none)")


@app.command()
def score(
    task_dir: Annotated[
        Path,
        typer.Argument(
            help="A task folder (task.toml), or a dataset source a plugin detects.",
            autocompletion=complete_dataset,
        ),
    ],
    completion: Annotated[
        Path | None, typer.Option("--completion", "-c", help="File with the model's reply ('-' = stdin).")
    ] = None,
    reference: Annotated[
        bool, typer.Option("--reference", help="Score the task's own reference answer (checks the task).")
    ] = False,
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile",
            "-p",
            help="Preset name or profile TOML file (default: shaped, or the config's).",
            autocompletion=complete_profile,
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the reward as JSON (the reward schema, docs/schema.md).")
    ] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Recompute every stage.")] = False,
    executor: Annotated[
        str | None,
        typer.Option(
            "--executor", "-x", help="Where commands run: local, docker (default: local, or the config's)."
        ),
    ] = None,
    task_id: Annotated[
        str | None, typer.Option("--task", help="Which task, when the source holds several.")
    ] = None,
    feedback: Annotated[
        bool,
        typer.Option(
            "--feedback", help="Also print every diagnostic in full and the feedback a model would be given."
        ),
    ] = False,
) -> None:
    """Score one model reply against one task and show every stage.

    Exit code 0 on a PASS verdict, 1 on FAIL, 2 for a usage or input error; with -q (before the command) only
    the exit code and errors."""
    cfg = project_config()
    profile = cfg.pick_profile(profile)
    executor = cfg.pick_executor(executor)
    if (completion is None) == (not reference):
        raise fail("give the reply with --completion FILE (or '-' for stdin), or --reference; not both")
    text = ""
    if completion is None:
        pass
    elif str(completion) == "-":
        text = sys.stdin.read()
    else:
        try:
            text = completion.read_text(errors="replace")
        except OSError as exc:
            raise fail(f"cannot read completion {completion}: {exc.strerror or exc}") from None
    tasks = _load_tasks(str(task_dir))
    if task_id is not None:
        tasks = [t for t in tasks if t.id == task_id]
        if not tasks:
            raise fail(f"no task {task_id!r} in {task_dir}")
    if len(tasks) != 1:
        ids = ", ".join(t.id for t in tasks[:8])
        raise fail(f"{task_dir} holds {len(tasks)} tasks ({ids}...): pick one with --task ID")
    from rtlreward.model import Candidate

    candidate = Candidate(text=text)
    if reference:
        if not tasks[0].reference:
            raise fail(f"task {tasks[0].id} has no reference answer")
        candidate = Candidate(files=dict(tasks[0].reference))
    from rtlreward.config import quiet

    with _engine(profile, executor, no_cache) as engine:
        err = console(stderr=True)
        if quiet() or as_json or not err.is_terminal:
            reward = engine.score(tasks[0], candidate)
        else:  # a harness can take a minute: say what is running rather than sit silent
            with err.status(f"scoring {tasks[0].id} ({', '.join(engine.stages)})"):
                reward = engine.score(tasks[0], candidate)
    # exit 1 on a FAIL verdict, as a failed check (a profile without a verdict stage has none to fail)
    verdict_code = 1 if engine.profile.verdict and not reward.passed else 0
    if as_json:  # the reward schema, feedback included (rtlreward.schema; --feedback adds nothing to it)
        from rtlreward.schema import reward_record

        print(json.dumps(reward_record(reward, legacy=True), indent=2, default=str))
        raise typer.Exit(verdict_code)
    if quiet():  # errors only: the verdict is the exit code
        raise typer.Exit(verdict_code)
    out = console()
    out.print(reward_table(reward, title=f"{reward.task_id} — profile {reward.profile}"))
    prof = engine.profile
    if prof.terms:
        values = prof.term_values(reward.stages)
        parts = [f"{t.name} {t.weight:g}*{values[t.name]:.2f}" for t in prof.terms]
        gate = _gate_note(prof, reward)
        out.print(f"[dim]terms ({prof.combiner}): {' + '.join(parts)}[/]{gate}")
    verdict = "[green]PASS[/]" if reward.passed else "[red]FAIL[/]"
    out.print(f"reward [bold]{reward.total:.3f}[/] / {reward.max_total:.3f}   verdict {verdict}")
    if feedback:
        print_feedback(reward, out)
    raise typer.Exit(verdict_code)


def _gate_note(prof: Any, reward: Any) -> str:
    """Why the total is 0 when a gate did not pass, naming the gate and, when it did not run, the stage that
    stopped it (a failed format skips the safety gate: that is format's failure, not the gate's)."""
    if prof.gates_passed(reward.stages):
        return ""
    notes = []
    for g in prof.gates:
        r = reward.stages.get(g)
        status = str(getattr(getattr(r, "status", None), "value", "not run")) if r is not None else "not run"
        if status == "passed":
            continue
        if status in ("skipped", "not run"):
            cause = next(
                (
                    n
                    for n, x in reward.stages.items()
                    if n != g and x.status.value in ("failed", "error", "timeout")
                ),
                None,
            )
            notes.append(
                f"gate {g} {status}: {cause} {reward.stages[cause].status.value}"
                if cause
                else f"gate {g} {status}"
            )
        else:
            notes.append(f"gate {g} {status}")
    return f"  [red]({'; '.join(notes)}: total 0)[/]"


@app.command()
def plugins(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List every loaded plugin, its hooks, and what it registers."""
    from rtlreward.stage import FILES

    reg = _registry()
    infos = reg.plugins()
    registered: list[Any] = []
    errors: dict[str, str] = dict(reg.load_errors)
    for kind in reg.KINDS:
        try:
            registered.extend(reg._collect(kind).values())
        except Exception as exc:
            errors[f"<{kind}>"] = f"{type(exc).__name__}: {exc}"
    by_plugin: dict[str, list[dict[str, Any]]] = {}
    for r in registered:
        entry: dict[str, Any] = {"kind": r.kind, "name": r.name}
        if r.kind == "stage":
            entry.update(
                version=str(getattr(r.obj, "version", "")),
                requires=list(getattr(r.obj, "requires", ())),
                provides=list(getattr(r.obj, "provides", ())),
                needs=list(getattr(r.obj, "needs", (FILES,))),
            )
        elif r.kind == "trainer":
            entry["description"] = str(getattr(r.obj, "description", ""))
        by_plugin.setdefault(r.plugin, []).append(entry)
    rows = [
        {
            "name": i.name,
            "module": i.module,
            "version": i.version,
            "distribution": i.distribution,
            "hooks": list(i.hooks),
            "registers": by_plugin.get(i.name, []),
        }
        for i in infos
    ]
    if as_json:
        print(json.dumps({"plugins": rows, "errors": errors}, indent=2, default=str))
        return
    table = Table(title="rtlreward plugins")
    for col in ("plugin", "version", "hooks", "registers"):
        table.add_column(col, overflow="fold")
    for row in rows:
        regs = []
        for e in row["registers"]:
            if e["kind"] == "stage":
                req = f" requires {','.join(e['requires'])}" if e["requires"] else ""
                prov = f" provides {','.join(e['provides'])}" if e["provides"] else ""
                regs.append(f"stage {e['name']} v{e['version']}{req}{prov}")
            else:
                regs.append(f"{e['kind']} {e['name']}")
        hooks = ", ".join(h.removeprefix("rtlreward_") for h in row["hooks"])
        table.add_row(f"{row['name']}\n[dim]{row['module']}[/]", row["version"], hooks, "\n".join(regs))
    out = console()
    out.print(table)
    for name, err in errors.items():
        out.print(f"[yellow]failed to load {name}:[/] {err}")


@app.command()
def profiles(
    name: Annotated[str | None, typer.Argument(help="Show this profile in full (TOML-like).")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List the reward profiles (presets and plugin-provided), or show one."""
    from rtlreward.profiles import ProfileError, available_profiles, load_profile

    reg = _registry()
    if name:
        try:
            p = load_profile(name, registry=reg)
        except ProfileError as exc:
            raise fail(str(exc)) from None
        if as_json:
            print(json.dumps(p.to_dict(), indent=2))
            return
        out = console()
        out.print(f"[bold]{p.name}[/] — {p.description}")
        out.print(
            f"combiner: {p.combiner}   stages: {', '.join(p.stages)}   gates: {', '.join(p.gates) or '-'}"
            f"   verdict: {p.verdict or '-'}"
        )
        table = Table()
        for col in ("term", "weight", "stages", "credit"):
            table.add_column(col)
        for t in p.terms:
            table.add_row(
                t.name, f"{t.weight:g}", " AND ".join(t.stages), "partial" if t.partial else "pass/fail"
            )
        out.print(table)
        out.print(f"max weighted total: {p.max_weighted:g}")
        return
    profs = available_profiles(reg)
    if as_json:
        print(json.dumps(profs, indent=2))
        return
    table = Table(title="reward profiles")
    table.add_column("name")
    table.add_column("description")
    for n, desc in profs.items():
        table.add_row(n + (" [dim](default)[/]" if n == "shaped" else ""), desc)
    console().print(table)


def _find_examples(path: Path | None) -> Path:
    if path is not None:
        return path
    for cand in (Path.cwd() / "examples", Path(__file__).resolve().parents[1] / "examples"):
        if cand.is_dir():
            return cand
    raise fail("no examples/ folder found: run from the rtlreward checkout or pass --examples DIR")


@app.command()
def demo(
    examples: Annotated[Path | None, typer.Option("--examples", help="Folder of example tasks.")] = None,
    profile: Annotated[
        str | None,
        typer.Option("--profile", "-p", help="Preset name or profile TOML file (default: shaped)."),
    ] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Recompute every stage.")] = False,
    executor: Annotated[
        str | None, typer.Option("--executor", "-x", help="Where commands run: local, docker.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", help="Replies scored at once (default: CPU cores).")
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds per test run (the forever-loop sample ends on it).")
    ] = 10.0,
    cvdp: Annotated[
        bool,
        typer.Option(
            "--cvdp/--no-cvdp", help="Also score the bundled official CVDP examples (reference, empty)."
        ),
    ] = True,
) -> None:
    """Score the bundled example tasks' sample replies and print one table of rewards."""
    from rtlreward.config import quiet
    from rtlreward.model import Candidate

    cfg = project_config()
    profile, executor, jobs = cfg.pick_profile(profile), cfg.pick_executor(executor), cfg.pick_jobs(jobs)

    root = _find_examples(examples)
    folder_ds = _registry().datasets().get("folder")
    if folder_ds is None:
        raise fail(
            "the `folder` dataset plugin is not loaded (check RTLREWARD_PLUGINS / RTLREWARD_DISABLE_PLUGINS)"
        )
    try:
        tasks = list(folder_ds.load(str(root)))
    except (ValueError, OSError) as exc:
        raise fail(str(exc)) from None
    items: list[tuple[Any, Any]] = []
    labels: list[tuple[str, str]] = []
    for task in tasks:
        folder = Path(task.metadata.get("folder", root / task.id))
        comps = sorted((folder / "completions").glob("*.txt"))
        for i, comp in enumerate(comps):
            items.append((task, Candidate(text=comp.read_text(errors="replace"), sample=i)))
            labels.append((task.id, comp.stem))
    cvdp_ds = _registry().datasets().get("cvdp") if cvdp else None
    if (
        cvdp_ds is not None
    ):  # the official CVDP examples vendored with cvdp_adapter: reference passes, empty fails
        for task in cvdp_ds.load(None):
            if task.reference:
                items.append((task, Candidate(files=dict(task.reference), sample=0)))
                labels.append((task.id, "reference"))
            items.append((task, Candidate(text="", sample=1)))
            labels.append((task.id, "empty"))
    if not items:
        raise fail(f"no completions/*.txt under the tasks in {root}")
    from rtlreward.profiles import ProfileError, load_profile

    try:
        prof = load_profile(profile, registry=_registry())
        if prof.verdict:  # the verdict stage runs the tests: --timeout is its per-command limit
            prof = load_profile(
                {"extends": profile, "stage": {prof.verdict: {"timeout": timeout}}}, registry=_registry()
            )
    except ProfileError as exc:
        raise fail(str(exc)) from None
    with _engine(prof, executor, no_cache, jobs) as engine:
        if as_json or quiet():
            rewards = engine.score_batch(items)
        else:
            from rich.progress import Progress

            with Progress(console=console(stderr=True), transient=True) as bar:
                job = bar.add_task(f"scoring {len(items)} replies", total=None)
                rewards = engine.score_batch(
                    items, progress=lambda d, t: bar.update(job, completed=d, total=t)
                )
        stage_names = list(engine.stages)
    if as_json:
        print(
            json.dumps(
                [
                    {"task": t, "completion": c, **r.to_dict()}
                    for (t, c), r in zip(labels, rewards, strict=True)
                ],
                indent=2,
                default=str,
            )
        )
        return
    p = engine.profile
    table = Table(
        title=f"rtlreward demo — profile {p.name} (max {rewards[0].max_total:g})", title_justify="left"
    )
    table.add_column("task", no_wrap=True)
    table.add_column("reply", no_wrap=True)
    for s in stage_names:
        table.add_column(s, justify="center", no_wrap=True)
    table.add_column("reward", justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for (tid, comp), r in zip(labels, rewards, strict=True):
        cells = []
        for s in stage_names:
            sr = r.stages.get(s)
            if sr is None:
                cells.append("")
                continue
            st = sr.status.value
            cells.append("[dim]skipped[/]" if st == "skipped" else status_cell(st, sr.score))
        verdict = "[green]PASS[/]" if r.passed else "[red]FAIL[/]"
        table.add_row(tid, comp, *cells, f"{r.total:.2f}", verdict)
    out = console()
    out.print(table)
    out.print(
        "[dim]each stage: its status, then its score in [0, 1] (failed 0.50 = failed with half credit; "
        "skipped = a stage it needs did not pass)[/]"
    )


cache_app = command_group(app, "cache")


@cache_app.command("info")
def cache_info(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Where the cache is and how many results it holds, by stage."""
    from rtlreward.cache import ResultCache

    stats = ResultCache().stats()
    if as_json:
        print(json.dumps(stats, indent=2))
        return
    out = console()
    out.print(f"cache: {stats['path']}  ({stats['entries']} results)")
    for stage, n in sorted(stats.get("by_stage", {}).items()):
        out.print(f"  {stage}: {n}")


@cache_app.command("clear")
def cache_clear() -> None:
    """Delete every cached stage result."""
    from rtlreward.cache import ResultCache

    n = ResultCache().clear()
    console().print(f"removed {n} cached results")


def _register_eval_command() -> None:
    """`rtlreward eval DATASET --completions FILE`: bulk, resumable, dataset-agnostic (rtlreward/evaluate/)."""
    from rtlreward.evaluate import register_eval_command

    register_eval_command(app)


_register_eval_command()


def _register_plugin_commands() -> None:
    try:
        _registry().register_commands(app)
    except Exception as exc:  # a broken plugin must not take the CLI down
        console(stderr=True).print(f"[yellow]warning:[/] a plugin failed to add its commands: {exc}")


def main(argv: list[str] | None = None) -> None:
    warnings.showwarning = _warn_plain
    _register_plugin_commands()
    try:
        app(args=argv, prog_name="rtlreward")
    except KeyboardInterrupt:
        raise SystemExit(130) from None


if __name__ == "__main__":  # pragma: no cover
    main()
