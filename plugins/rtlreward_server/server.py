"""The reward server's logic, independent of HTTP: requests -> (task, candidate) pairs -> a bounded pool of
engine workers -> rewards. `rtlreward_server.app` puts HTTP (Starlette on uvicorn) in front of it; this module
imports no web framework, so it can be embedded or tested directly (`RewardService.score(body)`).

Why a bounded pool with a bounded queue in front, and refusals beyond it: the standard-library server it
replaces ran one `Engine.score` per connection thread, so 80 looping clients meant 80 simulations on 2 cores:
a correct reply got 62x slower and once timed its compile out (a wrong reward, not just a slow one). Here at
most `jobs` evaluations run at once, at most `max_queue` more wait, and one client address at most `client_queue` of
them; a request that does not fit is refused whole (HTTP 429 with `Retry-After`, estimated from the measured time
per evaluation), so an overloaded server answers quickly and every evaluation it does run gets the machine it
was calibrated for.

Why turns across clients and not one queue in arrival order (`FairPool`): one client that sent 80 replies
looping at zero delay held both workers for all 80 evaluations, and another client's correct reply, queued
behind them, got a 504 instead of its reward. Now the workers serve clients in turn, so a client's backlog
delays another's next item by at most the evaluations already running; the loops themselves are cut at the
task's calibrated limit (rtlreward.calibration), not the profile's 60 s.

A request's items are admitted all or nothing, then evaluated one by one in the pool; identical (task,
candidate) items in one request are evaluated once (like `Engine.score_batch`), and concurrent identical items
of different requests share one evaluation through the engine's own in-flight table. Each request has a time
limit (`request_timeout`): items still queued then are cancelled (never evaluated); an item already running
cannot be stopped (a Python thread cannot be killed; its commands have their own limits), so it keeps its
slot until it ends and its result goes to the cache, where a retry finds it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import math
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import attrs

from rtlreward.engine import EngineError
from rtlreward.integration import TaskIndex
from rtlreward.model import ORIGIN_INLINE, Candidate, Reward, Task
from rtlreward.schema import reward_record

from .jsonlimits import MAX_BODY, BodyError

MAX_BATCH = 1024
DEFAULT_MAX_QUEUE = 2048  # two clients' largest batches fit at once
DEFAULT_CLIENT_QUEUE = (
    MAX_BATCH  # one client's waiting items: its largest batch fits, half the queue stays free
)
DEFAULT_REQUEST_TIMEOUT = 300.0
DISCONNECT_POLL = 0.5  # seconds between checks that a waiting request's client is still there
WAITING_ROOM_GRACE = 5.0  # seconds past its Retry-After that a refused address keeps its place in line
MAX_WAITING_ROOM = 4096  # addresses in line at once
LOCAL_CLIENT: tuple[str, str] = ("local", "local")  # callers without a connection (embedding, tests)

__all__ = [
    "DEFAULT_CLIENT_QUEUE",
    "DEFAULT_MAX_QUEUE",
    "DEFAULT_REQUEST_TIMEOUT",
    "MAX_BATCH",
    "MAX_BODY",
    "BodyError",
    "FairPool",
    "ItemError",
    "Overloaded",
    "RequestError",
    "RewardService",
]


class RequestError(ValueError):
    """A request the server refuses as a whole; `status` is the HTTP status."""

    def __init__(self, message: str, status: int = 400, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


class Overloaded(RequestError):
    """No room in the queue: retry after `retry_after` seconds (sent as `Retry-After`)."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message, 429, {"Retry-After": str(retry_after)})
        self.retry_after = retry_after


def answer(reward: Reward) -> dict[str, Any]:
    """A reward as the server answers it: the reward schema (docs/schema.md), feedback and per-stage seconds
    included, with the deprecated `task_id`/`total` (and per stage `duration`) kept for existing clients."""
    return reward_record(reward, legacy=True)


@attrs.frozen(slots=True)
class ItemError:
    """One item of a request that got no reward: its slot in a batch answer is `{"error", "status"}`."""

    message: str
    status: int = 400

    def to_dict(self) -> dict[str, Any]:
        return {"error": self.message, "status": self.status}


