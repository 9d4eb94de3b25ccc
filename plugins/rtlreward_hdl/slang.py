"""pyslang helpers shared by the `safety` and `interface` stages.

Model output is hostile: slang, given `` `include "/etc/passwd" ``, reads the file and quotes its lines in its
diagnostics. So nothing here lets slang touch the disk. Every text is parsed from memory; each `` `include`` is
either rewritten to an in-memory buffer of a file we were given (task context, harness, the answer's own files)
or blanked out, and the preprocessor's include depth is capped besides. Virtual paths live under a root that does
not exist, so even a lookup that escaped the rewrite would find nothing. Diagnostics we build carry only our own
words, a file name and a line number, never slang's rendered source lines.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterable, Mapping

import attrs

from rtlreward.model import Interface, Port
from rtlreward_hdl.files import strip_comments

VIRTUAL_ROOT = "/__rtlreward_virtual__"
MAX_INCLUDE_DEPTH = 8

# `include "path" / `include <path> / `include `MACRO (the last cannot be checked statically).
INCLUDE_RE = re.compile(r'`include\b[ \t]*(?:"([^"\n]*)"|<([^>\n]*)>|(`\w+))?')
MODULE_DECL_RE = re.compile(
    r"^[ \t]*(?:macromodule|module)\s+(?:(?:static|automatic)\s+)?([A-Za-z_]\w*)", re.M
)

_DIRECTIONS = {"In": "input", "Out": "output", "InOut": "inout", "Ref": "ref"}


def slang_version() -> str:
    import pyslang

    return getattr(pyslang, "__version__", "unknown")


def declared_modules(text: str) -> list[str]:
    """Module names a text declares (`module name`), in order; comments ignored. Instantiations do not count."""
    return MODULE_DECL_RE.findall(strip_comments(text))


# -- macro expansion, bounded before slang reads a text in this process ------------------------------------------
# slang runs in the trainer's process, with no sandbox limit: a `define that doubles 40 times expands to 2^40 tokens
# (every byte of memory), a chain of 20,000 macros each naming the next overflows the C stack (SIGSEGV: the whole
# process dies). `macro_expansion` bounds what a text would expand to from its own text, and `parse` (and every
# other in-process read of an answer) refuses a text past either limit with ExpansionTooLarge: the answer's own
# failure, which its stage reports as `resource-limit` (see docs/security.md). Legitimate designs are far inside:
# a reply is at most 1,000,000 characters, and real macro nesting is a handful of levels deep.
MAX_MACRO_TOKENS = 1_000_000  # tokens a text may expand to (slang holds ~1 KiB per expanded token)
MAX_MACRO_DEPTH = 200  # macros expanding inside macros
_DEFINE_RE = re.compile(r"^[ \t]*`define[ \t]+([A-Za-z_]\w*)(\([^)\n]*\))?((?:[^\n]*\\\n)*[^\n]*)", re.M)
_TOKEN_RE = re.compile(r"`?[A-Za-z_$][\w$]*|\S")


class ExpansionTooLarge(RuntimeError):
    """An answer's macros expand past MAX_MACRO_TOKENS tokens or MAX_MACRO_DEPTH levels. `limit`: which."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(message)
        self.limit = limit
        self.message = message


def macro_expansion(texts: Iterable[str], *, cap: int = MAX_MACRO_TOKENS) -> tuple[int, int]:
    """(tokens, depth): an upper bound of the tokens the largest of `texts` expands to through the `define macros
    they declare (all of them, each name at its largest definition), saturating just past `cap`, and how deeply
    macros nest in that expansion (saturating past MAX_MACRO_DEPTH). Cheap where no text defines a macro.

    Only a text with a backtick can define or use a macro: such a text's bound is computed against the macros of
    all such texts and remembered for them (`_body_cost`: a task's testbench, the same for every answer, is read
    once); a text without one is its token count."""
    texts = list(texts)
    if not any("`define" in t for t in texts):
        return max((len(t) for t in texts), default=0), 0
    defining = tuple(t for t in texts if "`" in t)
    worst = (0, 0)
    for t in texts:
        if "`" in t:
            got = _body_cost(defining, t, cap)
        else:
            got = (min(len(_TOKEN_RE.findall(strip_comments(t))), cap + 1), 0)
        worst = (max(worst[0], got[0]), max(worst[1], got[1]))
        if worst[0] > cap or worst[1] > MAX_MACRO_DEPTH:
            break
    return worst


_REMEMBERED_TEXT = 1 << 16  # a text up to this size is remembered with its bound (an answer may be 1,000,000 chars)


def _body_cost(defining: tuple[str, ...], text: str, cap: int) -> tuple[int, int]:
    """`macro_expansion`'s bound of one text given the macros every text of `defining` declares."""
    if len(text) > _REMEMBERED_TEXT or sum(len(t) for t in defining) > 4 * _REMEMBERED_TEXT:
        return _body_cost_of(defining, text, cap)
    return _remembered_cost(defining, text, cap)


