"""Calibrated time limits by default: each task's reference, run once through the engine's own stages, sets how
long a candidate's commands may take in each stage.

A stage's default limit is the worst case any task may need (the tests stage: a minute), so an answer that never
ends (a zero-delay loop, a testbench waiting forever for a handshake) costs that minute on every sample. A task
with a reference knows better: its reference's time in each stage, measured once per task and toolchain, gives
`max(floor, factor x that time)` per command, applied like a task health report's limits (`rtlreward.health`):
only where it is shorter than the profile's. A health report's limits, where a task carries them, win.

What is measured is the engine's own evaluation of the reference, with the engine's profile, executor and
tools; the result is kept in memory and on disk (`<cache dir>/calibration/`, keyed by the task's fingerprint,
the stages' versions and tool versions and the executor), so a trainer pays it once per task, not per step. A
reference that does not pass its own stages calibrates nothing (the task keeps the profile's limits): its time
says nothing about a correct answer's. Stages that manage their own budgets (`calibrate = False` on the stage,
e.g. equivalence, which already times its simulations from the reference's) are left alone. The result cache keys
on the profile's limit, not the calibrated one (a calibrated limit only cuts runs short; a timeout is never cached),
and the reference's timing run neither reads nor fills it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rtlreward.cache import default_cache_dir
from rtlreward.model import Reward, Status, hash_json

__all__ = ["CPU_FLOOR", "CPU_SHARE", "FACTOR", "FLOOR", "Calibrator", "cpu_limit", "limits_from"]

VERSION = 1
FLOOR = 2.0  # seconds: the least per-command limit a calibrated stage gets
FACTOR = (
    10.0  # x the reference's time in the stage (one run, so a wide margin for load and for slower answers)
)
_MEMORY = 4096  # tasks remembered in-process
# Under a calibrated wall-clock limit, a simulation's run also gets a CPU-time limit of half of it, at least 1 s (the
# kernel's granularity for RLIMIT_CPU). A run is one single-threaded process, so its CPU time is at most its wall
# time, and unlike the wall clock it does not stretch when the machine is loaded: the wall limit's floor is a margin
# for load, which a loop that never advances time (all CPU) need not be given.
CPU_SHARE = 0.5
CPU_FLOOR = 1.0


def cpu_limit(wall: float) -> float:
    """The CPU-time limit of a simulation run under the calibrated wall-clock limit `wall` (seconds)."""
    return max(CPU_FLOOR, wall * CPU_SHARE)


def limits_from(
    reward: Reward, stages: Mapping[str, Any], floor: float = FLOOR, factor: float = FACTOR
) -> dict:
    """{stage: seconds} from the reference's reward: every stage it ran and passed, unless the stage manages its
    own budgets. {} when the reference did not pass (its time then says nothing)."""
    if not reward.passed:
        return {}
    out: dict[str, float] = {}
    for name, res in reward.stages.items():
        stage = stages.get(name)
        if stage is None or getattr(stage, "calibrate", True) is False:
            continue
        if res.status is not Status.PASSED or res.cached:
            continue  # a cached result's duration is another run's
        out[name] = round(max(floor, factor * float(res.duration)), 2)
    return out


class Calibrator:
    """Per-task limits, measured once: `limits(task_fp, context, measure)` returns the cached limits or calls
    `measure()` (the reference's Reward) under a per-task lock, so concurrent samples of one task wait for one
    measurement."""

    def __init__(
        self,
        stages: Mapping[str, Any],
        *,
        floor: float = FLOOR,
        factor: float = FACTOR,
        directory: str | Path | None = None,
    ) -> None:
        self.stages = stages
        self.floor = floor
        self.factor = factor
        self.directory = Path(directory) if directory else default_cache_dir() / "calibration"
        self._memory: dict[str, dict[str, float]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def key(self, task_fp: str, context: Mapping[str, Any]) -> str:
        return hash_json(
            {"v": VERSION, "task": task_fp, "floor": self.floor, "factor": self.factor, **context}
        )

    def limits(self, key: str, measure: Callable[[], Reward | None]) -> dict[str, float]:
        with self._lock:
            if key in self._memory:
                return self._memory[key]
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            with self._lock:
                if key in self._memory:
                    return self._memory[key]
            found = self._load(key)
            if found is None:
                reward = measure()
                if (
                    reward is None
                ):  # the measurement itself broke: nothing remembered, the profile's limits hold
                    return {}
                found = limits_from(reward, self.stages, self.floor, self.factor)
                if reward.passed:  # a failed reference is measured again by the next process (see `_save`)
                    self._save(key, found, reward)
            with self._lock:
                if len(self._memory) >= _MEMORY:
                    self._memory.pop(next(iter(self._memory)))
                self._memory[key] = found
                self._locks.pop(key, None)
            return found

    def record(self, key: str, reward: Reward) -> None:
        """Keep the reference's reward scored as a candidate (with the profile's limits) as the measurement, unless
        the task already has one."""
        with self._lock:
            if key in self._memory:
                return
        if self._load(key) is not None:
            return
        found = limits_from(reward, self.stages, self.floor, self.factor)
        if reward.passed:
            self._save(key, found, reward)
        with self._lock:
            self._memory.setdefault(key, found)

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def _load(self, key: str) -> dict[str, float] | None:
        try:
            data = json.loads(self._path(key).read_text())
            return {str(k): float(v) for k, v in data["limits"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def _save(self, key: str, limits: Mapping[str, float], reward: Reward) -> None:
        """Only a passing reference's measurement is kept on disk: a failure may be the machine's or a version's
        of rtlreward (a tool broken for a while, a bug since fixed), and kept, it would leave the task on the
        profile's limits for good (a hung candidate then waits out VerilogEval's 30 s). This process remembers it."""
        entry = {
            "limits": dict(limits),
            "reference_passed": bool(reward.passed),
            "durations": {n: round(r.duration, 4) for n, r in reward.stages.items()},
        }
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "w") as f:
                json.dump(entry, f)
            os.replace(tmp, path)
        except OSError as exc:  # a read-only cache costs a measurement per process, nothing else
            logging.getLogger("rtlreward.calibration").debug("could not save %s: %r", path, exc)
