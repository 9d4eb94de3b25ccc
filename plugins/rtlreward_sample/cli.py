"""`rtlreward prompts DATASET` and `rtlreward sample DATASET --model M`.

`prompts` writes the chat of every task as the benchmark builds it; `sample` sends those chats to a model and
writes a completions file `rtlreward eval` scores. Together with `rtlreward report`:

    rtlreward sample verilog-eval --model M --base-url URL -n 5 --out c.jsonl
    rtlreward eval verilog-eval --completions c.jsonl --out r.jsonl
    rtlreward report r.jsonl --out report.html
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Annotated, Any

import typer

DEFAULT_BASE_URL = "http://localhost:8000/v1"  # vLLM's and SGLang's OpenAI server (SGLang: port 30000)
DEFAULT_KEY_ENV = "OPENAI_API_KEY"


def _fail(message: str, code: int = 2) -> typer.Exit:
    """One plain line on stderr (no rich markup: a message may hold brackets) and the Exit to raise."""
    typer.secho(f"error: {message}", fg="red", err=True)
    return typer.Exit(code)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.").lower() or "model"


def _output_dir() -> Path:
    """The project's output folder (`output_dir` of rtlreward.toml / [tool.rtlreward]; default `results`)."""
    from rtlreward.config import ConfigError, load_config

    try:
        return load_config().pick_output_dir()
    except ConfigError as exc:
        raise _fail(str(exc)) from None


def _quiet() -> bool:
    """`rtlreward -q`: no progress bar."""
    from rtlreward.config import quiet

    return quiet()


def _selection(dataset: str, source: str | None, filters: list[str] | None, limit: int | None) -> Any:
    from rtlreward.evaluate.command import parse_filters
    from rtlreward.plugins import PluginError
    from rtlreward.prompts import load_selection

    try:
        return load_selection(dataset, source, parse_filters(filters), limit)
    except (ValueError, OSError, KeyError, PluginError) as exc:
        raise _fail(str(exc)) from None


DatasetArg = Annotated[
    str,
    typer.Argument(
        help="A registered dataset (cvdp, verilog-eval, rtllm, ...) or a path a dataset plugin recognises.",
        show_default=False,
    ),
]
SourceOpt = Annotated[
    str | None, typer.Option("--source", help="Where a named dataset reads its files from.")
]
FilterOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--filter", "-f", help="key=value passed to the dataset loader (repeatable), e.g. ids=Prob001_zero."
    ),
]
StyleOpt = Annotated[
    str,
    typer.Option(
        "--style",
        help="The dataset's prompt style (CVDP: copilot | agentic); auto: the style the task was loaded with.",
    ),
]
LimitOpt = Annotated[int | None, typer.Option("--limit", help="Only the first N tasks of the selection.")]


def prompts_command(
    dataset: DatasetArg,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help='JSONL of {"id", "messages", "expected_files"}; default: stdout.'),
    ] = None,
    source: SourceOpt = None,
    filters: FilterOpt = None,
    style: StyleOpt = "auto",
    limit: LimitOpt = None,
) -> None:
    """Write the chat of every task, as the benchmark builds it, one JSON line per task."""
    from rtlreward.prompts import write_prompts

    ds, tasks = _selection(dataset, source, filters, limit)
    try:
        if out is None or str(out) == "-":
            import sys

            write_prompts(tasks, sys.stdout, style, ds)
            return
        if out.is_dir():
            raise _fail(f"--out {out} is a folder: give a file name, e.g. {out / 'prompts.jsonl'}")
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w", encoding="utf-8") as fh:
            n = write_prompts(tasks, fh, style, ds)
    except (ValueError, KeyError) as exc:  # a style the dataset does not know
        raise _fail(str(exc)) from None
    typer.echo(f"{n} prompts written to {out}", err=True)