def _body_cost_of(defining: tuple[str, ...], text: str, cap: int) -> tuple[int, int]:
    macros = _macro_table(defining)
    body = _DEFINE_RE.sub("", strip_comments(text))
    return _cost(_TOKEN_RE.findall(body), {}, 0, frozenset(), macros, {}, cap)


_remembered_cost = functools.lru_cache(maxsize=64)(_body_cost_of)


def _macro_table(defining: tuple[str, ...]) -> dict[str, list[tuple[tuple[str, ...] | None, list[str]]]]:
    """Every `define of these texts: name -> [(parameters or None, body tokens)], in order."""
    macros: dict[str, list[tuple[tuple[str, ...] | None, list[str]]]] = {}
    for t in defining:
        for m in _DEFINE_RE.finditer(strip_comments(t)):
            params = None
            if m.group(2) is not None:
                params = tuple(q.split("=", 1)[0].strip() for q in m.group(2)[1:-1].split(",") if q.strip())
            macros.setdefault(m.group(1), []).append((params, _TOKEN_RE.findall(m.group(3))))
    return macros


def _args_of(toks: list[str], i: int) -> tuple[list[list[str]], int]:
    """The arguments of a call whose "(" is at toks[i-1]; and the index after its ")"."""
    out: list[list[str]] = [[]]
    level = 0
    while i < len(toks):
        t = toks[i]
        if t in "([{":
            level += 1
        elif t in ")]}":
            if level == 0 and t == ")":
                return out, i + 1
            level -= 1
        elif t == "," and level == 0:
            out.append([])
            i += 1
            continue
        out[-1].append(t)
        i += 1
    return out, i


def _cost(
    toks: list[str],
    env: dict[str, int],
    depth: int,
    active: frozenset[str],
    macros: dict[str, list[tuple[tuple[str, ...] | None, list[str]]]],
    memo: dict[tuple, tuple[int, int]],
    cap: int,
) -> tuple[int, int]:
    """(tokens, depth) `toks` expand to, each macro at its largest definition, saturating just past `cap`."""
    over = cap + 1
    if depth > MAX_MACRO_DEPTH:
        return over, depth
    total, deepest, i = 0, depth, 0
    while i < len(toks) and total <= cap:
        t = toks[i]
        i += 1
        if t in env:
            total += env[t]
            continue
        name = t[1:] if t.startswith("`") else ""
        if name not in macros or name in active:
            total += 1
            continue
        best = (0, depth)
        call: list[list[str]] | None = None
        if i < len(toks) and toks[i] == "(" and any(p is not None for p, _ in macros[name]):
            call, i = _args_of(toks, i + 1)
        arg_costs = (
            tuple(_cost(a, env, depth + 1, active, macros, memo, cap)[0] for a in call) if call is not None else ()
        )
        # Remembered per macro and argument costs with the depth it reaches *below* the use: reused at another
        # depth, that is added to the depth of the use. (An absolute depth, as first kept, made a macro measured
        # near the top and reused 100 levels down look 100 levels shallower, down a chain of 10,000 macros: pyslang
        # then overflowed its stack in the scoring process.)
        key = (name, arg_costs)
        if key in memo:
            tokens, below = memo[key]
            best = (tokens, depth + below)
        else:
            for params, body in macros[name]:
                sub = dict(zip(params or (), arg_costs, strict=False))
                got = _cost(body, sub, depth + 1, active | {name}, macros, memo, cap)
                best = (max(best[0], got[0]), max(best[1], got[1]))
            memo[key] = (best[0], best[1] - depth)
        total += best[0]
        deepest = max(deepest, best[1])
    return min(total, over), deepest


def check_expansion(texts: Iterable[str]) -> None:
    """Raise ExpansionTooLarge when `texts` expand past what slang may read in this process (macro_expansion)."""
    tokens, depth = macro_expansion(texts)
    if depth > MAX_MACRO_DEPTH:
        raise ExpansionTooLarge(
            "macro_depth",
            f"the design exceeded the macro nesting limit ({MAX_MACRO_DEPTH} levels): its `define macros expand "
            "inside one another too deeply to be read",
        )
    if tokens > MAX_MACRO_TOKENS:
        raise ExpansionTooLarge(
            "macro_expansion",
            f"the design exceeded the macro expansion limit ({MAX_MACRO_TOKENS:,} tokens): its `define macros "
            "expand to more text than can be read (a macro that doubles another)",
        )


