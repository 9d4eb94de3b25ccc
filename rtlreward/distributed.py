"""Whole-candidate evaluation on a Ray cluster (`--executor ray`): one Ray task per candidate, no shared disk.

Why whole candidates and not commands: a command needs its workspace, and a workspace on the driver's disk is
not on a worker's unless the cluster shares a file system, which most clusters (and every KubeRay one by
default) do not. So the unit sent to a worker is a complete evaluation, all its stages: the task travels
through Ray's object store (put once, passed by reference, fetched once per node), the candidate's text is
the only per-task argument, and the worker makes the workspace on its own disk. Each worker process keeps one
engine per setting (`WorkerSpec`: the profile, the executor it runs commands with there, usually `local` with
bubblewrap), so plugin loading and tool-version probes happen once per process, not once per candidate.

Results stream back as they finish (`ray.wait`): `RayScorer.stream` yields `(index, reward)` in completion
order and the bulk evaluator (`rtlreward.evaluate.runner`) feeds its progress bar and resumable results file
from it. A worker or node lost mid-batch: Ray re-runs its evaluations elsewhere (`max_retries`, system failures
only: a candidate that breaks the engine is not retried), and the caller sees exactly one outcome per item,
identical (task, candidate) pairs in flight are evaluated once.

The engine hook is small: the registered `ray` executor is a `RayBackend`, whose `bind_engine(engine)` returns
a `RayScorer` built from that engine's profile and settings; `Engine.score` / `score_batch` delegate to it, so
`rtlreward eval`, `cvdp eval`, `serve` and the trainers need nothing Ray-specific. Nothing here imports the
engine (the engine class travels with the `WorkerSpec`), so there is no import circle.

Ray is imported lazily (the `ray` extra). Connecting follows Ray's own rules: `address` (or `--ray-address`),
else the `RAY_ADDRESS` environment variable, else the cluster started on this machine by `ray start`, else a
new local instance.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import logging
import os
import pickle
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import attrs

from rtlreward.model import Candidate, Reward, Task, as_candidate

log = logging.getLogger("rtlreward.distributed")

DEFAULT_MAX_RETRIES = 3  # re-runs of an evaluation whose worker process or node died
TASK_REF_CACHE = 256  # tasks kept in the object store between calls (a trainer scores many groups per task)
# The driver's plugin selection goes with every evaluation, so a worker loads the same stages.
FORWARDED_ENV = ("RTLREWARD_PLUGINS", "RTLREWARD_DISABLE_PLUGINS")


class RemoteScoringError(RuntimeError):
    """An evaluation could not be completed on the cluster (its worker died more often than `max_retries`, or
    the engine could not be set up there); the message names the item and what to try."""


@attrs.frozen(slots=True)
class WorkerSpec:
    """What a worker needs to build the same engine as the driver's: everything here is plain data (the engine
    class is pickled by reference). No path of the driver's machine goes into it: the workspace root and the
    cache path are the worker's own."""

    engine_cls: Any
    profile: Any  # a resolved rtlreward.profiles.Profile
    executor: str = "local"
    executor_options: dict[str, Any] = attrs.field(factory=dict, converter=dict)
    cache: bool = True
    memory_mb: int | None = None
    env: dict[str, str] = attrs.field(factory=dict, converter=dict)

    def key(self) -> str:
        blob = pickle.dumps(
            (
                f"{self.engine_cls.__module__}.{self.engine_cls.__qualname__}",
                self.profile,
                self.executor,
                sorted(self.executor_options.items()),
                self.cache,
                self.memory_mb,
                sorted(self.env.items()),
            )
        )
        return hashlib.sha256(blob).hexdigest()


# -- the worker side ----------------------------------------------------------------------------------------------
_ENGINES: dict[str, Any] = {}
_ENGINES_LOCK = threading.Lock()


def worker_engine(spec: WorkerSpec) -> Any:
    """This process's engine for `spec`, built on first use (one per worker process and setting)."""
    key = spec.key()
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            for name, value in spec.env.items():
                os.environ.setdefault(name, value)
            engine = spec.engine_cls(
                spec.profile,
                executor=spec.executor,
                cache=spec.cache,
                jobs=1,
                executor_options=spec.executor_options,
                memory_mb=spec.memory_mb,
            )
            _ENGINES[key] = engine
        return engine


