"""The engine: runs a profile's stage graph over (task, candidate) pairs and folds the results into a `Reward`.

What it guarantees, whatever the stages do:
- gating: a stage runs only when every stage it `requires` (among the enabled ones) passed; otherwise it is
  `skipped` with score 0 and costs nothing;
- independence: stages whose requirements are met run concurrently, each in its own thread; a stage that raises
  ends as `error` with the exception as its diagnostic and the other results stand; a stage that never returns
  ends as `timeout` when its deadline passes (the engine stops waiting for it);
- isolation: every candidate gets a private workspace, removed afterwards (`RTLREWARD_KEEP_WORKSPACE=1` keeps it);
- answers write only where answers go: the answer's files (from the stage that provides them, or the candidate's
  own `files`) pass `rtlreward.answers.restrict_answer` before any other stage sees them;
- determinism: the seed a stage sees is derived from the task and the candidate's files;
- economy: results are cached by content (`rtlreward.cache`, keyed by the whole task), and identical (task,
  candidate) pairs in a batch or in flight run once.

The engine names no stage. Stages declare what they `provides` and `needs` (`rtlreward.stage`); the profile
says which stages run, how they fold into the reward, which one is the verdict and where the flat metrics come
from.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import attrs

from rtlreward.answers import Answer, restrict_answer
from rtlreward.cache import ResultCache, stage_key
from rtlreward.calibration import Calibrator, cpu_limit
from rtlreward.health import STAGE_LIMITS
from rtlreward.model import Candidate, Diagnostic, Reward, StageResult, Status, Task, as_candidate, hash_json
from rtlreward.profiles import DEFAULT_PROFILE, Profile, load_profile
from rtlreward.sandbox.local import remove_workspace
from rtlreward.sandbox.reaper import make_workspace, reap_stale_workspaces_once
from rtlreward.stage import FILES, StageContext

log = logging.getLogger("rtlreward.engine")

DEFAULT_MEMORY_MB = 4096
GUARD_FACTOR = (
    3.0  # a stage may run several commands of `timeout` each; beyond this the engine gives up on it
)
GUARD_GRACE = 30.0
ENGINE_DEADLINE = "engine-deadline"  # diagnostic code of a stage the engine abandoned at its deadline
# diagnostic code of a stage cut short by `Engine.cancel` (a stopping server)
ENGINE_CANCELLED = "engine-cancelled"


class EngineError(RuntimeError):
    """The engine cannot be set up as asked (unknown stage, executor or combiner); the message says what to do."""


def derive_seed(task_fingerprint: str, files: Mapping[str, str] | None, raw: str = "") -> int:
    """A 31-bit seed from the task and the candidate's extracted files (or the raw reply before extraction):
    same answer, same stimulus, same reward."""
    digest = hashlib.sha256((task_fingerprint + hash_json(files if files is not None else raw)).encode())
    return int.from_bytes(digest.digest()[:4], "big") & 0x7FFFFFFF


def _files_of(result: StageResult) -> dict[str, Any]:
    """The files a provider published (anything else, e.g. a skipped or broken provider, is no files)."""
    files = result.artifacts.get(FILES)
    return dict(files) if isinstance(files, Mapping) else {}


def _with_answer(result: StageResult, answer: Answer) -> StageResult:
    """The files provider's result as the candidate sees it: the files that were kept, and a diagnostic (and a
    line of feedback) for each one that was dropped. The stage's status is unchanged: the dropped files have no
    effect, so the rest of the answer is judged on its own."""
    artifacts = {**result.artifacts, FILES: dict(answer.files)}
    if not answer.dropped:
        return attrs.evolve(result, artifacts=artifacts)
    note = "; ".join(d.message for d in answer.dropped)
    return attrs.evolve(
        result,
        diagnostics=(*result.diagnostics, *answer.dropped),
        feedback=f"{result.feedback}; {note}" if result.feedback else note,
        artifacts=artifacts,
    )


def _verb(status: Status) -> str:
    return {Status.SKIPPED: "was skipped", Status.ERROR: "broke (error)", Status.TIMEOUT: "timed out"}.get(
        status, "did not pass"
    )


# Seconds `Engine.close` waits for candidates still running (their commands already killed) to end and remove
# their own workspaces; what is left then is removed by `close` itself.
CLOSE_TIMEOUT = 10.0


def _calibrated_limit(task: Task | None, stage: str) -> float | None:
    """The task's calibrated per-command limit for `stage` (rtlreward.health), if it has a usable one."""
    limits = task.metadata.get(STAGE_LIMITS) if task is not None else None
    if not isinstance(limits, Mapping):
        return None
    try:
        value = float(limits[stage])
    except (KeyError, TypeError, ValueError):
        return None
    return value if value > 0 else None