def resolve_include(target: str, including_file: str, available: Iterable[str]) -> str | None:
    """The workspace path an include names, if it is one of `available`; None for anything else (absolute
    paths, `..`, files we were not given). Tools search the including file's folder and then -I folders,
    so a unique basename match among the given files also counts."""
    target = target.strip().replace("\\", "/")
    if not target or target.startswith("/") or ".." in target.split("/"):
        return None
    avail = list(dict.fromkeys(available))
    here = posixpath.dirname(including_file)
    for cand in (posixpath.normpath(posixpath.join(here, target)), posixpath.normpath(target)):
        if cand in avail:
            return cand
    by_name = [a for a in avail if a == target or a.endswith("/" + target)]
    return by_name[0] if len(by_name) == 1 else None


def rewrite_includes(text: str, including_file: str, available: Iterable[str]) -> str:
    """Point each allowed `include at its in-memory buffer and blank every other one (same length, same
    lines) so slang never opens a file by itself."""
    avail = list(available)

    def sub(m: re.Match[str]) -> str:
        target = m.group(1) if m.group(1) is not None else m.group(2)
        if target is not None:
            rel = resolve_include(target, including_file, avail)
            if rel is not None:
                return f'`include "{VIRTUAL_ROOT}/{rel}"'
        return " " * len(m.group(0))

    return INCLUDE_RE.sub(sub, text)


@attrs.frozen
class SlangError:
    file: str
    line: int | None
    message: str


@attrs.frozen
class Parsed:
    """Syntax trees of a set of files, parsed from memory with includes confined to the given files."""

    trees: dict  # relpath -> pyslang SyntaxTree
    source_manager: object
    errors: tuple[SlangError, ...]  # syntax (parse) errors only

    def line(self, location: object, *, expanded: bool = True) -> tuple[str | None, int | None]:
        """The (workspace file, line) of a source location, following macro expansions to where the macro
        was used (expanded=True) or where its text was written."""
        sm = self.source_manager
        try:
            loc = sm.getFullyExpandedLoc(location) if expanded else sm.getFullyOriginalLoc(location)
            path = str(sm.getFullPath(loc.buffer))
            return _rel(path), int(sm.getLineNumber(loc))
        except Exception:
            return None, None


def _rel(path: str) -> str:
    prefix = VIRTUAL_ROOT + "/"
    return path[len(prefix) :] if path.startswith(prefix) else path


def _bag(include_depth: int, defines: Mapping[str, str] | None = None):
    import pyslang

    po = pyslang.parsing.PreprocessorOptions()
    po.maxIncludeDepth = include_depth
    if defines:
        po.predefines = [f"{k}={v}" for k, v in defines.items()]
    return pyslang.Bag([po])


def parse(
    files: Mapping[str, str],
    headers: Mapping[str, str] | None = None,
    defines: Mapping[str, str] | None = None,
) -> Parsed:
    """Parse `files` (each its own syntax tree). `headers` are extra files an include may name (task context,
    harness, other answer files); they are parsed only when included. No path outside these is ever read.
    `defines` are predefined macros (a simulator's own, e.g. `__ICARUS__`)."""
    import pyslang

    available = {**(headers or {}), **files}
    check_expansion(available.values())  # before slang expands anything in this process
    sm = pyslang.SourceManager()
    sm.setDisableLocalIncludes(True)
    buffers = {
        rel: sm.assignText(f"{VIRTUAL_ROOT}/{rel}", rewrite_includes(text, rel, available))
        for rel, text in available.items()
    }
    # Token pasting can build an `include the rewrite above never saw (`in``clude "/etc/passwd"): with any
    # pasting in sight, no include is followed at all.
    pasting = any("``" in text for text in available.values())
    bag = _bag(0 if pasting else MAX_INCLUDE_DEPTH, defines)
    trees = {}
    errors: list[SlangError] = []
    engine = pyslang.DiagnosticEngine(sm)
    for rel in files:
        tree = pyslang.syntax.SyntaxTree.fromBuffer(buffers[rel], sm, bag)
        trees[rel] = tree
        for d in tree.diagnostics:
            if not d.isError():
                continue
            try:
                line = int(sm.getLineNumber(sm.getFullyExpandedLoc(d.location)))
                where = _rel(str(sm.getFullPath(sm.getFullyExpandedLoc(d.location).buffer)))
            except Exception:
                line, where = None, rel
            errors.append(SlangError(where or rel, line, engine.formatMessage(d)))
    return Parsed(trees=trees, source_manager=sm, errors=tuple(errors))


def bounded_compilation(tops: Iterable[str]):
    """An empty pyslang Compilation for these top modules with the elaboration work bounded: hostile RTL runs in
    this process, and a huge generate loop or constant must not hang it."""
    import pyslang

    opts = pyslang.ast.CompilationOptions()
    opts.topModules = set(tops)
    opts.maxGenerateSteps = 20000
    opts.maxConstexprSteps = 20000
    opts.maxInstanceArray = 4096
    opts.maxInstanceDepth = 64
    opts.errorLimit = 50
    return pyslang.ast.Compilation(pyslang.Bag([opts]))


