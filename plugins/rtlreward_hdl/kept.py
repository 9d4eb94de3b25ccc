"""What a scoring process keeps of a task across its candidates (a reference's preprocessed view, its compiled
testbench, its side of the proof; a benchmark testbench's preprocessed text): a map of at most `limit` entries,
the oldest dropped first, safe to share between the engine's threads."""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

__all__ = ["Kept"]


class Kept:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: dict[Hashable, Any] = {}
        self._lock = threading.Lock()

    def lookup(self, key: Hashable) -> tuple[bool, Any]:
        """(whether `key` is kept, its value): a kept None ("it cannot be had") is told from an unknown key."""
        with self._lock:
            return key in self._items, self._items.get(key)

    def get(self, key: Hashable) -> Any:
        return self.lookup(key)[1]

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.limit:
                self._items.pop(next(iter(self._items)))

    def values(self) -> list[Any]:
        with self._lock:
            return list(self._items.values())

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
