"""Turn a model's raw reply into the files a task expects.

Replies come in many shapes: fenced blocks with any tag, several blocks (an instantiation example, a testbench,
the design), `<think>` sections, CVDP's JSON answer, file-name headers, bare code, and replies cut off by the
token limit. The rule that picks the right block is "the block that *declares* the module the task expects",
because that is what the harness will compile; position in the reply is only a tie-breaker (the last complete
declaring block wins, since models revise).
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping, Sequence

import attrs

from rtlreward.model import Task
from rtlreward_hdl.files import strip_comments

MAX_REPLY_CHARS = 1_000_000
MAX_MERGED_BLOCKS = 64

_PATH_TOKEN = r"[\w./-]+\.(?:sv|v|svh|vh|vhd|vhdl|svi|inc|mem|hex)"
PATH_RE = re.compile(rf"(?<![\w./-])({_PATH_TOKEN})(?![\w-])")
FENCE_OPEN_RE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^\s`]*)[^\n`]*$")
MODULE_RE = re.compile(r"^[ \t]*(?:macromodule|module)\s+(?:(?:static|automatic)\s+)?([A-Za-z_]\w*)", re.M)
ENDMODULE_RE = re.compile(r"\bendmodule\b")
THINK_OPEN_RE = re.compile(r"<think(?:ing)?>", re.I)
THINK_CLOSE_RE = re.compile(r"</think(?:ing)?>", re.I)


class ReplyError(ValueError):
    """The reply cannot hold an answer at all (empty, binary, too large, only thinking)."""


@attrs.define
class Block:
    lang: str
    body: str
    index: int
    closed: bool = True
    header_path: str | None = None  # a file name announced just before the block or on its first line
    modules: list[str] = attrs.field(factory=list)  # the modules the block declares

    def __attrs_post_init__(self) -> None:
        self.modules = MODULE_RE.findall(strip_comments(self.body))


@attrs.define
class Extraction:
    files: dict[str, str] = attrs.field(factory=dict)
    blocks_found: int = 0
    think_stripped: bool = False
    truncated: bool = False
    how: dict[str, str] = attrs.field(factory=dict)  # path -> how it was found (json, header, module, ...)
    missing: dict[str, list[str]] = attrs.field(factory=dict)  # path -> modules we looked for
    warnings: list[str] = attrs.field(factory=list)
    declared: list[str] = attrs.field(factory=list)  # modules declared anywhere in the reply
    merged: int = 0  # blocks appended because the chosen block instantiates the modules they declare


def check_reply(text: str | None, max_chars: int = MAX_REPLY_CHARS) -> str:
    if text is None or not text.strip():
        raise ReplyError("the reply is empty: answer with the code in a ```verilog block")
    if len(text) > max_chars:
        raise ReplyError(
            f"the reply is {len(text):,} characters, over the {max_chars:,}-character limit: "
            "answer with the code only"
        )
    if "\x00" in text:
        raise ReplyError("the reply contains NUL bytes (binary data), not source text")
    ctrl = sum(1 for ch in text[:65536] if ord(ch) < 32 and ch not in "\n\r\t\f\v")
    if ctrl > max(8, len(text[:65536]) // 100):
        raise ReplyError("the reply is mostly control characters (binary data), not source text")
    return text


def strip_think(text: str) -> tuple[str, bool]:
    """Drop reasoning sections. A reply that starts inside a thought (the chat template opened `<think>`) shows
    only `</think>`: keep what follows the last one. An unclosed `<think>` means the answer never came."""
    stripped = False
    # Leading reasoning whose <think> was in the prompt: a </think> before any <think>.
    first_open = THINK_OPEN_RE.search(text)
    closes_before = [
        c for c in THINK_CLOSE_RE.finditer(text, 0, first_open.start() if first_open else len(text))
    ]
    if closes_before:
        stripped, text = True, text[closes_before[-1].end() :]
    # Balanced sections, one linear pass (a regex with .*? would rescan the tail for every unclosed tag).
    out: list[str] = []
    pos = 0
    while True:
        m = THINK_OPEN_RE.search(text, pos)
        if m is None:
            out.append(text[pos:])
            break
        stripped = True
        out.append(text[pos : m.start()])
        c = THINK_CLOSE_RE.search(text, m.end())
        if c is None:  # unclosed: the reply ended while thinking
            text = "".join(out)
            if not text.strip():
                raise ReplyError(
                    "the reply ended inside <think> (no </think>): there is no answer after the reasoning"
                )
            return text, stripped
        pos = c.end()
    text = "".join(out)
    return text, stripped


def split_blocks(text: str) -> tuple[list[Block], list[str], bool]:
    """Fenced blocks and the prose lines outside them. An unclosed last fence is a truncated reply: its body
    is what is there."""
    lines = text.splitlines(keepends=True)
    blocks: list[Block] = []
    prose: list[str] = []
    truncated = False
    i = 0
    while i < len(lines):
        m = FENCE_OPEN_RE.match(lines[i].rstrip("\r\n"))
        if not m:
            prose.append(lines[i])
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        # Models also glue the closing fence to the last code line ("endmodule```"): that closes the block too.
        glued = re.compile(rf"^(.*?\S)[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        j = i + 1
        tail = ""
        while j < len(lines):
            line = lines[j].rstrip("\r\n")
            if close.match(line):
                break
            g = glued.match(line)
            if g and fence[0] not in g.group(1):
                tail = g.group(1) + "\n"
                break
            j += 1
        body = "".join(lines[i + 1 : j]) + tail
        closed = j < len(lines)
        if not closed:
            truncated = True
        info = PATH_RE.findall(lines[i])  # ```verilog title="rtl/x.sv"
        header = (info[0] if len(info) == 1 else None) or _header_before(prose) or _header_first_line(body)
        blocks.append(Block(lang=lang, body=body, index=len(blocks), closed=closed, header_path=header))
        prose.append("\n")  # a block boundary: a header must sit right before its own block
        i = j + 1
    return blocks, prose, truncated


def _header_before(prose: list[str]) -> str | None:
    """A path announced on the last non-empty prose line before a block: `// File: rtl/x.sv`, `rtl/x.sv:`,
    `### rtl/x.sv`, `**rtl/x.sv**`, "Here is `rtl/x.sv`:"."""
    for line in reversed(prose[-3:]):
        if not line.strip():
            continue
        paths = PATH_RE.findall(line)
        if len(paths) == 1 and len(line.strip()) <= 200:
            return paths[0].lstrip("./") if paths[0].startswith("./") else paths[0]
        return None
    return None


def _header_first_line(body: str) -> str | None:
    first = body.lstrip().split("\n", 1)[0].strip()
    if first.startswith("//") or first.startswith("/*"):
        paths = PATH_RE.findall(first)
        if len(paths) == 1:
            return paths[0]
    return None


def parse_json_answer(text: str) -> dict[str, str] | None:
    """CVDP's multi-file answer: `{"code": [{"rtl/x.sv": "..."}, ...]}` (or one dict), bare or in a fence."""
    candidates = [text.strip()]
    for m in re.finditer(r"^[ \t]*```[ \t]*json[^\n]*\n(.*?)(?:^[ \t]*```|\Z)", text, re.M | re.S | re.I):
        candidates.append(m.group(1).strip())
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for cand in candidates:
        if not cand.startswith("{"):
            continue
        try:
            obj = json.loads(cand)
        except (ValueError, RecursionError):
            continue
        files = _json_files(obj)
        if files:
            return files
    return None


