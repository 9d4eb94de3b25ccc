"""The sampling loop: which (task, sample) pairs are still missing, a pool of workers asking the backend for
them, each reply appended to the completions file as it arrives, a progress bar.

Kept apart from the typer command so tests and other tools can run it with a backend of their own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from rtlreward.model import Task
from rtlreward.prompts import chat_for
from rtlreward_sample.backends import EndpointError, Reply, RequestFailed
from rtlreward_sample.store import CompletionsFile

__all__ = ["Job", "Outcome", "plan", "run_sampling"]


@attrs.frozen(slots=True)
class Job:
    """The samples one request produces: one for the OpenAI backend, all a task still needs for Tinker."""

    task_id: str
    messages: list[dict[str, str]]
    samples: tuple[int, ...]


@attrs.define
class Outcome:
    """What a run did: pairs written, pairs already in the file, pairs that failed (id, sample, why), and the
    error that stopped the run, if one did."""

    written: int = 0
    already: int = 0
    failed: list[tuple[str, int, str]] = attrs.field(factory=list)
    fatal: str = ""
    requests: int = 0
    retried: int = 0
    seconds: float = 0.0


def plan(
    tasks: Sequence[Task],
    n: int,
    done: frozenset[tuple[str, int]] | set[tuple[str, int]],
    *,
    style: str = "auto",
    dataset: Any = None,
    batch: bool = False,
) -> tuple[list[Job], int]:
    """The jobs for every missing (task, sample) pair, in dataset order, and how many pairs are already done.
    `batch`: one job per task holding all its missing samples (a backend that samples n at once)."""
    jobs: list[Job] = []
    already = 0
    for task in tasks:
        missing = [s for s in range(n) if (task.id, s) not in done]
        already += n - len(missing)
        if not missing:
            continue
        messages = chat_for(task, style, dataset)
        if batch:
            jobs.append(Job(task.id, messages, tuple(missing)))
        else:
            jobs.extend(Job(task.id, messages, (s,)) for s in missing)
    return jobs, already


async def _ask(backend: Any, job: Job) -> list[Reply]:
    if hasattr(backend, "complete_many"):
        return list(await backend.complete_many(job.messages, len(job.samples), job.samples[0]))
    return [await backend.complete(job.messages, job.samples[0])]


async def run_sampling(
    backend: Any,
    jobs: Sequence[Job],
    store: CompletionsFile,
    *,
    row_extra: dict[str, Any],
    concurrency: int = 8,
    on_progress: Callable[[int], None] | None = None,
    translate: Callable[[BaseException], BaseException | None] | None = None,
) -> Outcome:
    """Run the jobs with `concurrency` requests in flight, appending one line per reply. `translate` maps a
    backend's own exceptions to EndpointError / RequestFailed (Tinker's SDK errors); anything else propagates.
    An EndpointError stops every worker: what was written stays, and a rerun resumes."""
    out = Outcome()
    queue: asyncio.Queue[Job] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    stop = asyncio.Event()
    started = time.monotonic()

    async def worker() -> None:
        while not stop.is_set():
            try:
                job = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            try:
                try:
                    replies = await _ask(backend, job)
                except (EndpointError, RequestFailed):
                    raise
                except Exception as exc:
                    mapped = translate(exc) if translate is not None else None
                    if mapped is None:
                        raise
                    raise mapped from exc
            except EndpointError as exc:
                if not out.fatal:
                    out.fatal = str(exc)
                stop.set()
                return
            except RequestFailed as exc:
                out.failed.extend((job.task_id, s, str(exc)) for s in job.samples)
                if on_progress:
                    on_progress(len(job.samples))
                continue
            for sample, reply in zip(job.samples, replies, strict=False):
                store.append(
                    {
                        "id": job.task_id,
                        "sample": sample,
                        "completion": reply.text,
                        "finish_reason": reply.finish_reason,
                        **row_extra,
                    }
                )
                out.written += 1
            if len(replies) < len(job.samples):
                out.failed.extend(
                    (job.task_id, s, f"the backend returned {len(replies)} of {len(job.samples)} samples")
                    for s in job.samples[len(replies) :]
                )
            if on_progress:
                on_progress(len(job.samples))

    store.open()
    try:
        workers = [asyncio.create_task(worker()) for _ in range(max(1, min(concurrency, len(jobs))))]
        try:
            await asyncio.gather(*workers)
        finally:
            for w in workers:
                w.cancel()
    finally:
        store.close()
        out.seconds = time.monotonic() - started
        out.requests = getattr(backend, "requests", 0)
        out.retried = getattr(backend, "retried", 0)
    return out
