"""Prompt styles for corpus tasks (`--style` of `rtlreward prompts` and `rtlreward sample`):

- `benchmark` (also `auto`): the corpus's own prompt and system prompt, as written;
- `spec`: the same prompt followed by the interface spelled out for exact compliance: the module name, every port
  with its direction and exact width, the clock edge, the reset's name, polarity and whether it is synchronous,
  and that the reset takes priority over every other input. Those facts are read from the reference design's
  header and its always blocks (what an interface document states), never its logic.
"""

from __future__ import annotations

import re

from rtlreward.model import Task

__all__ = ["STYLES", "messages", "spec_section"]

STYLES = ("auto", "benchmark", "spec")
_RESET = re.compile(r"(?:^|_)(?:a?s?rst|reset|clr|clear)(?:_?n|_b|_l)?$", re.I)


def _timing(task: Task) -> tuple[str | None, str | None, bool, bool]:
    """(clock, reset, reset active low, reset asynchronous) from the reference's always blocks."""
    design = "\n".join((task.reference or {}).values())
    ports = {p.name for p in (task.interface.ports if task.interface else ()) if p.direction == "input"}
    edges = re.findall(r"\b(posedge|negedge)\s+([A-Za-z_]\w*)", design)
    resets = [p for p in ports if _RESET.search(p)]
    reset = resets[0] if len(resets) == 1 else None
    clocks = [n for e, n in edges if n in ports and n != reset]
    clock = clocks[0] if clocks else None
    low = asyn = False
    if reset:
        asyn = any(n == reset for _, n in edges)
        low = bool(
            re.search(rf"negedge\s+{reset}\b", design)
            or re.search(rf"if\s*\(\s*(?:!|~)\s*{reset}\s*\)", design)
            or re.search(rf"if\s*\(\s*{reset}\s*==\s*1'b0\s*\)", design)
        )
    return clock, reset, low, asyn


def spec_section(task: Task) -> str:
    iface = task.interface
    if iface is None:
        return ""
    lines = [
        "Interface (follow it exactly: the same module name, port names, directions and widths; no other ports):",
        f"- module `{iface.module}`",
    ]
    for p in iface.ports:
        width = f"[{p.width - 1}:0] ({p.width} bits)" if p.width and p.width > 1 else "1 bit"
        lines.append(f"- {p.direction} `{p.name}`: {width}")
    clock, reset, low, asyn = _timing(task)
    if clock:
        lines.append(f"- `{clock}` is the clock: registers update on its rising edge only")
    if reset:
        lines.append(
            f"- `{reset}` is an active-{'low' if low else 'high'} "
            f"{'asynchronous' if asyn else 'synchronous'} reset; it takes priority over every other input"
        )
    return "\n".join(lines)


def messages(task: Task, style: str = "auto") -> list[dict[str, str]]:
    if style not in STYLES:
        raise ValueError(
            f"unknown prompt style {style!r} for a corpus task; the styles are {', '.join(STYLES)}"
        )
    out = []
    if task.system_prompt:
        out.append({"role": "system", "content": task.system_prompt})
    prompt = task.prompt
    if style == "spec":
        section = spec_section(task)
        if section:
            prompt = f"{prompt.rstrip()}\n\n{section}\n"
    out.append({"role": "user", "content": prompt})
    return out