def _json_files(obj: object) -> dict[str, str] | None:
    if not isinstance(obj, dict):
        return None
    code = obj.get("code", obj.get("files"))
    items: list = code if isinstance(code, list) else [code] if isinstance(code, dict) else []
    files: dict[str, str] = {}
    for item in items:
        if isinstance(item, dict):
            for k, v in item.items():
                if isinstance(k, str) and isinstance(v, str):
                    files[k] = v
    return files or None


def bare_code(text: str) -> tuple[str | None, bool]:
    """Code with no fences: from the first line that starts Verilog (a directive or `module`) to the last
    `endmodule`; a module with no `endmodule` is a truncated reply."""
    stripped = strip_comments(text)
    m = MODULE_RE.search(stripped)
    if not m:
        return None, False
    lines = text.splitlines(keepends=True)
    first = stripped.count("\n", 0, m.start())
    # Pull in directives / comments right above the module (`timescale, `include, header comments).
    while first > 0 and re.match(r"^[ \t]*(`\w+|//|/\*|\*)", lines[first - 1]):
        first -= 1
    ends = list(ENDMODULE_RE.finditer(stripped))
    if not ends or ends[-1].start() < m.start():
        return "".join(lines[first:]), True
    last = stripped.count("\n", 0, ends[-1].start())
    return "".join(lines[first : last + 1]).rstrip() + "\n", False


def expected_modules(task: Task, path: str, n_expected: int) -> list[str]:
    """Which module names identify the block for `path`: the reference's declarations in that file, the
    task's toplevel / interface module (single-file tasks), and the file's stem."""
    names: list[str] = []
    ref = (task.reference or {}).get(path)
    if ref:
        names += MODULE_RE.findall(strip_comments(ref))
    if n_expected == 1:
        if task.toplevel:
            names.append(task.toplevel)
        if task.interface is not None:
            names.append(task.interface.module)
        if task.reference and not ref:
            for text in task.reference.values():
                names += MODULE_RE.findall(strip_comments(text))
    stem = posixpath.splitext(posixpath.basename(path))[0]
    if stem and (n_expected > 1 or not names):
        names.append(stem)
    return list(dict.fromkeys(names))


def _match_path(announced: str, expected: Sequence[str]) -> str | None:
    announced = announced.strip().lstrip("/")
    if announced.startswith("./"):
        announced = announced[2:]
    if announced in expected:
        return announced
    base = posixpath.basename(announced)
    hits = [e for e in expected if posixpath.basename(e) == base]
    return hits[0] if len(hits) == 1 else None


