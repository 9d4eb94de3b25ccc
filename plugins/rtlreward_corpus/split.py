"""Deterministic train/validation/test splits by hash: a task's split depends on its key and the seed only, so
adding or removing other problems never moves it, and every machine computes the same split.

The key is the task's reference design with comments and whitespace folded, so two copies of one problem (same
design, reworded prompt) always land in the same split: a duplicate cannot leak from train into test.
"""

from __future__ import annotations

import hashlib
import re

from rtlreward.model import Task

__all__ = ["DEFAULT_RATIOS", "design_key", "parse_ratios", "split_of"]

DEFAULT_RATIOS = (("train", 0.8), ("validation", 0.1), ("test", 0.1))


def design_key(task: Task) -> str:
    """The reference with comments and whitespace folded (the same key dedup groups identical texts by)."""
    from rtlreward_hdl.files import strip_comments

    text = "\n".join(v for _, v in sorted((task.reference or {}).items()))
    return re.sub(r"\s+", " ", strip_comments(text)).strip()


def parse_ratios(text: str | None) -> tuple[tuple[str, float], ...]:
    """`train=0.8,validation=0.1,test=0.1` (weights are normalised)."""
    if not text:
        return DEFAULT_RATIOS
    out = []
    for part in text.split(","):
        name, sep, value = part.partition("=")
        try:
            weight = float(value)
        except ValueError:
            weight = -1.0
        if not sep or not name.strip() or weight < 0:
            raise ValueError(
                f"split ratio {part!r} is not name=weight (e.g. train=0.8,validation=0.1,test=0.1)"
            )
        out.append((name.strip(), weight))
    total = sum(w for _, w in out)
    if total <= 0:
        raise ValueError("split ratios sum to 0")
    return tuple((n, w / total) for n, w in out)


def split_of(task: Task, ratios: tuple[tuple[str, float], ...] = DEFAULT_RATIOS, seed: int = 0) -> str:
    """The split a task falls in: sha256(seed, design key) as a number in [0, 1) against the cumulative ratios."""
    digest = hashlib.sha256(f"{seed}\0{design_key(task)}".encode("utf-8", "backslashreplace")).digest()
    x = int.from_bytes(digest[:8], "big") / 2**64
    acc = 0.0
    for name, weight in ratios:
        acc += weight
        if x < acc:
            return name
    return ratios[-1][0]