class _Stats:
    """Counters the /metrics endpoint reads (thread-safe; updated from the pool's threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.evaluations = 0  # Engine.score calls finished
        self.rewards = 0  # rewards handed out (an item deduplicated within a request counts once per item)
        self.item_errors: Counter[str] = Counter()  # by reason
        self.stage_results: Counter[tuple[str, str]] = Counter()  # (stage, status) of evaluated candidates
        self.stage_cached: Counter[str] = Counter()
        self.rejected = 0  # requests refused for lack of room (429)
        self.timed_out = 0  # items that missed their request's time limit

    def count_reward(self, reward: Reward) -> None:
        with self.lock:
            self.evaluations += 1
            for name, result in reward.stages.items():
                self.stage_results[(name, result.status.value)] += 1
                if result.cached:
                    self.stage_cached[name] += 1


class FairPool:
    """`workers` threads taking work in turns across clients, not in arrival order.

    A client is a pair (group, connection): the group is the client's address, the connection one TCP
    connection of it. A free worker takes the next item of the group with the fewest items running (ties: the
    one served longest ago), and within it of the connection chosen the same way; within one connection items
    keep their order. So a client that queued 80 slow items delays another client's item only until a worker
    is free (at most one evaluation per worker, those running when it arrived), and a trainer on another host
    gets its share of the workers however many connections the first one opens. Futures are
    `concurrent.futures.Future`s: a queued item can be cancelled (it never runs); a running one cannot (its
    commands have their own limits)."""

    def __init__(self, workers: int, name: str = "rtlreward-serve") -> None:
        self._cond = threading.Condition()
        self._waiting: dict[str, dict[str, deque[tuple[cf.Future, Any, tuple[Any, ...]]]]] = {}
        self._running: Counter[str] = Counter()  # items running, per group and per (group, connection) key
        self._served: dict[str, int] = {}  # the turn at which each key last had an item started
        self._turn = 0
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
            for i in range(max(1, workers))
        ]
        for t in self._threads:
            t.start()

    def submit(self, client: tuple[str, str], fn: Any, *args: Any) -> cf.Future:
        fut: cf.Future = cf.Future()
        group, conn = client
        with self._cond:
            if self._closed:
                raise RuntimeError("the pool is shut down")
            self._waiting.setdefault(group, {}).setdefault(conn, deque()).append((fut, fn, args))
            self._cond.notify()
        return fut

    def _pick(self, keys: Any, prefix: str) -> str:
        return min(keys, key=lambda k: (self._running[prefix + k], self._served.get(prefix + k, -1)))

    def _next(self) -> tuple[str, str, cf.Future, Any, tuple[Any, ...]] | None:
        """The next item in turn, or None once closed (called with the lock held)."""
        while not self._closed:
            if not self._waiting:
                self._cond.wait()
                continue
            group = self._pick(self._waiting, "")
            conns = self._waiting[group]
            conn = self._pick(conns, group + "\0")
            fut, fn, args = conns[conn].popleft()
            if not conns[conn]:
                del conns[conn]
                if not conns:
                    del self._waiting[group]
            if fut.set_running_or_notify_cancel():
                self._turn += 1
                for key in (group, group + "\0" + conn):
                    self._running[key] += 1
                    self._served[key] = self._turn
                return group, conn, fut, fn, args
            self._forget_idle(group, conn)  # a cancelled item: its client may have nothing left
        return None

    def _forget_idle(self, group: str, conn: str) -> None:
        """Drop the turn records of a client with nothing waiting or running (called with the lock held)."""
        waiting = self._waiting.get(group, {})
        for key, idle in ((group, not waiting), (group + "\0" + conn, conn not in waiting)):
            if idle and self._running[key] <= 0:
                self._running.pop(key, None)
                self._served.pop(key, None)

    def _work(self) -> None:
        while True:
            with self._cond:
                item = self._next()
            if item is None:
                return
            group, conn, fut, fn, args = item
            try:
                result = fn(*args)
            except BaseException as exc:  # the future carries it to whoever waits
                fut.set_exception(exc)
            else:
                fut.set_result(result)
            finally:
                with self._cond:
                    for key in (group, group + "\0" + conn):
                        self._running[key] -= 1
                    self._forget_idle(group, conn)  # nothing of it left: a client seen once costs nothing

    def shutdown(self) -> None:
        """Cancel every queued item; the workers end once their running items finish."""
        with self._cond:
            self._closed = True
            for conns in self._waiting.values():
                for items in conns.values():
                    for fut, _, _ in items:
                        fut.cancel()
            self._waiting.clear()
            self._cond.notify_all()


class RewardService:
    """Tasks by id, a bounded pool of engine workers and the request formats, without HTTP.

    `jobs` evaluations run at once (default: the engine's `jobs`), `max_queue` more may wait, one client address
    at most `client_queue` of them (beyond `jobs` running); a request whose distinct items do not fit is refused
    (`Overloaded`, HTTP 429). Clients are served in turns (`FairPool`). `allow_inline_tasks` (off by default): inline
    tasks carry harness code the server will run, so a client that may send them can run code of its choosing
    in the sandbox; the core keeps their results in their own cache namespace either way."""

    def __init__(
        self,
        engine: Any,
        tasks: Iterable[Task] = (),
        *,
        allow_inline_tasks: bool = False,
        jobs: int | None = None,
        max_queue: int = DEFAULT_MAX_QUEUE,
        client_queue: int = DEFAULT_CLIENT_QUEUE,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        self.engine = engine
        self.tasks = TaskIndex(tasks)
        self.allow_inline_tasks = allow_inline_tasks
        self.jobs = max(1, int(jobs or getattr(engine, "jobs", 0) or 1))
        self.max_queue = max(0, int(max_queue))
        self.capacity = self.jobs + self.max_queue
        self.client_queue = max(0, int(client_queue))
        self.client_capacity = min(self.capacity, self.jobs + self.client_queue)
        self.request_timeout = request_timeout if request_timeout and request_timeout > 0 else None
        self.stats = _Stats()
        self._fingerprints: dict[str, tuple[Task, str]] = {}
        self._lock = threading.Lock()
        self._pending = 0  # admitted items not finished: waiting + running
        self._client_pending: Counter[str] = Counter()  # the same, per client address (FairPool's group)
        self._waiting_room: OrderedDict[str, tuple[int, float]] = (
            OrderedDict()
        )  # refused: address -> (n, until)
        self._running = 0
        self._mean_eval = 1.0  # seconds per evaluation, a moving average (for Retry-After)
        self._pool = FairPool(self.jobs)
        self._closing = False

    # -- requests -> items ------------------------------------------------------------------------------------
    def parse_item(self, item: Any) -> tuple[Task, Candidate]:
        """One `{"task_id" | "task", "completion" | "files", "sample"?}` item, or RequestError saying what is
        wrong with it. Never raises anything else, whatever the item holds."""
        if not isinstance(item, dict):
            raise RequestError("each item must be a JSON object")
        if "task" in item:
            if not self.allow_inline_tasks:
                raise RequestError(
                    "inline tasks are disabled on this server (they carry harness code it would run): send a "
                    "task_id of a loaded task, or start the server with --allow-inline-tasks",
                    403,
                )
            raw = item["task"]
            if not isinstance(raw, dict):
                raise RequestError("'task' must be a task object (Task.to_dict()), not " + type(raw).__name__)
            try:
                # Its own cache namespace, whatever the request says: an inline task never shares a cached
                # result or an in-flight evaluation with a loaded task, even one with the same id.
                task = Task.from_dict(raw, origin=ORIGIN_INLINE)
                task.fingerprint()  # a value that cannot be hashed fails here, as this item's error
            except Exception as exc:  # any shape a client can send must come back as this item's error
                raise RequestError(f"bad inline task: {type(exc).__name__}: {exc}") from None
        elif "task_id" in item:
            task_id = item["task_id"]
            if not isinstance(task_id, str | int):
                raise RequestError("'task_id' must be a string")
            try:
                task = self.tasks.get(str(task_id))
            except KeyError as exc:
                raise RequestError(str(exc.args[0]), 404) from None
        else:
            raise RequestError("an item needs 'task_id' (a task the server loaded) or 'task' (a task object)")
        completion, files = item.get("completion"), item.get("files")
        if completion is None and files is None:
            raise RequestError("an item needs 'completion' (the raw reply) or 'files' ({path: text})")
        if completion is not None and not isinstance(completion, str):
            raise RequestError("'completion' must be a string")
        if files is not None and (
            not isinstance(files, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
        ):
            raise RequestError("'files' must map path strings to text strings")
        sample = item.get("sample", 0)
        if sample is None:
            sample = 0
        if isinstance(sample, bool) or not isinstance(sample, int):
            raise RequestError("'sample' must be an integer")
        return task, Candidate(text=completion, files=files, sample=sample)

    def batch_items(self, body: Any) -> list[Any]:
        items = body.get("items") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise RequestError('a batch is {"items": [...]}')
        if len(items) > MAX_BATCH:
            raise RequestError(f"at most {MAX_BATCH} items per batch; split the request", 413)
        return items

    # -- the bounded pool -------------------------------------------------------------------------------------
    def _fingerprint(self, task: Task) -> str:
        """A loaded task's fingerprint, computed once (a CVDP task takes milliseconds to hash, and a 1024-item
        batch is deduplicated on the event loop); anything else's, computed each time."""
        loaded = self._fingerprints.get(task.id)
        if loaded is not None and loaded[0] is task:
            return loaded[1]
        fp = task.fingerprint()
        if task.id in self.tasks and self.tasks.get(task.id) is task:
            self._fingerprints[task.id] = (task, fp)
        return fp

    def _retry_after(self, ahead: int) -> int:
        """Seconds until about `ahead` items have left the workers."""
        with self._lock:
            mean = self._mean_eval
        return int(min(120, max(1, math.ceil((ahead + 1) * mean / self.jobs))))

    def _admit(self, n: int, client: tuple[str, str]) -> None:
        """Admit `n` items of `client` or raise. When the queue is full, a refused address is put in line
        (`_waiting_room`): room freed later goes to those ahead in line first, so addresses that keep topping the
        queue up one item at a time cannot keep another's batch out forever. A place in line lapses when its
        address does not come back within its Retry-After and a few seconds."""
        if n > self.client_capacity:
            raise RequestError(
                f"{n} distinct items is more than one client may have waiting at once ({self.client_capacity}: "
                f"{self.jobs} workers + --client-queue {self.client_queue}, within --max-queue "
                f"{self.max_queue}); split the request",
                413,
            )
        address = client[0]
        now = time.monotonic()
        with self._lock:
            line = self._waiting_room
            for other in [a for a, (_, until) in line.items() if until < now]:
                del line[other]
            ahead = 0  # room held for the addresses in line before this one
            for other, (wanted, _) in line.items():
                if other == address:
                    break
                ahead += wanted
            mine = self._client_pending[address]
            if mine + n <= self.client_capacity and self._pending + n + ahead <= self.capacity:
                self._pending += n
                self._client_pending[address] += n
                line.pop(address, None)
                return
            if mine + n > self.client_capacity:
                why = (
                    f"your address has {mine} items waiting or running (at most {self.client_capacity}: "
                    "--client-queue)"
                )
                wait_for = mine + n - self.client_capacity
            else:
                queued = max(0, self._pending - self._running)
                why = f"server busy: {queued} items queued, {self._running} running"
                wait_for = self._pending + n + ahead - self.capacity
        retry = self._retry_after(wait_for)
        if not mine + n > self.client_capacity:
            with self._lock:  # in line (keeping its place if it had one) until shortly after its Retry-After
                place = self._waiting_room.get(address)
                self._waiting_room[address] = (n, now + retry + WAITING_ROOM_GRACE)
                if place is None and len(self._waiting_room) > MAX_WAITING_ROOM:
                    self._waiting_room.popitem(last=True)  # a full line takes no newcomer
        with self.stats.lock:
            self.stats.rejected += 1
        raise Overloaded(f"{why}; retry later", retry)

    def _evaluate(self, task: Task, cand: Candidate) -> Reward:
        with self._lock:
            self._running += 1
        start = time.monotonic()
        try:
            reward = self.engine.score(task, cand)
        finally:
            took = time.monotonic() - start
            with self._lock:
                self._running -= 1
                self._mean_eval = 0.8 * self._mean_eval + 0.2 * took
        self.stats.count_reward(reward)
        return reward

    def _release(self, client: tuple[str, str]) -> None:
        with self._lock:
            self._pending -= 1
            self._client_pending[client[0]] -= 1
            if self._client_pending[client[0]] <= 0:
                del self._client_pending[client[0]]

    def submit(
        self, pairs: Sequence[tuple[Task, Candidate]], client: tuple[str, str] = LOCAL_CLIENT
    ) -> tuple[list[cf.Future], list[int]]:
        """Admit `pairs` for `client` ((group, connection): see `FairPool`) all or nothing (RequestError or
        Overloaded otherwise) and queue their distinct ones. Returns the futures of the distinct pairs and, per
        pair, the index of its future."""
        index: dict[tuple[str, str], int] = {}
        slots: list[int] = []
        unique: list[tuple[Task, Candidate]] = []
        for task, cand in pairs:
            key = (self._fingerprint(task), cand.fingerprint())
            if key not in index:
                index[key] = len(unique)
                unique.append((task, cand))
            slots.append(index[key])
        if not unique:
            return [], slots
        self._admit(len(unique), client)
        futures = []
        try:
            for task, cand in unique:
                fut = self._pool.submit(client, self._evaluate, task, cand)
                fut.add_done_callback(lambda _f: self._release(client))
                futures.append(fut)
        except RuntimeError:  # the pool was shut down (server stopping)
            for _ in range(len(unique) - len(futures)):
                self._release(client)
            for fut in futures:
                fut.cancel()
            raise RequestError("the server is shutting down", 503) from None
        return futures, slots

    def _outcomes(
        self, pairs: Sequence[tuple[Task, Candidate]], futures: list[cf.Future], slots: list[int]
    ) -> list[Reward | ItemError]:
        """Per pair, its reward (with its own `sample`) or why it has none; cancels what is still queued."""
        timeout_msg = (
            f"not scored within the server's time limit ({self.request_timeout:g} s, --request-timeout); "
            "an evaluation already running finishes and is cached, so a retry later is cheap"
        )
        done: list[Reward | ItemError] = []
        for fut in futures:
            if not fut.done():
                fut.cancel()
                done.append(ItemError(timeout_msg, 504))
                with self.stats.lock:
                    self.stats.timed_out += 1
            elif fut.cancelled():
                done.append(ItemError("cancelled: the server is shutting down", 503))
            elif fut.exception() is not None:
                exc = fut.exception()
                if isinstance(exc, EngineError) and self._closing:  # the server stopped while it was set up
                    done.append(ItemError("cancelled: the server is shutting down", 503))
                else:
                    done.append(ItemError(f"internal error while scoring: {type(exc).__name__}: {exc}", 500))
            else:
                done.append(fut.result())
        out: list[Reward | ItemError] = []
        seen: set[int] = set()
        for (task, cand), slot in zip(pairs, slots, strict=True):
            outcome = done[slot]
            if isinstance(outcome, Reward) and slot in seen:
                outcome = attrs.evolve(outcome, sample=cand.sample)
                registry = getattr(self.engine, "registry", None)
                if registry is not None:  # observers hear of every reward, as with Engine.score_batch
                    registry.reward_computed(task, cand, outcome)
            elif isinstance(outcome, Reward) and outcome.sample != cand.sample:
                outcome = attrs.evolve(outcome, sample=cand.sample)
            seen.add(slot)
            out.append(outcome)
        with self.stats.lock:
            self.stats.rewards += sum(isinstance(o, Reward) for o in out)
            for o in out:
                if isinstance(o, ItemError):
                    self.stats.item_errors[str(o.status)] += 1
        return out

    def run(
        self, pairs: Sequence[tuple[Task, Candidate]], client: tuple[str, str] = LOCAL_CLIENT
    ) -> list[Reward | ItemError]:
        """Score `pairs` through the pool, waiting in this thread (embedding, tests)."""
        futures, slots = self.submit(pairs, client)
        cf.wait(futures, timeout=self.request_timeout)
        return self._outcomes(pairs, futures, slots)

    async def arun(
        self,
        pairs: Sequence[tuple[Task, Candidate]],
        client: tuple[str, str] = LOCAL_CLIENT,
        gone: Callable[[], Awaitable[bool]] | None = None,
    ) -> list[Reward | ItemError]:
        """Score `pairs` through the pool without blocking the event loop. `gone` (the HTTP request's
        `is_disconnected`) is asked every `DISCONNECT_POLL` seconds while items wait: once the client has left,
        its queued items are cancelled (a client that sends 80 slow replies and hangs up no longer holds the
        workers for nobody) and running ones finish into the cache."""
        futures, slots = self.submit(pairs, client)
        if not futures:
            return self._outcomes(pairs, futures, slots)
        pending = {asyncio.wrap_future(f) for f in futures}
        deadline = None if self.request_timeout is None else time.monotonic() + self.request_timeout
        while pending:
            waits = [
                w
                for w in (DISCONNECT_POLL if gone else None, deadline and deadline - time.monotonic())
                if w is not None
            ]
            if waits and min(waits) <= 0:
                break  # the request's time limit
            _, pending = await asyncio.wait(pending, timeout=min(waits) if waits else None)
            if pending and gone is not None and await gone():
                for fut in futures:
                    fut.cancel()
                with self.stats.lock:
                    self.stats.item_errors["499"] += len(pairs)
                return [ItemError("the client went away before its answer", 499)] * len(pairs)
        return self._outcomes(pairs, futures, slots)

    # -- request bodies ---------------------------------------------------------------------------------------
    def split_batch(self, body: Any) -> tuple[list[tuple[Task, Candidate]], list[int | ItemError]]:
        """The batch's valid pairs and, per item, the index of its pair or its error."""
        pairs: list[tuple[Task, Candidate]] = []
        where: list[int | ItemError] = []
        for item in self.batch_items(body):
            try:
                pairs.append(self.parse_item(item))
                where.append(len(pairs) - 1)
            except RequestError as exc:
                where.append(ItemError(str(exc), exc.status))
                with self.stats.lock:
                    self.stats.item_errors[str(exc.status)] += 1
        return pairs, where

    @staticmethod
    def merge_batch(where: list[int | ItemError], outcomes: list[Reward | ItemError]) -> dict[str, Any]:
        # a slot is a bad item (ItemError in `where`), or an outcome: a reward, or an item that failed later
        got = [w if isinstance(w, ItemError) else outcomes[w] for w in where]
        rewards = [x.to_dict() if isinstance(x, ItemError) else answer(x) for x in got]
        return {"rewards": rewards}

    def score(self, body: Any) -> dict[str, Any]:
        """`POST /score` without HTTP: the reward as a dict, or RequestError."""
        (outcome,) = self.run([self.parse_item(body)])
        if isinstance(outcome, ItemError):
            raise RequestError(outcome.message, outcome.status)
        return answer(outcome)

    def score_batch(self, body: Any) -> dict[str, Any]:
        """`POST /score_batch` without HTTP: `{"rewards": [...]}` in order, a bad item's slot holding
        `{"error", "status"}` and the others their rewards."""
        pairs, where = self.split_batch(body)
        return self.merge_batch(where, self.run(pairs) if pairs else [])

    # -- state ------------------------------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._running

    @property
    def queue_depth(self) -> int:
        with self._lock:
            return max(0, self._pending - self._running)

    @property
    def clients(self) -> int:
        """Client addresses with items waiting or running."""
        with self._lock:
            return len(self._client_pending)

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "profile": getattr(getattr(self.engine, "profile", None), "name", None),
            "tasks": len(self.tasks),
            "in_flight": self.in_flight,
            "queue_depth": self.queue_depth,
            "capacity": self.capacity,
            "clients": self.clients,
        }

    def close(self) -> None:
        """Stop taking work; queued items are cancelled, running ones finish in the background."""
        self._closing = True
        self._pool.shutdown()