def extract(text: str, task: Task, expected: Sequence[str], max_chars: int = MAX_REPLY_CHARS) -> Extraction:
    """Extract the expected files from a reply. Raises ReplyError when the reply cannot hold an answer."""
    text = check_reply(text, max_chars)
    text, thought = strip_think(text)
    ex = Extraction(think_stripped=thought)
    expected = list(expected)

    blocks, prose, truncated = split_blocks(text)
    ex.blocks_found = len(blocks)
    for b in blocks:
        ex.declared += [m for m in b.modules if m not in ex.declared]

    # 1. CVDP's JSON answer.
    json_files = parse_json_answer(text)
    if json_files:
        for path, body in json_files.items():
            target = _match_path(path, expected) or path
            if target in expected and target not in ex.files:
                ex.files[target] = body
                ex.how[target] = "json"
        if all(p in ex.files for p in expected):
            return ex

    code_blocks = [b for b in blocks if b.lang not in ("json",)]
    used: set[int] = set()

    # 2. Blocks announced with a file name, when they hold the module that file should declare (a testbench
    #    announced as "the test for rtl/x.sv" must not win over the block declaring x).
    for b in code_blocks:
        if b.header_path is None:
            continue
        target = _match_path(b.header_path, expected)
        if not target or target in ex.files:
            continue
        wanted = set(expected_modules(task, target, len(expected)))
        anyone = any(set(o.modules) & wanted for o in code_blocks)
        if anyone and not set(b.modules) & wanted:
            continue
        ex.files[target] = b.body
        ex.how[target] = "header"
        used.add(b.index)

    # 3. The block that declares the expected module(s).
    for path in expected:
        if path in ex.files:
            continue
        wanted = expected_modules(task, path, len(expected))
        ex.missing[path] = wanted
        hits = [b for b in code_blocks if b.index not in used and set(b.modules) & set(wanted)]
        if hits:
            complete = [b for b in hits if b.closed]
            chosen = (complete or hits)[-1]
            ex.files[path] = chosen.body
            ex.how[path] = "module"
            used.add(chosen.index)
            del ex.missing[path]

    # 4. Single-file task, nothing declares the expected module: take the one block that declares some
    #    module (the interface stage will report the name), else bare code outside any fence.
    remaining = [p for p in expected if p not in ex.files]
    if len(expected) == 1 and remaining:
        path = remaining[0]
        declaring = [b for b in code_blocks if b.index not in used and b.modules]
        if declaring:
            complete = [b for b in declaring if b.closed]
            chosen = (complete or declaring)[-1]
            ex.files[path] = chosen.body
            ex.how[path] = "fallback"
            ex.warnings.append(
                f"no block declares module {' / '.join(ex.missing[path])}; using the block that declares "
                f"{', '.join(chosen.modules)}"
            )
            del ex.missing[path]
        else:
            code, cut = bare_code("".join(prose) if blocks else text)
            if code is not None:
                ex.files[path] = code
                ex.how[path] = "bare"
                ex.truncated |= cut
                del ex.missing[path]
                for m in MODULE_RE.findall(strip_comments(code)):
                    if m not in ex.declared:
                        ex.declared.append(m)
    _merge_submodules(ex, task, expected, code_blocks, used)
    ex.truncated |= truncated
    return ex


def _merge_submodules(
    ex: Extraction, task: Task, expected: Sequence[str], blocks: Sequence[Block], used: set[int]
) -> None:
    """A design split over several blocks ("the adder: ... the top: ...") compiles only together: append to a
    file each unused block declaring a module the file uses but does not declare. A testbench declares a module
    nobody uses, so it is never pulled in; modules of other expected files stay in their own files."""
    owned = {m for p in expected for m in expected_modules(task, p, len(expected)) if len(expected) > 1}
    for path in list(ex.files):
        if ex.how.get(path) == "json":
            continue
        changed = True
        while changed and ex.merged < MAX_MERGED_BLOCKS:  # bounded: a hostile reply can chain thousands
            changed = False
            body = strip_comments(ex.files[path])
            declared = set(MODULE_RE.findall(body))
            words = set(re.findall(r"[A-Za-z_]\w*", body))
            for b in blocks:
                if ex.merged >= MAX_MERGED_BLOCKS:
                    break
                if b.index in used or not b.modules:
                    continue
                new = [m for m in b.modules if m not in declared and m not in owned]
                if any(m in words for m in new):
                    ex.files[path] = ex.files[path].rstrip("\n") + "\n\n" + b.body
                    used.add(b.index)
                    ex.merged += 1
                    changed = True


def pass_through(files: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """An agent's files, kept when their paths stay inside the workspace."""
    from rtlreward.stage import UnsafePath, safe_relpath

    kept: dict[str, str] = {}
    refused: list[str] = []
    for path, body in files.items():
        try:
            rel = str(safe_relpath(path))
        except UnsafePath:
            refused.append(path)
            continue
        if not isinstance(body, str) or "\x00" in body:
            refused.append(path)
            continue
        kept[rel] = body
    return kept, refused