class _StageThreads:
    """Daemon threads that run stages, reused from one stage to the next (starting a thread per stage cost ~1 ms
    of a small task's ~30). A stage the engine abandons at its deadline keeps its thread; the next stage gets
    another. A thread idle for `IDLE` seconds ends."""

    IDLE = 30.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue] = []

    def submit(self, fn: Callable[..., None], args: tuple, name: str) -> None:
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._loop, args=(inbox,), name=name, daemon=True).start()
        inbox.put((fn, args, name))

    def _loop(self, inbox: queue.SimpleQueue) -> None:
        while True:
            try:
                fn, args, name = inbox.get(timeout=self.IDLE)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:
                        self._idle.remove(inbox)
                        return
                continue  # handed a job just as it timed out: it is in the inbox
            threading.current_thread().name = name
            fn(*args)  # `_stage_thread`: never raises
            with self._lock:
                self._idle.append(inbox)


_STAGE_THREADS = _StageThreads()


class Engine:
    """Scores candidates with one profile, one executor and one cache. Thread-safe; reuse one per process."""

    def __init__(
        self,
        profile: str | Path | Profile | Mapping[str, Any] = DEFAULT_PROFILE,
        executor: str | Any = "local",
        cache: bool | str | Path | ResultCache = True,
        jobs: int | None = None,
        registry: Any = None,
        *,
        executor_options: Mapping[str, Any] | None = None,
        memory_mb: int | None = DEFAULT_MEMORY_MB,
        workspace_root: str | Path | None = None,
        calibrate: bool = True,
    ) -> None:
        if registry is None:
            from rtlreward.plugins import get_registry

            registry = get_registry()
        self.registry = registry
        self.profile = load_profile(profile, registry=registry)
        self.jobs = max(1, int(jobs or os.cpu_count() or 1))
        self.memory_mb = memory_mb
        self.workspace_root = Path(workspace_root) if workspace_root else None
        self.executor = self._make_executor(executor, executor_options or {})
        # The workspaces of candidates being scored (for `cancel` and `close`), and whether new ones are refused.
        self._live: dict[Path, None] = {}
        self._live_lock = threading.Lock()
        self._closed = False
        # What a `kill -9`-ed rtlreward left under our workspace root goes now, not at the first candidate (the
        # docker executor removed its containers when it was made).
        reap_stale_workspaces_once(self.workspace_root)
        size_pool = getattr(self.executor, "size_pool", None)
        if callable(size_pool):  # one warm container per job that can run at once
            try:
                size_pool(self.jobs, root=self.workspace_root)
            except Exception as exc:
                log.warning("could not size the executor's warm pool: %r", exc)
        self.combiner = self._resolve_combiner(self.profile.combiner)
        self.stages = self._resolve_stages()  # name -> stage, in topological order
        # Per-task time limits from the task's reference (rtlreward.calibration); `calibrate=False` keeps the
        # profile's limits for every task (a conformance run that must use the benchmark's own).
        self.calibrator: Calibrator | None = Calibrator(self.stages) if calibrate else None
        if cache is True:
            self.cache: ResultCache | None = ResultCache()
        elif cache is False or cache is None:
            self.cache = None
        elif isinstance(cache, ResultCache):
            self.cache = cache
        else:
            self.cache = ResultCache(cache)
        self._tool_versions: dict[str, Any] = {}
        self._tv_lock = threading.Lock()
        self._inflight: dict[tuple[str, str], Future[Reward]] = {}
        self._inflight_lock = threading.Lock()
        self._async_pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        try:
            self._executor_desc = dict(self.executor.describe())
        except Exception:
            self._executor_desc = {"executor": getattr(self.executor, "name", type(self.executor).__name__)}
        # Whole candidates scored elsewhere (rtlreward.distributed): an executor such as `ray` hands back a scorer
        # bound to this engine's profile and settings, and `score` / `score_batch` delegate to it.
        bind = getattr(self.executor, "bind_engine", None)
        self.remote: Any = bind(self) if callable(bind) else None

    # -- setup ----------------------------------------------------------------------------------------------------
    def _make_executor(self, executor: str | Any, options: Mapping[str, Any]) -> Any:
        if not isinstance(executor, str):
            return executor
        factories = self.registry.executors()
        if executor not in factories:
            known = ", ".join(sorted(factories)) or "none"
            raise EngineError(
                f"unknown executor {executor!r} (registered: {known}); install the plugin that provides it "
                "or check RTLREWARD_PLUGINS / RTLREWARD_DISABLE_PLUGINS"
            )
        return factories[executor](**options)

    def _resolve_combiner(self, name: str) -> Callable[..., tuple[float, ...]]:
        combiners = self.registry.combiners()
        if name in combiners:
            return combiners[name]
        raise EngineError(
            f"profile {self.profile.name!r} asks for combiner {name!r}, which no plugin registers "
            f"(registered: {', '.join(sorted(combiners)) or 'none'})"
        )

    def _resolve_stages(self) -> dict[str, Any]:
        registered = self.registry.stages()
        missing = [s for s in self.profile.stages if s not in registered]
        if missing:
            raise EngineError(
                f"profile {self.profile.name!r} enables stage(s) {', '.join(missing)} that no loaded plugin registers "
                f"(registered: {', '.join(sorted(registered)) or 'none'}); install the plugin, or check "
                "RTLREWARD_PLUGINS / RTLREWARD_DISABLE_PLUGINS, or remove the stage from the profile"
            )
        enabled = {s: registered[s] for s in self.profile.stages}
        declared = {}
        for s, st in enabled.items():
            override = self.profile.settings(s).requires
            declared[s] = tuple(override if override is not None else getattr(st, "requires", ()))
        self._requires = {s: tuple(r for r in declared[s] if r in enabled) for s in enabled}
        self._resolve_products(enabled)
        # Stable topological order: the profile's order, each stage after everything it waits for.
        order: list[str] = []
        remaining = list(self.profile.stages)
        while remaining:
            nxt = next((s for s in remaining if all(r in order for r in self._waits[s])), None)
            if nxt is None:
                raise EngineError(
                    f"stage requirements (requires, or needs of a product another stage provides) form a cycle "
                    f"among: {', '.join(sorted(remaining))}"
                )
            order.append(nxt)
            remaining.remove(nxt)
        return {s: enabled[s] for s in order}

    def _resolve_products(self, enabled: Mapping[str, Any]) -> None:
        """Who provides what among the enabled stages, and what each stage waits for. A product with two
        providers, or a needed product (other than the answer's files) with none, is a setup error: guessing
        would silently score with the wrong inputs."""
        self.providers: dict[str, str] = {}
        for name, st in enabled.items():
            for product in tuple(getattr(st, "provides", ()) or ()):
                other = self.providers.setdefault(product, name)
                if other != name:
                    raise EngineError(
                        f"stages {other!r} and {name!r} both provide {product!r}; enable only one of them in "
                        f"profile {self.profile.name!r}"
                    )
        self._needs: dict[str, tuple[str, ...]] = {}
        for name, st in enabled.items():
            own = set(getattr(st, "provides", ()) or ())
            needs = tuple(p for p in tuple(getattr(st, "needs", (FILES,))) if p not in own)
            for product in needs:
                if product != FILES and product not in self.providers:
                    raise EngineError(
                        f"stage {name!r} needs {product!r}, which no stage enabled in profile "
                        f"{self.profile.name!r} provides; enable the stage that provides it"
                    )
            self._needs[name] = needs
        # Without a provider the answer's files are the candidate's own `files`: available from the start.
        self._waits = {
            s: tuple(
                dict.fromkeys(
                    (*self._requires[s], *(self.providers[p] for p in self._needs[s] if p in self.providers))
                )
            )
            for s in enabled
        }

    def requirements(self, name: str) -> tuple[str, ...]:
        """The enabled stages that must have passed before `name` runs: the stage's `requires` (or the profile's
        `stage.<name>.requires`), ignoring stages the profile does not enable."""
        return self._requires[name]

    def needs(self, name: str) -> tuple[str, ...]:
        """The products `name` needs (its `needs`, default the answer's files, less what it provides itself)."""
        return self._needs[name]

    def waits_for(self, name: str) -> tuple[str, ...]:
        """Every enabled stage `name` waits for: its requirements and the providers of what it needs."""
        return self._waits[name]

    def _tools(self, name: str, stage: Any) -> Any:
        with self._tv_lock:
            if name not in self._tool_versions:
                try:
                    fn = getattr(stage, "tool_versions", None)
                    self._tool_versions[name] = dict(fn()) if fn else {}
                except Exception as exc:
                    self._tool_versions[name] = {"error": repr(exc)}
            return self._tool_versions[name]

    # -- one candidate --------------------------------------------------------------------------------------------
    def score(self, task: Task, candidate: Candidate | str | Mapping[str, str]) -> Reward:
        """Score one candidate; never raises for anything the candidate or a stage does."""
        if self.remote is not None:
            return self.remote.score(task, as_candidate(candidate))
        return self._score(task, as_candidate(candidate), notify=True)

    async def ascore(self, task: Task, candidate: Candidate | str | Mapping[str, str]) -> Reward:
        """`score` without blocking the event loop (runs in the engine's own bounded thread pool)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool(), self.score, task, candidate)

    def _pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._async_pool is None:
                self._async_pool = ThreadPoolExecutor(
                    max_workers=self.jobs, thread_name_prefix="rtlreward-async"
                )
            return self._async_pool

    def _workspace(self, task: Task) -> Path:
        """A private folder named after this process, so that after a `kill -9` the next engine on this host
        (`reap_stale_workspaces`, once per process and root) removes what this one left. Recorded as live until
        the candidate ends (`cancel`, `close`); refused once the engine is closed."""
        if self._closed:
            raise EngineError("the engine is closed: no new candidate is scored")
        root = self.workspace_root  # None: $RTLREWARD_WORKSPACE_DIR or the temp dir, as make_workspace says
        reap_stale_workspaces_once(root)  # another root given through $RTLREWARD_WORKSPACE_DIR since
        # An executor with warm containers (docker) hands out a workspace inside one of them: the candidate's
        # commands then run there, without a container start each, until `release_workspace`.
        maker = getattr(self.executor, "make_workspace", None)
        workspace = maker(task.id, root) if callable(maker) else make_workspace(task.id, root)
        with self._live_lock:
            closed = self._closed
            if not closed:
                self._live[workspace] = None
        if closed:  # `cancel` ran while the workspace was made: it would not have seen this one
            self._drop_workspace(workspace)
            raise EngineError("the engine is closed: no new candidate is scored")
        return workspace

    def _drop_workspace(self, workspace: Path) -> None:
        """Remove a workspace and give it back to the executor (a warm slot is checked for the next one)."""
        try:
            remove_workspace(workspace)
        except OSError as exc:
            log.warning("could not remove the workspace %s: %r", workspace, exc)
        release = getattr(self.executor, "release_workspace", None)
        if callable(release):
            try:
                release(workspace)
            except Exception as exc:
                log.warning("could not release the workspace %s: %r", workspace, exc)

    def _score(self, task: Task, candidate: Candidate, *, notify: bool) -> Reward:
        """Score, sharing the work with any identical (task, candidate) already in flight in another thread (a
        trainer's group of samples often repeats an answer)."""
        task_fp = task.fingerprint()
        key = (task_fp, candidate.fingerprint())
        with self._inflight_lock:
            shared = self._inflight.get(key)
            if shared is None:
                mine: Future[Reward] = Future()
                self._inflight[key] = mine
        if shared is not None:
            reward = attrs.evolve(shared.result(), sample=candidate.sample)
            if notify:
                self.registry.reward_computed(task, candidate, reward)
            return reward
        try:
            reward = self._score_uncached(task, candidate, task_fp)
        except BaseException as exc:
            mine.set_exception(exc)
            raise
        else:
            mine.set_result(reward)
        finally:
            with self._inflight_lock:
                self._inflight.pop(key, None)
        if notify:
            self.registry.reward_computed(task, candidate, reward)
        return reward

    def _limits(self, task: Task, task_fp: str) -> Mapping[str, float]:
        """The task's calibrated per-command limits by stage: a health report's (in the task's metadata, read by
        `_settings`), else measured from its reference once (rtlreward.calibration), else none."""
        if self.calibrator is None or not task.reference or STAGE_LIMITS in task.metadata:
            return {}
        key = self._calibration_key(task, task_fp)
        return self.calibrator.limits(key, lambda: self._measure_reference(task, task_fp))

    def _calibration_key(self, task: Task, task_fp: str) -> str:
        assert self.calibrator is not None
        context = {
            "stages": {
                n: [str(getattr(s, "version", "")), self._tools(n, s), repr(self.profile.settings(n))]
                for n, s in self.stages.items()
            },
            "executor": self._executor_desc,
            "memory_mb": self.memory_mb,
        }
        return self.calibrator.key(task_fp, context)

    def _measure_reference(self, task: Task, task_fp: str) -> Reward | None:
        try:
            reference = Candidate(files=dict(task.reference))
            return self._score_uncached(task, reference, task_fp, limits={}, quiet=True)
        except Exception as exc:
            log.warning("could not time the reference of %s for its limits: %r", task.id, exc)
            return None

    def _score_uncached(
        self,
        task: Task,
        candidate: Candidate,
        task_fp: str,
        *,
        limits: Mapping[str, float] | None = None,
        quiet: bool = False,
    ) -> Reward:
        offer = None
        if limits is None:
            if (
                self.calibrator is not None
                and candidate.files is not None
                and task.reference
                and (dict(candidate.files) == dict(task.reference))
            ):
                # The reference itself (an evaluation of references, a health check): its own run is the
                # measurement, so it is not run twice.
                limits, offer = {}, self._calibration_key(task, task_fp)
            else:
                limits = self._limits(task, task_fp)
        workspace = self._workspace(task)
        results: dict[str, StageResult] | None = None
        try:
            results, answer = self._run_graph(task, candidate, task_fp, workspace, limits, quiet)
        finally:
            abandoned = results is None or any(
                d.code == ENGINE_DEADLINE for r in results.values() for d in r.diagnostics
            )
            if abandoned:
                # A stage the engine gave up on may still be running commands here: an executor that can
                # (docker) kills them, so nothing outlives the reward.
                cancel = getattr(self.executor, "cancel", None)
                if callable(cancel):
                    try:
                        cancel(workspace)
                    except Exception as exc:
                        log.warning("could not cancel the commands of %s: %r", workspace, exc)
            if os.environ.get("RTLREWARD_KEEP_WORKSPACE", "") not in ("", "0"):
                log.warning("kept workspace of %s sample %d at %s", task.id, candidate.sample, workspace)
            else:
                try:  # also what a command chmod-ed read-only, and a frozen harness of a non-root trainer
                    remove_workspace(workspace)
                except OSError as exc:
                    log.warning("could not remove the workspace %s: %r", workspace, exc)
            release = getattr(self.executor, "release_workspace", None)
            if callable(release):  # a warm container is checked and wiped (or replaced) for the next one
                try:
                    release(workspace)
                except Exception as exc:
                    log.warning("could not release the workspace %s: %r", workspace, exc)
            with self._live_lock:
                self._live.pop(workspace, None)
        if self._closed and results is not None:
            results = _cut_short(results)
        reward = self._combine(task, candidate, results, answer)
        if offer is not None and self.calibrator is not None and STAGE_LIMITS not in task.metadata:
            self.calibrator.record(offer, reward)
        return reward

    def _settings(
        self, name: str, stage: Any, task: Task | None = None, limits: Mapping[str, float] | None = None
    ) -> tuple[float, float, int | None, dict[str, Any]]:
        """(per-command timeout, stage deadline, memory, options). A task may carry calibrated limits
        (`metadata["stage_limits"]`, from a task health report, or `limits` measured from its reference): a
        shorter one replaces the profile's timeout, and the deadline follows it, so a candidate that hangs is cut
        in seconds."""
        s = self.profile.settings(name)
        timeout = float(s.timeout or getattr(stage, "default_timeout", 60.0) or 60.0)
        deadline = float(s.deadline or timeout * GUARD_FACTOR + GUARD_GRACE)
        calibrated = _calibrated_limit(task, name)
        if calibrated is None and limits and limits.get(name, 0) > 0:
            calibrated = float(limits[name])
        if calibrated is not None and calibrated < timeout:
            timeout = calibrated
            deadline = min(deadline, timeout * GUARD_FACTOR + GUARD_GRACE)
        memory = s.memory_mb if s.memory_mb is not None else self.memory_mb
        return timeout, deadline, memory, dict(s.options)

    def _run_graph(
        self,
        task: Task,
        candidate: Candidate,
        task_fp: str,
        workspace: Path,
        limits: Mapping[str, float] | None = None,
        quiet: bool = False,
    ) -> tuple[dict[str, StageResult], Answer]:
        results: dict[str, StageResult] = {}
        pending = list(self.stages)
        running: dict[str, tuple[float, float]] = {}  # name -> (started, deadline)
        done: queue.Queue[tuple[str, StageResult]] = queue.Queue()
        seed_basis = task.stimulus_fingerprint()
        cand_fp = candidate.fingerprint()  # hashed once, not once per stage (the candidate is frozen)
        products: dict[str, Any] = {}
        answer = Answer()
        if FILES not in self.providers:  # no stage extracts files: the candidate's own files are the answer
            answer = restrict_answer(task, candidate.files)
            products[FILES] = answer.files
        owners = {stage: p for p, stage in self.providers.items()}

        calibrated: dict[str, float] = {}  # stage -> the calibrated per-command limit it ran under

        def finish(name: str, result: StageResult) -> None:
            nonlocal answer
            if name in calibrated and result.status is Status.TIMEOUT:
                note = Diagnostic(
                    f"time limit {calibrated[name]:g} s per command ({cpu_limit(calibrated[name]):g} s of CPU for a "
                    "simulation), calibrated from this task's reference (rtlreward.calibration: 10x its time in "
                    "this stage, at least 2 s; half of it in CPU time, at least 1 s)",
                    severity="info",
                    code="calibrated-limit",
                )
                result = attrs.evolve(result, diagnostics=(*result.diagnostics, note))
            for product, provider in self.providers.items():
                if provider != name:
                    continue
                if product == FILES:
                    answer = restrict_answer(task, _files_of(result))
                    result = _with_answer(result, answer)
                    products[FILES] = answer.files
                else:
                    products[product] = result.artifacts.get(product)
            results[name] = result
            if not quiet:  # the reference timed for its limits is no candidate: plugins never see it
                self.registry.stage_finished(task, candidate, result)

        while pending or running:
            progressed = False
            for name in list(pending):
                if any(w not in results for w in self.waits_for(name)):
                    continue
                pending.remove(name)
                progressed = True
                reqs = self.requirements(name)
                failed = [r for r in reqs if not results[r].passed]
                stage = self.stages[name]
                if failed:
                    finish(
                        name,
                        StageResult(
                            name=name,
                            status=Status.SKIPPED,
                            score=0.0,
                            version=str(getattr(stage, "version", "")),
                            feedback="not run: "
                            + ", ".join(f"{r} {_verb(results[r].status)}" for r in failed),
                        ),
                    )
                    continue
                timeout, deadline, memory, options = self._settings(name, stage, task, limits)
                # The result cache keys on the limit without the engine's own calibration: a calibrated limit only
                # cuts a run short, and a timeout is never cached, so a result stays valid however the measurement
                # of the reference varied (a report's limits are in the task, so in the key, as before).
                key_timeout = self._settings(name, stage, task)[0]
                own = (limits or {}).get(name) or _calibrated_limit(task, name)
                if own is not None and abs(timeout - own) < 1e-9:
                    calibrated[name] = timeout
                needs = self.needs(name)
                reads_files = FILES in needs
                files = dict(products.get(FILES) or {}) if reads_files else {}
                seed = derive_seed(seed_basis, files if reads_files else None, cand_fp)
                # A stage that reads the answer sees only the kept files, also through ctx.candidate.
                seen = candidate
                if reads_files and candidate.files is not None:
                    seen = attrs.evolve(candidate, files=dict(files))
                ctx = StageContext(
                    task=task,
                    candidate=seen,
                    workspace=workspace,
                    executor=self.executor,
                    files=files,
                    results=dict(results),
                    options=options,
                    seed=seed,
                    timeout=timeout,
                    cpu_timeout=cpu_limit(timeout) if name in calibrated else None,
                    memory_mb=memory,
                    registry=self.registry,
                    products={p: products.get(p) for p in needs},
                )
                inputs = {
                    p: hash_json(products.get(p)) for p in needs
                }  # the products it reads; a stage that reads no files reads the raw candidate
                if not reads_files:
                    inputs["candidate"] = cand_fp
                if name in owners:
                    inputs["provides"] = sorted(p for p, s_ in self.providers.items() if s_ == name)
                now = time.monotonic()
                running[name] = (now, now + deadline)
                _STAGE_THREADS.submit(
                    self._stage_thread,
                    (name, stage, ctx, task, task_fp, hash_json(inputs), done, not quiet, key_timeout),
                    f"rtlreward-stage-{name}",
                )
            if not running:
                if pending and not progressed:  # unreachable with an acyclic graph; never spin
                    for name in pending:
                        finish(
                            name,
                            StageResult(
                                name=name,
                                status=Status.ERROR,
                                feedback="",
                                diagnostics=(Diagnostic("unresolvable stage requirements"),),
                            ),
                        )
                    pending.clear()
                continue
            wait = max(0.0, min(d for _, d in running.values()) - time.monotonic())
            try:
                name, result = done.get(timeout=wait)
            except queue.Empty:
                now = time.monotonic()
                for name, (started, deadline) in list(running.items()):
                    if now >= deadline:
                        del running[name]
                        stage = self.stages[name]
                        log.warning(
                            "stage %s on task %s did not finish within %.0fs; abandoned",
                            name,
                            task.id,
                            deadline - started,
                        )
                        finish(
                            name,
                            StageResult(
                                name=name,
                                status=Status.TIMEOUT,
                                score=0.0,
                                duration=now - started,
                                version=str(getattr(stage, "version", "")),
                                diagnostics=(
                                    Diagnostic(
                                        f"stage {name!r} did not finish within {deadline - started:.0f}s and was abandoned "
                                        "by the engine (raise stage.<name>.deadline in the profile if it needs longer)",
                                        code=ENGINE_DEADLINE,
                                    ),
                                ),
                                feedback=f"{name} took too long",
                            ),
                        )
                continue
            if name not in running:  # a stage the engine already gave up on finished late: ignore it
                continue
            del running[name]
            finish(name, result)
        ordered = {n: results[n] for n in self.stages if n in results}
        return ordered, answer

    def _stage_thread(
        self,
        name: str,
        stage: Any,
        ctx: StageContext,
        task: Task,
        task_fp: str,
        inputs: str,
        done: queue.Queue[tuple[str, StageResult]],
        use_cache: bool = True,
        key_timeout: float | None = None,
    ) -> None:
        try:
            result = self._run_stage(name, stage, ctx, task, task_fp, inputs, use_cache, key_timeout)
        except BaseException as exc:  # the engine's own bug must still end the stage
            result = StageResult(
                name=name,
                status=Status.ERROR,
                diagnostics=(Diagnostic(f"engine error: {type(exc).__name__}: {exc}"),),
            )
        done.put((name, result))

    def _run_stage(
        self,
        name: str,
        stage: Any,
        ctx: StageContext,
        task: Task,
        task_fp: str,
        inputs: str,
        use_cache: bool = True,
        key_timeout: float | None = None,
    ) -> StageResult:
        """One stage's result, from the cache when it has one (`use_cache=False`: the reference timed for the
        task's limits, which must really run and leaves nothing behind)."""
        version = str(getattr(stage, "version", ""))
        key = None
        if self.cache is not None and use_cache:
            key = stage_key(
                namespace=task.origin,
                task_fingerprint=task_fp,
                inputs=inputs,
                stage=name,
                version=version,
                tool_versions=self._tools(name, stage),
                options=ctx.options,
                executor=self._executor_desc,
                limits={
                    "timeout": ctx.timeout if key_timeout is None else key_timeout,
                    "memory_mb": ctx.memory_mb,
                },
            )
            hit = self.cache.get(key)
            if hit is not None:
                return hit
        start = time.perf_counter()
        try:
            result = stage.run(ctx)
            if not isinstance(result, StageResult):
                raise TypeError(f"stage {name!r} returned {type(result).__name__}, not a StageResult")
        except Exception as exc:
            log.warning("stage %s raised on task %s: %r", name, ctx.task.id, exc)
            result = StageResult(
                name=name,
                status=Status.ERROR,
                score=0.0,
                version=version,
                diagnostics=(Diagnostic(f"{type(exc).__name__}: {exc}", code="stage-exception"),),
                metrics={"traceback": traceback.format_exc(limit=8)},
            )
            return attrs.evolve(result, duration=time.perf_counter() - start)
        score = result.score if result.score == result.score else 0.0  # NaN -> 0
        result = attrs.evolve(
            result,
            name=name,
            score=max(0.0, min(1.0, float(score))),
            duration=time.perf_counter() - start,
            version=result.version or version,
            cached=False,
        )
        # A stage that ends while the engine is cancelled may have had its commands killed: not its own result.
        if key is not None and self.cache is not None and not self._closed:
            self.cache.put(key, result)
        return result

    # -- combining ------------------------------------------------------------------------------------------------
    def _combine(
        self, task: Task, candidate: Candidate, results: dict[str, StageResult], answer: Answer
    ) -> Reward:
        try:
            out = tuple(self.combiner(results, self.profile, task))
            # (total, max_total); a combiner of the older contract returns (total, passed, max_total), and the
            # engine decides `passed` itself either way.
            if len(out) not in (2, 3):
                raise ValueError(f"returned {len(out)} values, not (total, max_total)")
            total, max_total = float(out[0]), float(out[-1])
        except Exception as exc:  # a third-party combiner's bug: report it, give the defined reward 0
            log.error("combiner %s failed: %r", self.profile.combiner, exc)
            total, max_total = 0.0, float(self.profile.max_weighted)
        passed = self.profile.verdict_passed(results)
        return Reward(
            total=total,
            profile=self.profile.name,
            passed=passed,
            max_total=max_total,
            stages=results,
            metrics=self.metrics(results, total, passed, max_total, answer),
            task_id=task.id,
            sample=candidate.sample,
            files=answer.files,
            diagnostics=answer.dropped,
        )

    def metrics(
        self,
        results: Mapping[str, StageResult],
        total: float,
        passed: bool,
        max_total: float,
        answer: Answer | None = None,
    ) -> dict[str, Any]:
        """Flat keys a trainer can log as they are, the same keys for every candidate of a profile: the profile's
        `[metrics]` (the presets keep the original experiments' `format_valid`, `syntax_valid`,
        `interface_score`, `tests_passed`, `tests_total`), `reward/*`, `term/<name>` for each weighted term,
        `answer/dropped` and `stage/<name>/*` for each enabled stage."""
        m: dict[str, Any] = dict(self.profile.metric_values(results))
        m.update(
            {
                "reward/total": total,
                "reward/max": max_total,
                "reward/normalized": total / max_total if max_total else 0.0,
                "reward/passed": int(passed),
                "answer/dropped": answer.dropped_count if answer is not None else 0,
            }
        )
        for name, value in self.profile.term_values(results).items():
            m[f"term/{name}"] = float(value)
        for name, r in results.items():
            m[f"stage/{name}/score"] = float(r.score)
            m[f"stage/{name}/duration"] = float(r.duration)
            m[f"stage/{name}/status"] = r.status.value
            m[f"stage/{name}/passed"] = int(r.passed)
            m[f"stage/{name}/cached"] = int(r.cached)
        return m

    # -- batches --------------------------------------------------------------------------------------------------
    def score_batch(
        self,
        items: Iterable[tuple[Task, Candidate | str | Mapping[str, str]]],
        progress: Callable[[int, int], Any] | None = None,
        *,
        jobs: int | None = None,
    ) -> list[Reward]:
        """Score many candidates with at most `jobs` (default: the engine's) in flight; identical (task,
        candidate) pairs are scored once and share the reward (with their own `sample`). `progress(done, total)`
        is called after each unique candidate."""
        if self.remote is not None:
            return self.remote.score_batch(items, progress, jobs=jobs)
        pairs = [(t, as_candidate(c)) for t, c in items]
        keys = [(t.fingerprint(), c.fingerprint()) for t, c in pairs]
        first: dict[tuple[str, str], int] = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        rewards: dict[tuple[str, str], Reward] = {}
        unique = list(first.items())
        total = len(unique)
        if total:
            workers = max(1, min(jobs or self.jobs, total))
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rtlreward-batch") as pool:
                futures = {pool.submit(self._score, *pairs[i], notify=True): k for k, i in unique}
                for n, fut in enumerate(as_completed(futures), 1):
                    rewards[futures[fut]] = fut.result()
                    if progress is not None:
                        progress(n, total)
        out = []
        for i, (k, (task, cand)) in enumerate(zip(keys, pairs, strict=True)):
            reward = rewards[k]
            if first[k] != i:
                reward = attrs.evolve(reward, sample=cand.sample)
                self.registry.reward_computed(task, cand, reward)
            out.append(reward)
        return out

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        return {
            "profile": self.profile.name,
            "combiner": self.profile.combiner,
            "stages": {n: list(self.requirements(n)) for n in self.stages},
            "needs": {n: list(self.needs(n)) for n in self.stages},
            "providers": dict(self.providers),
            "executor": self._executor_desc,
            "cache": str(self.cache.path) if self.cache else None,
            "jobs": self.jobs,
        }

    def cancel(self) -> int:
        """Stop scoring: new candidates are refused (`EngineError`), and the commands of those running are killed
        now (through the executor's `cancel(workspace)`: docker and local have one), so they end with what they
        have (a killed command is a timeout, never cached). For a process that is stopping (`rtlreward serve` on
        SIGTERM/SIGINT); `close` calls it first. Returns how many candidates were running."""
        with self._live_lock:
            self._closed = True
            running = list(self._live)
        cancel = getattr(self.executor, "cancel", None)
        if callable(cancel):
            for workspace in running:
                try:
                    cancel(workspace)
                except Exception as exc:
                    log.warning("could not cancel the commands of %s: %r", workspace, exc)
        return len(running)

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """End the engine: `cancel` what is running, wait up to `timeout` seconds for those candidates to end
        (each removes its workspace), close the executor (docker: every container of it killed and removed,
        warm ones included, and its slot folders), then remove whatever workspace is still there. Safe to call
        twice, and from another thread than the scoring ones."""
        running = self.cancel()
        with self._pool_lock:
            if self._async_pool is not None:
                self._async_pool.shutdown(wait=False, cancel_futures=True)
                self._async_pool = None
        if running:
            end = time.monotonic() + max(0.0, timeout)
            while self._live and time.monotonic() < end:
                time.sleep(0.05)
        close = getattr(self.executor, "close", None)
        if callable(close):
            try:
                close()
            except Exception as exc:
                log.warning("closing executor failed: %r", exc)
        with self._live_lock:
            left = list(self._live)
            self._live.clear()
        for workspace in left:  # a candidate still running past `timeout` (a stage stuck in Python code)
            log.warning("removing the workspace of a candidate still running at close: %s", workspace)
            self._drop_workspace(workspace)
        if self.cache is not None:
            self.cache.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cut_short(results: dict[str, StageResult]) -> dict[str, StageResult]:
    """The results of a candidate that ran while the engine was cancelled: a stage whose commands were killed
    reports a timeout, which is the engine's doing, not the answer's; it becomes an `error` (never cached, and a
    trainer may drop the sample) that says so."""
    out = dict(results)
    for name, r in results.items():
        if r.status in (Status.TIMEOUT, Status.ERROR):
            out[name] = attrs.evolve(
                r,
                status=Status.ERROR,
                score=0.0,
                diagnostics=(
                    *r.diagnostics,
                    Diagnostic(
                        f"stage {name!r} was cut short: the engine was stopped while it ran (the server is "
                        "shutting down); this says nothing about the answer",
                        code=ENGINE_CANCELLED,
                    ),
                ),
            )
    return out


def score(
    task: Task, candidate: Candidate | str, profile: str | Profile = DEFAULT_PROFILE, **kw: Any
) -> Reward:
    """One-off convenience: build an engine, score, close. Trainers should keep one `Engine`."""
    with Engine(profile, **kw) as engine:
        return engine.score(task, candidate)


__all__ = ["Engine", "EngineError", "derive_seed", "score"]
