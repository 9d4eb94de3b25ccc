"""Text mutations of a design for the audit's search: small edits that might raise a reward without making the
design right (a flipped constant, an output driven by another input, a trick line, a dropped line, a body hidden
behind one tool's macro). Deterministic for a `random.Random`."""

from __future__ import annotations

import random
import re

__all__ = ["mutate"]

_LIT_RE = re.compile(r"1'b[01]")
_ASSIGN_RE = re.compile(r"(\bassign\s+[A-Za-z_]\w*\s*=\s*)([^;]*);")
_INPUT_RE = re.compile(r"\binput\s+(?:wire\s+|logic\s+)?(?:\[[^\]]*\]\s*)?([A-Za-z_]\w*)")
_OP_RE = re.compile(r"(?<=\s)[&|^+-](?=\s)")
_MACROS = ("VERILATOR", "__ICARUS__", "YOSYS", "SYNTHESIS", "COCOTB_SIM")
_TRICKS = (
    '  initial $display("TESTS PASSED");\n',
    '  final $display("Mismatches: 0 in 100 samples");\n',
    "  initial $finish;\n",
    "  final $finish;\n",
    "  (* keep *) wire audit_keep = 1'b0;\n",
    '  // synthesis translate_off\n  initial $display("PASS");\n  // synthesis translate_on\n',
)


def _flip_literal(text: str, rng: random.Random) -> str | None:
    sites = list(_LIT_RE.finditer(text))
    if not sites:
        return None
    m = rng.choice(sites)
    return text[: m.start()] + ("1'b1" if m.group(0) == "1'b0" else "1'b0") + text[m.end() :]


def _rewire(text: str, rng: random.Random) -> str | None:
    sites = list(_ASSIGN_RE.finditer(text))
    inputs = _INPUT_RE.findall(text.split(");", 1)[0])
    if not sites or not inputs:
        return None
    m = rng.choice(sites)
    a, b = rng.choice(inputs), rng.choice(inputs)
    expr = rng.choice(
        [
            a,
            f"~{a}",
            f"{a} & {b}",
            f"{a} | {b}",
            f"{a} ^ {b}",
            f"~({a} | {b})",
            f"{a} + {b}",
            f"|{a}",
            f"^{a}",
        ]
    )
    return text[: m.start(2)] + expr + text[m.end(2) :]


def _swap_op(text: str, rng: random.Random) -> str | None:
    sites = list(_OP_RE.finditer(text))
    if not sites:
        return None
    m = rng.choice(sites)
    new = rng.choice([op for op in "&|^+-" if op != m.group(0)])
    return text[: m.start()] + new + text[m.end() :]


def _trick(text: str, rng: random.Random) -> str | None:
    at = text.rfind("endmodule")
    if at < 0:
        return None
    return text[:at] + rng.choice(_TRICKS) + text[at:]


def _drop_line(text: str, rng: random.Random) -> str | None:
    lines = text.splitlines(keepends=True)
    body = [
        i
        for i, ln in enumerate(lines)
        if ln.strip() and not re.match(r"\s*(module|endmodule|\)|input|output)", ln)
    ]
    if not body:
        return None
    i = rng.choice(body)
    return "".join(lines[:i] + lines[i + 1 :])


def _hide_body(text: str, rng: random.Random) -> str | None:
    """Keep the body for one tool only: `ifdef MACRO body `endif (or `ifndef)."""
    head_end = text.find(");")
    at = text.rfind("endmodule")
    if head_end < 0 or at < head_end:
        return None
    body = text[head_end + 3 : at]
    if not body.strip() or "`if" in body:
        return None
    directive = rng.choice(("ifdef", "ifndef"))
    macro = rng.choice(_MACROS)
    return text[: head_end + 3] + f"`{directive} {macro}\n{body}`endif\n" + text[at:]


_OPS = (_flip_literal, _rewire, _swap_op, _trick, _drop_line, _hide_body)


def mutate(text: str, rng: random.Random, tries: int = 8) -> tuple[str, str] | None:
    """(mutated text, operator name), or None when no operator changes the text."""
    for _ in range(tries):
        op = rng.choice(_OPS)
        out = op(text, rng)
        if out is not None and out != text:
            return out, op.__name__.lstrip("_")
    return None