def _picklable(reward: Reward) -> Reward:
    """The reward as it can travel back: a third-party stage may leave an artifact that does not pickle (a
    parsed tree, an open handle); such artifacts stay behind, the rest of the reward travels unchanged."""
    try:
        pickle.dumps(reward)
        return reward
    except Exception:
        pass
    stages = {}
    for name, result in reward.stages.items():
        kept = {}
        for k, v in result.artifacts.items():
            try:
                pickle.dumps(v)
            except Exception:
                continue
            kept[k] = v
        stages[name] = attrs.evolve(result, artifacts=kept)
    return attrs.evolve(reward, stages=stages)


def evaluate_on_worker(spec: WorkerSpec, task: Task, candidate: Candidate) -> Reward:
    """The Ray task: one whole evaluation, all its stages, in a workspace on this worker's own disk."""
    return _picklable(worker_engine(spec).score(task, candidate))


def worker_identity() -> dict[str, Any]:
    """Where a Ray task ran (tests use it to prove the worker is another machine as far as files go)."""
    import socket

    return {
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "pid_ns": os.readlink("/proc/self/ns/pid") if os.path.exists("/proc/self/ns/pid") else "",
        "mnt_ns": os.readlink("/proc/self/ns/mnt") if os.path.exists("/proc/self/ns/mnt") else "",
    }


# -- the driver side ----------------------------------------------------------------------------------------------


_CONNECTIONS = 0  # backends sharing the connection this module opened; the last one to close disconnects
_CONNECT_LOCK = threading.Lock()


def connect(
    address: str | None, num_cpus: int | None, init_kwargs: Mapping[str, Any] | None
) -> tuple[Any, bool]:
    """(the ray module, whether the connection is this module's: then `disconnect()` when done). A process that
    called `ray.init` itself keeps its connection. Errors say how to get a cluster."""
    global _CONNECTIONS
    try:
        import ray
    except ImportError:
        raise RuntimeError("the ray executor needs Ray: `pip install 'rtlreward[ray]'`") from None
    with _CONNECT_LOCK:
        if ray.is_initialized():
            if _CONNECTIONS:
                _CONNECTIONS += 1
                return ray, True
            return ray, False
        _init(ray, address, num_cpus, init_kwargs)
        _CONNECTIONS = 1
        return ray, True


def disconnect(ray: Any) -> None:
    global _CONNECTIONS
    with _CONNECT_LOCK:
        _CONNECTIONS = max(0, _CONNECTIONS - 1)
        if _CONNECTIONS == 0 and ray.is_initialized():
            ray.shutdown()


def _init(ray: Any, address: str | None, num_cpus: int | None, init_kwargs: Mapping[str, Any] | None) -> None:
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, **dict(init_kwargs or {})}
    if num_cpus is not None:
        kwargs["num_cpus"] = num_cpus
    try:
        ray.init(address=address, **kwargs)
    except Exception as exc:
        where = address or os.environ.get("RAY_ADDRESS") or "this machine"
        raise RuntimeError(
            f"could not connect to the Ray cluster at {where}: {type(exc).__name__}: {exc}. Start one with "
            "`ray start --head` (and `ray start --address HEAD:PORT` on each worker), then pass "
            "--ray-address HEAD:PORT (or set RAY_ADDRESS)"
        ) from exc


def _failure(task: Task, candidate: Candidate, error: BaseException) -> RemoteScoringError:
    text = str(error).strip()
    last = text.splitlines()[-1] if text else ""
    return RemoteScoringError(
        f"{task.id} sample {candidate.sample}: the evaluation failed on the cluster "
        f"({type(error).__name__}: {last}); if workers died, check their memory and logs (`ray logs`); "
        "rerun to retry it"
    )