def _compilation(parsed: Parsed, tops: Iterable[str]):
    comp = bounded_compilation(tops)
    for tree in parsed.trees.values():
        comp.addSyntaxTree(tree)
    return comp


@attrs.frozen
class ModuleInfo:
    interface: Interface
    file: str | None
    line: int | None
    members: frozenset[str]  # names declared inside the module (signals, instances): for `dut.<name>` checks
    has_parameters: bool
    header_lines: tuple[int, int] | None = None  # first and last line of `module ... ;` (the port list)


def _width(type_: object) -> int | None:
    try:
        w = int(type_.bitWidth)  # type: ignore[attr-defined]
        if w <= 0:
            w = int(type_.bitstreamWidth())  # type: ignore[attr-defined] - unpacked arrays
    except Exception:
        return None
    if w <= 0 or bool(getattr(type_, "isError", False)):
        return None
    return w


def _direction(port: object) -> str:
    d = getattr(port, "direction", None)
    if d is None:
        return "interface"  # an SV interface port has no direction
    return _DIRECTIONS.get(str(d).rsplit(".", 1)[-1], str(d).rsplit(".", 1)[-1].lower())


def module_infos(
    files: Mapping[str, str], headers: Mapping[str, str] | None = None, *, parsed: Parsed | None = None
) -> tuple[dict[str, ModuleInfo], Parsed]:
    """Elaborate every module the files declare as a top (default parameters) and read its ports."""
    import pyslang

    parsed = parsed or parse(files, headers)
    decls: dict[str, tuple[str, int | None]] = {}
    header_lines: dict[str, tuple[int, int] | None] = {}
    for rel, tree in parsed.trees.items():
        for member in getattr(tree.root, "members", ()):
            if member.kind != pyslang.syntax.SyntaxKind.ModuleDeclaration:
                continue
            name = member.header.name.valueText
            if name and name not in decls:
                decls[name] = (rel, parsed.line(member.header.name.location)[1])
                first = parsed.line(member.header.sourceRange.start)[1]
                last = parsed.line(member.header.sourceRange.end)[1]
                header_lines[name] = (first, last) if first and last else None
    if not decls:
        return {}, parsed
    comp = _compilation(parsed, decls)
    infos: dict[str, ModuleInfo] = {}
    for inst in comp.getRoot().topInstances:
        body = inst.body
        name = body.definition.name if hasattr(body, "definition") else inst.name
        if name in infos:
            continue
        ports = []
        for p in body.portList:
            if not p.name:
                continue
            ty = getattr(p, "type", None)
            ports.append(
                Port(name=p.name, direction=_direction(p), width=_width(ty) if ty is not None else None)
            )
        members = frozenset(m.name for m in body if getattr(m, "name", ""))
        has_params = any(m.kind == pyslang.ast.SymbolKind.Parameter for m in body)
        file, line = decls.get(name, (None, None))
        infos[name] = ModuleInfo(
            Interface(module=name, ports=tuple(ports)),
            file,
            line,
            members,
            has_params,
            header_lines.get(name),
        )
    return infos, parsed


def parse_modules(files: Mapping[str, str], headers: Mapping[str, str] | None = None) -> dict[str, Interface]:
    """{module name: Interface} for every module the files declare (elaborated with default parameters;
    a width that stays unknown is None)."""
    infos, _ = module_infos(files, headers)
    return {name: info.interface for name, info in infos.items()}


def system_names(parsed: Parsed) -> list[tuple[str, str | None, int | None, bool]]:
    """Every `$name` token after preprocessing, i.e. also those a macro builds by token pasting:
    (name, file, line, came_from_macro)."""
    import pyslang

    found: list[tuple[str, str | None, int | None, bool]] = []
    sys_kind = pyslang.parsing.TokenKind.SystemIdentifier
    for tree in parsed.trees.values():

        def visit(node: object, _found: list = found) -> None:
            if isinstance(node, pyslang.parsing.Token) and node.kind == sys_kind:
                file, line = parsed.line(node.location)
                macro = bool(parsed.source_manager.isMacroLoc(node.location))
                _found.append((node.valueText, file, line, macro))

        tree.root.visit(visit)
    return found


def find_fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of each ``` block in a markdown text; an unclosed last block runs to the end."""
    blocks = []
    for m in re.finditer(
        r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:^[ \t]*\1[ \t]*$|\Z)", text, re.M | re.S
    ):
        blocks.append((m.group(2).lower(), m.group(3)))
    return blocks


def header_only_module(text: str) -> str:
    """A spec's module header often stops at `);`: close it so slang can read the ports."""
    if re.search(r"\bendmodule\b", strip_comments(text)):
        return text
    return text.rstrip() + "\nendmodule\n"
