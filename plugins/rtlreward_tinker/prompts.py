"""The chat an episode starts from, and how a long one is cut to fit the prompt budget.

Prompts belong to the datasets: each loader fills `Task.prompt` and `Task.system_prompt`. A dataset that can
build its chat in another style (CVDP: the `agentic` layout prompt for an agentic episode over a copilot
record) offers `messages(task, style)`; this module asks the task's dataset for it and otherwise builds the chat
from the task's own fields. It never special-cases a benchmark by name or id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from rtlreward.model import Task
from rtlreward_tinker.base import log, render

TRUNCATION_MARK = "\n\n[... {n} characters of context truncated to fit the prompt budget ...]\n\n"


def dataset_of(task: Task) -> Any:
    """The registered dataset a task came from, or None (inline tasks, exported task files without a name,
    a registry that cannot load)."""
    if not task.dataset:
        return None
    try:
        from rtlreward.plugins import get_registry

        return get_registry().datasets().get(task.dataset)
    except Exception:  # a broken third-party plugin must not stop training on the task's own prompt
        log.warning("rtlreward: cannot look up dataset %r; using the task's own prompt", task.dataset)
        return None


def task_messages(task: Task, style: str = "auto") -> list[dict[str, str]]:
    """The chat for a task: its dataset's `messages(task, style)` when the dataset offers one, else the task's
    system prompt and prompt. `style` is `auto` (as loaded) or `agentic` (an episode in a /code workspace);
    a dataset without that style returns its usual chat."""
    messages_of = getattr(dataset_of(task), "messages", None)
    if callable(messages_of):
        return [dict(m) for m in messages_of(task, style)]
    from rtlreward.integration import task_messages as generic

    return generic(task)


def shrink_context(task: Task, drop: int) -> Task:
    """The task with `drop` characters cut from the middles of its context files, in proportion to their size:
    prompts that inline the context (CVDP's copilot prompt) then shrink while the request stays whole."""
    total = sum(len(t) for t in task.context.values())
    if drop <= 0 or total == 0:
        return task
    ctx = {}
    for path, text in task.context.items():
        share = min(len(text), -(-drop * len(text) // total))
        ctx[path] = _cut_middle(text, share, 0, 0) if share else text
    return attrs.evolve(task, context=ctx)


def _cut_middle(text: str, drop: int, keep_head: int, keep_tail: int) -> str:
    """Drop `drop` characters from the middle of `text`, never touching the first `keep_head` (where prompts state
    the instruction) nor the last `keep_tail` characters (where they state the answer format)."""
    room = len(text) - keep_head - keep_tail
    drop = max(0, min(drop, room))
    if drop == 0:
        return text
    start = keep_head + (room - drop) // 2
    return text[:start] + TRUNCATION_MARK.format(n=drop) + text[start + drop :]


def fit_messages(
    messages: list[dict[str, str]],
    count_tokens: Callable[[list[dict[str, str]]], int],
    max_prompt_tokens: int | None,
    *,
    keep_head: int = 1500,
    keep_tail: int = 1000,
) -> tuple[list[dict[str, str]], int]:
    """Shorten the longest message's middle (the spec and context files) until the rendered prompt fits, keeping
    the instruction at its head and the answer-format request at its tail. Returns (messages, characters cut).
    When even the maximal cut does not fit, the maximally cut prompt is returned: the cookbook then reports it
    as an overlong prompt rather than us failing the batch."""
    if not max_prompt_tokens or count_tokens(messages) <= max_prompt_tokens:
        return messages, 0
    idx = max(range(len(messages)), key=lambda i: len(messages[i].get("content") or ""))
    text = messages[idx]["content"]
    room = max(0, len(text) - keep_head - keep_tail)

    def with_drop(drop: int) -> list[dict[str, str]]:
        out = [dict(m) for m in messages]
        out[idx]["content"] = _cut_middle(text, drop, keep_head, keep_tail)
        return out

    lo, hi = 0, room  # smallest drop that fits, by bisection on the token count
    if count_tokens(with_drop(hi)) > max_prompt_tokens:
        return with_drop(hi), hi
    while lo < hi:
        mid = (lo + hi) // 2
        if count_tokens(with_drop(mid)) <= max_prompt_tokens:
            hi = mid
        else:
            lo = mid + 1
    return with_drop(lo), lo


def prompt_for(
    task: Task, renderer: Any, max_prompt_tokens: int | None, style: str = "auto"
) -> tuple[list[dict[str, str]], int]:
    """The task's chat fitted to `max_prompt_tokens`: first by cutting its context files (when the dataset's
    prompt is built from them), then, if that is not enough, by cutting the middle of the longest message."""

    def count(msgs: list[dict[str, str]]) -> int:
        return render(renderer, msgs).length

    messages = task_messages(task, style)
    if not max_prompt_tokens or count(messages) <= max_prompt_tokens or not task.context:
        return fit_messages(messages, count, max_prompt_tokens)
    total = sum(len(t) for t in task.context.values())
    shrunk = task_messages(shrink_context(task, total), style)
    if shrunk == messages:  # the prompt does not inline the context files
        return fit_messages(messages, count, max_prompt_tokens)
    if count(shrunk) > max_prompt_tokens:
        msgs, cut = fit_messages(shrunk, count, max_prompt_tokens)
        return msgs, total + cut
    lo, hi = 0, total  # the smallest cut of the context that fits
    while lo < hi:
        mid = (lo + hi) // 2
        if count(task_messages(shrink_context(task, mid), style)) <= max_prompt_tokens:
            hi = mid
        else:
            lo = mid + 1
    return task_messages(shrink_context(task, lo), style), lo