class RayScorer:
    """Scores candidates on a Ray cluster with the settings of one engine (see the module docstring).

    `stream(items)` yields `(index, Reward | RemoteScoringError)` as evaluations finish; `score_batch` and
    `score` are built on it. Thread-safe: a server or trainer may call `score` from many threads."""

    def __init__(
        self,
        spec: WorkerSpec,
        ray: Any,
        *,
        cpus_per_task: float = 1.0,
        max_retries: int = DEFAULT_MAX_RETRIES,
        retry_exceptions: bool | list[type[BaseException]] = False,
        max_inflight: int | None = None,
        notify: Callable[[Task, Candidate, Reward], Any] | None = None,
    ) -> None:
        self.spec = spec
        self._ray = ray
        self.max_inflight = max_inflight
        self._notify = notify
        self._spec_ref = ray.put(spec)
        self._task_refs: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._lock = threading.Lock()
        options: dict[str, Any] = {
            "num_cpus": cpus_per_task,
            "max_retries": max_retries,
            "retry_exceptions": retry_exceptions,
        }
        if spec.env:
            options["runtime_env"] = {"env_vars": dict(spec.env)}
        self._remote = ray.remote(evaluate_on_worker).options(**options)
        self._window_at = 0.0
        self._window = 4

    # the task's data goes into the object store once; every evaluation of it passes the reference
    def task_ref(self, task: Task, fingerprint: str | None = None) -> Any:
        fp = fingerprint or task.fingerprint()
        with self._lock:
            ref = self._task_refs.get(fp)
            if ref is not None:
                self._task_refs.move_to_end(fp)
                return ref
        ref = self._ray.put(task)
        with self._lock:
            self._task_refs[fp] = ref
            while len(self._task_refs) > TASK_REF_CACHE:
                self._task_refs.popitem(last=False)  # a pending evaluation still holds its own reference
        return ref

    def window(self) -> int:
        """How many evaluations to keep submitted: `max_inflight`, else twice the cluster's CPUs (re-read at
        most once a second, so nodes that join mid-batch get work), at least 4."""
        if self.max_inflight:
            return int(self.max_inflight)
        now = time.monotonic()
        if now - self._window_at > 1.0:
            self._window_at = now
            try:
                cpus = float(self._ray.cluster_resources().get("CPU", 0))
            except Exception:
                cpus = 0
            self._window = max(4, int(2 * cpus))
        return self._window

    def submit(self, task: Task, candidate: Candidate) -> Any:
        """Start one evaluation; returns its ObjectRef (awaitable; `ray.get` gives the Reward)."""
        return self._remote.remote(self._spec_ref, self.task_ref(task), candidate)

    def stream(
        self,
        items: Iterable[tuple[Task, Candidate | str | Mapping[str, str]]],
        *,
        window: int | None = None,
    ) -> Iterator[tuple[int, Reward | RemoteScoringError]]:
        """Score `items` (pulled lazily, as the window allows) and yield `(index, outcome)` in completion order,
        exactly once per item. Closing the generator early cancels what is still running."""
        ray = self._ray
        source = iter(enumerate(items))
        inflight: dict[Any, tuple[str, str]] = {}
        waiting: dict[tuple[str, str], list[tuple[int, Task, Candidate]]] = {}
        exhausted = False
        try:
            while True:
                limit = window or self.window()
                while not exhausted and len(inflight) < limit:
                    nxt = next(source, None)
                    if nxt is None:
                        exhausted = True
                        break
                    i, (task, raw) = nxt
                    candidate = as_candidate(raw)
                    task_fp = task.fingerprint()
                    key = (task_fp, candidate.fingerprint())
                    if key in waiting:  # the same answer to the same task is already on its way
                        waiting[key].append((i, task, candidate))
                        continue
                    waiting[key] = [(i, task, candidate)]
                    ref = self._remote.remote(self._spec_ref, self.task_ref(task, task_fp), candidate)
                    inflight[ref] = key
                if not inflight:
                    return
                ready, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
                for ref in ready:
                    key = inflight.pop(ref)
                    reward: Reward | None = None
                    error: BaseException | None = None
                    try:
                        reward = ray.get(ref)
                    except Exception as exc:
                        error = exc
                    for i, task, candidate in waiting.pop(key):
                        if error is not None:
                            yield i, _failure(task, candidate, error)
                            continue
                        assert reward is not None
                        out = (
                            reward
                            if reward.sample == candidate.sample
                            else attrs.evolve(reward, sample=candidate.sample)
                        )
                        if self._notify is not None:
                            self._notify(task, candidate, out)
                        yield i, out
        finally:
            for ref in inflight:  # closed early (error, Ctrl-C): stop what nobody will read
                with contextlib.suppress(Exception):
                    ray.cancel(ref)

    def score_batch(
        self,
        items: Iterable[tuple[Task, Candidate | str | Mapping[str, str]]],
        progress: Callable[[int, int], Any] | None = None,
        *,
        jobs: int | None = None,
    ) -> list[Reward]:
        """Every item's reward, in order. `progress(done, total)` after each item. Raises RemoteScoringError
        (after the rest finished) when an evaluation could not be completed."""
        pairs = [(t, as_candidate(c)) for t, c in items]
        out: list[Reward | None] = [None] * len(pairs)
        errors: list[RemoteScoringError] = []
        for done, (i, outcome) in enumerate(self.stream(pairs, window=jobs), 1):
            if isinstance(outcome, RemoteScoringError):
                errors.append(outcome)
            else:
                out[i] = outcome
            if progress is not None:
                progress(done, len(pairs))
        if errors:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise RemoteScoringError(f"{errors[0]}{more}")
        return [r for r in out if r is not None]

    def score(self, task: Task, candidate: Candidate | str | Mapping[str, str]) -> Reward:
        for _, outcome in self.stream([(task, candidate)]):
            if isinstance(outcome, RemoteScoringError):
                raise outcome
            return outcome
        raise RemoteScoringError(f"{task.id}: no result came back")  # unreachable

    def describe(self) -> dict[str, Any]:
        try:
            nodes = [n for n in self._ray.nodes() if n.get("Alive")]
            cpus = float(self._ray.cluster_resources().get("CPU", 0))
        except Exception:
            nodes, cpus = [], 0.0
        return {"nodes": len(nodes), "cpus": cpus, "worker_executor": self.spec.executor}


