"""Mutants of a Verilog design: small, plausible bugs (an output stuck at 0, an input the design ignores, a
swapped operator, a changed constant, a dropped reset branch, an inverted condition, swapped concatenation or
ternary arms), one site (or one port) each.

A harness that passes a mutant which is *not* equivalent to the reference cannot tell that bug from a correct
design, so a policy trained on it can learn the bug. `rtlreward tasks check` uses these mutants to grade harnesses.
The operators work on the text with comments and strings blanked (offsets stay those of the original), and each
mutant changes exactly one site, so the report can show the change as `file:line: before -> after`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

import attrs

from rtlreward_hdl.files import SOURCE_EXTS, strip_comments

__all__ = ["Mutant", "mutants"]


@attrs.frozen
class Mutant:
    operator: str  # stuck_output | stuck_input | condition | reset | binop | constant | concat | ternary
    file: str
    line: int
    before: str
    after: str
    files: dict[str, str] = attrs.field(repr=False, eq=False)

    def describe(self) -> str:
        return f"{self.file}:{self.line}: {self.operator}: `{self.before}` -> `{self.after}`"


# Binary operators and what each becomes. Ordered longest first so `&&` is never read as two `&`.
_SWAPS = {
    "&&": "||",
    "||": "&&",
    "==": "!=",
    "!=": "==",
    ">=": ">",
    "+": "-",
    "-": "+",
    "&": "|",
    "|": "&",
    "^": "&",
}
_OP_RE = re.compile(r"&&|\|\||==|!=|>=|(?<![<>=!+\-*/%&|^~])[+\-&|^](?![=:&|>])")
_SIZED_RE = re.compile(r"\b(\d+)\s*'\s*([sS]?)([bBhHdD])\s*([0-9a-fA-F_]+)\b")
_DECIMAL_RE = re.compile(r"(?<![\w'.$])(\d+)(?![\w'.])")
_IF_RE = re.compile(r"\bif\s*\(")
_HEADER_RE = re.compile(r"\b(?:macro)?module\b[^;]*;")
_EDGE_RE = re.compile(r"(?:posedge|negedge|edge)\s*$")
_RESET_NAME_RE = re.compile(r"\b\w*(?:rst|reset)\w*\b", re.I)
_DECL_RE = re.compile(
    r"^\s*(?:input|output|inout|wire|reg|logic|integer|genvar|parameter|localparam|bit|int)\b", re.M
)


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _close_paren(text: str, open_pos: int) -> int | None:
    """Index of the `)` matching the `(` at open_pos in blanked text, or None."""
    depth = 0
    for i in range(open_pos, min(len(text), open_pos + 4000)):
        c = text[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
    return None


def _masked(text: str) -> str:
    """Comments and string literals blanked, and everything inside [...] (ranges, bit selects) and declaration
    lines blanked too: mutating a width or a port list gives a design that does not build, which grades nothing."""
    clean = strip_comments(text, keep_strings=False)
    out = list(clean)
    depth = 0
    for i, c in enumerate(clean):
        if c == "[":
            depth += 1
        elif c == "]":
            depth = max(0, depth - 1)
            continue
        if depth and c != "\n":
            out[i] = " "
    masked = "".join(out)
    for m in _HEADER_RE.finditer(masked):  # the module header: its port list is a declaration too
        masked = (
            masked[: m.start()]
            + "".join("\n" if ch == "\n" else " " for ch in m.group(0))
            + masked[m.end() :]
        )
    for m in _DECL_RE.finditer(masked):
        end = masked.find(";", m.start())
        end = len(masked) if end < 0 else end
        masked = (
            masked[: m.start()]
            + "".join("\n" if ch == "\n" else " " for ch in masked[m.start() : end])
            + masked[end:]
        )
    return masked


def _sites(text: str) -> Iterator[tuple[str, int, int, str]]:
    """(operator, start, end, replacement) for every mutable site of one file."""
    masked = _masked(text)
    # Inverted and dropped-reset conditions first: they are the bugs harnesses most often miss.
    for m in _IF_RE.finditer(masked):
        open_pos = m.end() - 1
        close = _close_paren(masked, open_pos)
        if close is None:
            continue
        cond = text[open_pos + 1 : close]
        if _RESET_NAME_RE.search(masked[open_pos + 1 : close]):
            yield "reset", open_pos + 1, close, "1'b0"
        else:
            yield "condition", open_pos + 1, close, f"!({cond.strip()})"
    for m in _OP_RE.finditer(masked):
        op = m.group(0)
        # A unary minus or reduction operator right after `(`, `=`, `,` or another operator stays as it is.
        before = masked[: m.start()].rstrip()[-1:] or "("
        if before in "(=,?:;{&|^~!+-*/<>" and op in ("+", "-", "&", "|", "^"):
            continue
        yield "binop", m.start(), m.end(), _SWAPS[op]
    for m in _SIZED_RE.finditer(masked):
        width, signed, base, digits = m.groups()
        base_n = {"b": 2, "h": 16, "d": 10}[base.lower()]
        try:
            value = int(digits.replace("_", ""), base_n)
        except ValueError:  # x/z digits
            continue
        flipped = value ^ 1
        if base_n == 2:
            new_digits = format(flipped, "b").zfill(len(digits.replace("_", "")))
        elif base_n == 16:
            new_digits = format(flipped, "x")
        else:
            new_digits = str(flipped)
        yield "constant", m.start(), m.end(), f"{width}'{signed}{base}{new_digits}"
    for m in _DECIMAL_RE.finditer(masked):
        if "'" in masked[max(0, m.start() - 3) : m.start()]:
            continue  # the width of a sized literal
        if masked[max(0, m.start() - 1) : m.start()] == "#":
            continue  # a delay
        value = int(m.group(1))
        yield "constant", m.start(), m.end(), str(value + 1)
    for m in re.finditer(r"\{", masked):
        close = masked.find("}", m.end())
        if close < 0:
            continue
        inner = masked[m.end() : close]
        if "{" in inner or inner.count(",") != 1:
            continue
        a, b = text[m.end() : close].split(",", 1)
        if a.strip() and b.strip() and a.strip() != b.strip():
            yield "concat", m.end(), close, f"{b.strip()}, {a.strip()}"
    for m in re.finditer(r"\?", masked):
        colon = masked.find(":", m.end())
        semi = masked.find(";", m.end())
        if colon < 0 or (0 <= semi < colon) or "?" in masked[m.end() : colon]:
            continue
        end = semi if semi >= 0 else len(masked)
        arm_a, arm_b = text[m.end() : colon].strip(), text[colon + 1 : end].strip()
        if not arm_a or not arm_b or arm_a == arm_b or any(c in arm_b for c in "?:"):
            continue
        yield "ternary", m.end(), end, f" {arm_b} : {arm_a}"


_CLOCK_RE = re.compile(r"^(clk|clock|i_clk|clk_i|aclk|pclk|hclk)$", re.I)


def _port_sites(text: str, path: str) -> Iterator[tuple[str, int, list[tuple[int, int, str]], str, str]]:
    """Whole-port mutants: an input tied to 0 everywhere it is read (a design that ignores it), and an output
    whose every assignment drives 0 (a design stuck at a constant): (operator, line, edits, before, after). These
    are the bugs a harness that only checks reset values or a few cycles lets through."""
    from rtlreward_hdl.slang import parse_modules

    try:
        modules = parse_modules({path: text})
    except Exception:  # a reference slang cannot read gets only the textual mutants
        return
    masked = _masked(text)
    for iface in modules.values():
        for port in iface.ports:
            if not re.fullmatch(r"[A-Za-z_]\w*", port.name):
                continue
            word = re.compile(rf"(?<![\w$.'])\b{re.escape(port.name)}\b(?!\s*\()")
            if port.direction == "input" and not _CLOCK_RE.match(port.name):
                uses = [
                    (m.start(), m.end(), "0")
                    for m in word.finditer(masked)
                    if not _EDGE_RE.search(masked[max(0, m.start() - 12) : m.start()])
                ]
                if uses:
                    yield "stuck_input", _line(text, uses[0][0]), uses, port.name, f"{port.name} read as 0"
            elif port.direction == "output":
                stmt = re.compile(
                    rf"(?:\bassign\s+)?(?<![\w$.]){re.escape(port.name)}\s*(?:\[[^\]]*\]\s*)?(?:<=|=)(?!=)([^;]*);"
                )
                edits = []
                for m in stmt.finditer(masked):
                    if masked[max(0, m.start() - 1) : m.start()] in ("<", ">", "!", "="):
                        continue
                    edits.append((m.start(1), m.end(1), " 0"))
                if edits:
                    yield (
                        "stuck_output",
                        _line(text, edits[0][0]),
                        edits,
                        port.name,
                        f"{port.name} driven to 0",
                    )


def mutants(files: Mapping[str, str], limit: int = 10) -> list[Mutant]:
    """Up to `limit` single-site mutants of the design's source files, spread over the operators (round robin, in
    file order), so a small budget still tries every kind of bug. Deterministic: same design, same mutants."""
    by_operator: dict[str, list[Mutant]] = {}
    for path, text in sorted(files.items()):
        if not path.lower().endswith(SOURCE_EXTS):
            continue
        for op, start, end, replacement in _sites(text):
            mutated = text[:start] + replacement + text[end:]
            if mutated == text:
                continue
            m = Mutant(
                operator=op,
                file=path,
                line=_line(text, start),
                before=" ".join(text[start:end].split())[:80],
                after=" ".join(replacement.split())[:80],
                files={**files, path: mutated},
            )
            by_operator.setdefault(op, []).append(m)
        for op, line, edits, before, after in _port_sites(text, path):
            mutated = text
            for start, end, replacement in sorted(edits, reverse=True):
                mutated = mutated[:start] + replacement + mutated[end:]
            if mutated != text:
                by_operator.setdefault(op, []).append(
                    Mutant(
                        operator=op,
                        file=path,
                        line=line,
                        before=before,
                        after=after,
                        files={**files, path: mutated},
                    )
                )
    # Round robin over operators, each operator's sites spread over the file (not only its first lines).
    queues = {op: _spread(ms) for op, ms in by_operator.items()}
    out: list[Mutant] = []
    while len(out) < limit and any(queues.values()):
        for op in (
            "stuck_output",
            "stuck_input",
            "condition",
            "reset",
            "binop",
            "constant",
            "concat",
            "ternary",
        ):
            if queues.get(op) and len(out) < limit:
                out.append(queues[op].pop(0))
    return out


def _spread(items: list[Mutant]) -> list[Mutant]:
    """Reorder so that taking the first k samples the list evenly: 0, n/2, n/4, 3n/4, ..."""
    n = len(items)
    if n <= 2:
        return list(items)
    order: list[int] = []
    seen: set[int] = set()
    step = n
    while step >= 1 and len(order) < n:
        for i in range(0, n, step):
            if i not in seen:
                seen.add(i)
                order.append(i)
        step //= 2
    return [items[i] for i in order]