def sample_command(
    dataset: DatasetArg,
    model: Annotated[
        str,
        typer.Option(
            "--model",
            "-m",
            help="The model name the endpoint serves; with --backend tinker a base model or a tinker:// path.",
            show_default=False,
        ),
    ],
    backend: Annotated[
        str, typer.Option("--backend", help="openai (any OpenAI-compatible server) | tinker.")
    ] = "openai",
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            help=f"The server's URL up to /v1 (default: $OPENAI_BASE_URL, else {DEFAULT_BASE_URL}); with "
            "--backend tinker, the Tinker service (default: the SDK's).",
        ),
    ] = None,
    api_key_env: Annotated[
        str | None,
        typer.Option(
            "--api-key-env",
            help=f"The environment variable holding the API key (default {DEFAULT_KEY_ENV}, optional for a "
            "local server; named here, it must be set).",
        ),
    ] = None,
    n: Annotated[int, typer.Option("-n", "--samples", help="Samples per task (pass@k needs k or more).")] = 1,
    temperature: Annotated[
        float | None,
        typer.Option("--temperature", "-t", help="Default: 0 (greedy) for one sample, 0.8 for several."),
    ] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Tokens per reply.")] = 4096,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Requests in flight at once.")] = 8,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds one request may take.")] = 600.0,
    retries: Annotated[
        int,
        typer.Option(
            "--retries", help="Retries of a request on 429, 5xx, a timeout or a dropped connection."
        ),
    ] = 5,
    seed: Annotated[
        int | None,
        typer.Option("--seed", help="Sample i is asked with seed SEED+i (servers that honour it)."),
    ] = None,
    extra_body: Annotated[
        str | None,
        typer.Option(
            "--extra-body",
            help='JSON merged into every request, e.g. \'{"chat_template_kwargs": {"enable_thinking": false}}\'.',
        ),
    ] = None,
    renderer: Annotated[
        str | None,
        typer.Option("--renderer", help="--backend tinker: the cookbook renderer (default: the model's)."),
    ] = None,
    base_model: Annotated[
        str | None,
        typer.Option(
            "--base-model", help="--backend tinker with a tinker:// path: its base model (tokenizer)."
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Completions JSONL (appended; rerun to resume). Default: DATASET-MODEL.completions.jsonl in the "
            "project's output folder (results/).",
        ),
    ] = None,
    source: SourceOpt = None,
    filters: FilterOpt = None,
    style: StyleOpt = "auto",
    limit: LimitOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the settings and the first request; send nothing.")
    ] = False,
) -> None:
    """Sample a model on a dataset's prompts into a completions file for `rtlreward eval`; resumable."""
    from rtlreward.integration import resolve_dataset
    from rtlreward_sample.run import plan
    from rtlreward_sample.store import CompletionsFile, ResumeMismatch

    if backend not in ("openai", "tinker"):
        raise _fail(f"--backend {backend!r}: use openai (any OpenAI-compatible server) or tinker")
    for name, value in (("-n", n), ("--max-tokens", max_tokens), ("--concurrency", concurrency)):
        if value < 1:
            raise _fail(f"{name} must be at least 1, not {value}")
    if timeout <= 0 or retries < 0:
        raise _fail("--timeout must be positive and --retries 0 or more")
    extra: dict[str, Any] = {}
    if extra_body:
        try:
            extra = json.loads(extra_body)
        except json.JSONDecodeError as exc:
            raise _fail(f"--extra-body is not JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(extra, dict):
            raise _fail("--extra-body must be a JSON object, e.g. '{\"top_p\": 0.95}'")
        if backend == "tinker":
            raise _fail("--extra-body is for --backend openai")
    default_temperature = temperature is None
    if temperature is None:
        temperature = 0.0 if n == 1 else 0.8
    ds, tasks = _selection(dataset, source, filters, limit)
    if not tasks:
        raise _fail("the dataset selection has no tasks; check the dataset, --source and --filter")
    if out is None:
        try:
            name = resolve_dataset(dataset)[0] if not Path(dataset).exists() else Path(dataset).stem
        except ValueError:
            name = Path(dataset).stem
        out = _output_dir() / f"{_slug(name)}-{_slug(model.rsplit('/', 1)[-1])}.completions.jsonl"
    sampler = {
        "backend": backend,
        "model": model,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "style": style,
        "seed": seed,
    }
    if extra:
        sampler["extra_body"] = extra
    store = CompletionsFile(out)
    try:
        existing = store.scan(repair=not dry_run)
        store.check_settings(existing, sampler)
    except ResumeMismatch as exc:
        hint = ""
        if default_temperature and exc.diff.get("temperature"):
            old = exc.diff["temperature"][0]
            hint = (
                f" (the default temperature follows -n: 0 for one sample, 0.8 for several; to add samples to "
                f"this file, rerun with --temperature {old:g})"
            )
        raise _fail(f"{out}: {exc}{hint}") from None
    except ValueError as exc:
        raise _fail(f"{out}: {exc}") from None
    except OSError as exc:
        raise _fail(f"cannot read {out}: {exc.strerror or exc}") from None
    try:
        jobs, already = plan(tasks, n, existing.done, style=style, dataset=ds, batch=backend == "tinker")
    except (ValueError, KeyError) as exc:
        raise _fail(str(exc)) from None
    key_env = api_key_env or DEFAULT_KEY_ENV
    api_key = os.environ.get(key_env, "").strip() or None
    if backend == "openai":
        url = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    else:
        url = base_url
    todo = sum(len(j.samples) for j in jobs)
    if dry_run:
        from rtlreward_sample.backends import OpenAIChat, chat_url

        settings: dict[str, Any] = {
            "dataset": dataset,
            "tasks": len(tasks),
            "samples_per_task": n,
            "to_sample": todo,
            "already_in_file": already,
            "out": str(out),
            **sampler,
            "concurrency": concurrency,
        }
        if backend == "openai":
            settings.update(
                url=chat_url(url),
                api_key=f"${key_env} is {'set' if api_key else 'not set'}",
                timeout=timeout,
                retries=retries,
            )
            if jobs:
                probe = OpenAIChat(url, model, temperature=temperature, max_tokens=max_tokens, seed=seed)
                probe.extra_body = extra
                settings["first_request"] = probe.body(jobs[0].messages, jobs[0].samples[0])
        else:
            if renderer is None and not model.startswith("tinker://"):
                try:
                    from rtlreward_sample.backends import recommended_renderer

                    renderer = recommended_renderer(base_model or model)
                except ImportError:  # tinker-cookbook not installed: the run itself will say so
                    pass
            settings.update(
                base_url=url,
                renderer=renderer,
                base_model=base_model,
                tinker_api_key="$TINKER_API_KEY is "
                + ("set" if os.environ.get("TINKER_API_KEY") else "not set"),
            )
            if jobs:
                settings["first_messages"] = jobs[0].messages
        typer.echo(json.dumps(settings, indent=2, ensure_ascii=False))
        return
    if existing.dropped_tail:
        typer.secho(
            f"{out}: removed a cut-off last line ({existing.dropped_tail} bytes) left by an interrupted run",
            fg="yellow",
            err=True,
        )
    if not jobs:
        typer.echo(f"nothing to sample: {out} already holds {already} samples ({len(tasks)} tasks x {n})")
        _next_step(dataset, out)
        return
    if backend == "openai":
        if api_key_env and not api_key:
            raise _fail(f"${api_key_env} is not set: export the API key, or leave out --api-key-env")
        from rtlreward_sample.backends import OpenAIChat

        chat: Any = OpenAIChat(
            url,
            model,
            api_key=api_key,
            api_key_env=key_env,
            temperature=temperature,
            max_tokens=max_tokens,
            seed=seed,
            extra_body=extra,
            timeout=timeout,
            retries=retries,
            concurrency=concurrency,
        )
        translate = None
    else:
        chat, translate = _tinker_backend(model, url, renderer, base_model, temperature, max_tokens, seed)
    outcome = _run(chat, jobs, store, model, sampler, concurrency, translate, todo)
    outcome.already = already
    _report(outcome, dataset, out, n, len(tasks))


def _tinker_backend(
    model: str,
    base_url: str | None,
    renderer: str | None,
    base_model: str | None,
    temperature: float,
    max_tokens: int,
    seed: int | None,
) -> tuple[Any, Any]:
    """The Tinker backend and its error translation; a missing key or SDK is one line, exit 2."""
    if not os.environ.get("TINKER_API_KEY", "").strip():
        raise _fail(
            "TINKER_API_KEY is not set: export your Tinker API key (or use --dry-run to check the settings)"
        )
    try:
        import tinker
        import tinker_cookbook  # noqa: F401
    except ImportError:
        raise _fail(
            "--backend tinker needs tinker and tinker-cookbook: pip install 'rtlreward[tinker]'"
        ) from None
    from rtlreward_sample.backends import EndpointError, RequestFailed, TinkerChat

    def translate(exc: BaseException) -> BaseException | None:
        fatal = tuple(
            getattr(tinker, n)
            for n in ("AuthenticationError", "PermissionDeniedError", "APIConnectionError", "NotFoundError")
            if hasattr(tinker, n)
        )
        if isinstance(exc, fatal):
            return EndpointError(f"Tinker: {exc}; check TINKER_API_KEY, --model and the network")
        if isinstance(exc, getattr(tinker, "TinkerError", ())):
            return RequestFailed(f"Tinker: {exc}")
        return None

    chat = TinkerChat(
        model,
        base_url=base_url,
        renderer_name=renderer,
        base_model=base_model,
        temperature=temperature,
        max_tokens=max_tokens,
        seed=seed,
    )
    return chat, translate


def _run(
    chat: Any,
    jobs: list[Any],
    store: Any,
    model: str,
    sampler: dict[str, Any],
    concurrency: int,
    translate: Any,
    todo: int,
) -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from rtlreward_sample.backends import EndpointError
    from rtlreward_sample.run import Outcome, run_sampling

    async def go(advance: Any) -> Outcome:
        try:
            async with chat:
                return await run_sampling(
                    chat,
                    jobs,
                    store,
                    row_extra={"model": model, "sampler": sampler},
                    concurrency=concurrency,
                    on_progress=advance,
                    translate=translate,
                )
        except EndpointError as exc:
            return Outcome(fatal=str(exc))
        except Exception as exc:  # the backend could not start (Tinker's client, a tokenizer)
            mapped = translate(exc) if translate is not None else None
            if mapped is None:
                raise
            return Outcome(fatal=str(mapped))

    with Progress(
        TextColumn("sampling {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
        disable=_quiet(),
    ) as bar:
        job = bar.add_task(model, total=todo)
        try:
            return asyncio.run(go(lambda k: bar.advance(job, k)))
        except KeyboardInterrupt:
            raise _fail(
                "interrupted: the samples written so far are kept; rerun the same command to resume", 130
            ) from None


def _next_step(dataset: str, out: Path) -> None:
    typer.echo(f"next: rtlreward eval {dataset} --completions {out}")


def _report(outcome: Any, dataset: str, out: Path, n: int, tasks: int) -> None:
    retried = f", {outcome.retried} retried" if outcome.retried else ""
    already = f"; {outcome.already} already there" if outcome.already else ""
    if outcome.fatal:  # the error, and what is kept, without a line that reads like a finished run
        kept = (
            f"{outcome.written} written this run{already}" if outcome.written or already else "none written"
        )
        raise _fail(
            f"{outcome.fatal}. Sampling stopped ({kept}; kept in {out}): rerun the same command to resume", 1
        )
    typer.echo(
        f"wrote {outcome.written} completions ({tasks} tasks x {n}) to {out} in {outcome.seconds:.1f} s "
        f"({outcome.requests} requests{retried}){already}"
    )
    for task_id, sample, why in outcome.failed[:5]:
        typer.secho(f"failed: {task_id} sample {sample}: {why}", fg="yellow", err=True)
    if len(outcome.failed) > 5:
        typer.secho(f"... and {len(outcome.failed) - 5} more failed", fg="yellow", err=True)
    if outcome.failed:
        raise _fail(f"{len(outcome.failed)} samples failed (above); rerun the same command to retry them", 1)
    _next_step(dataset, out)


def register(app: typer.Typer) -> None:
    """Add `prompts` and `sample` to a typer app (the rtlreward CLI, or any group)."""
    app.command("prompts")(prompts_command)
    app.command("sample")(sample_command)