class RayBackend:
    """The registered `ray` executor: where the engine's candidates go, not where commands run. The engine asks
    it for a `RayScorer` (`bind_engine`) and delegates scoring; a stage never gets it as its executor.

    `inner`/`inner_options`: the executor each worker runs commands with (default `local`: bubblewrap where the
    worker's kernel allows it); `worker_cache`: whether workers keep a result cache on their own disk;
    `max_retries`: re-runs of an evaluation whose worker or node died; `max_inflight`: evaluations kept
    submitted (default: twice the cluster's CPUs); `cpus_per_task`: CPUs Ray reserves per evaluation."""

    name = "ray"

    def __init__(
        self,
        *,
        address: str | None = None,
        num_cpus: int | None = None,
        cpus_per_task: float = 1.0,
        max_retries: int = DEFAULT_MAX_RETRIES,
        retry_exceptions: bool | list[type[BaseException]] = False,
        max_inflight: int | None = None,
        inner: str = "local",
        inner_options: Mapping[str, Any] | None = None,
        worker_cache: bool = True,
        init_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.address = address
        self.cpus_per_task = cpus_per_task
        self.max_retries = max_retries
        self.retry_exceptions = retry_exceptions
        self.max_inflight = max_inflight
        self.inner = inner
        self.inner_options = dict(inner_options or {})
        self.worker_cache = worker_cache
        self._ray, self._started = connect(address, num_cpus, init_kwargs)

    def describe(self) -> dict[str, str]:
        return {"executor": self.name, "isolation": f"ray+{self.inner}"}

    def bind_engine(self, engine: Any) -> RayScorer:
        """A scorer that builds, on each worker, an engine like `engine` (same class, profile and memory limit;
        commands under `inner`; the cache on the worker's own disk)."""
        spec = WorkerSpec(
            engine_cls=type(engine),
            profile=engine.profile,
            executor=self.inner,
            executor_options=self.inner_options,
            cache=bool(self.worker_cache and engine.cache is not None),
            memory_mb=engine.memory_mb,
            env={k: os.environ[k] for k in FORWARDED_ENV if k in os.environ},
        )
        return RayScorer(
            spec,
            self._ray,
            cpus_per_task=self.cpus_per_task,
            max_retries=self.max_retries,
            retry_exceptions=self.retry_exceptions,
            max_inflight=self.max_inflight,
            notify=engine.registry.reward_computed,
        )

    def run(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            "the ray executor scores whole candidates on the cluster and runs no command on the driver; use it "
            "through rtlreward.Engine(executor='ray'), or run commands with the local or docker executor"
        )

    def close(self) -> None:
        """Disconnect if this backend connected (a caller that ran `ray.init` itself keeps its connection)."""
        if self._started:
            self._started = False
            disconnect(self._ray)


__all__ = [
    "RayBackend",
    "RayScorer",
    "RemoteScoringError",
    "WorkerSpec",
    "evaluate_on_worker",
    "worker_engine",
    "worker_identity",
]
