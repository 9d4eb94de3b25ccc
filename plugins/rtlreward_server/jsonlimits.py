"""JSON request bodies with their size and nesting depth checked BEFORE the parser sees them.

Why not just `json.loads` and catch errors: CPython's decoder recurses once per `[`/`{`, so a 100k-deep
`[[[[...]]]]` (200 KB, well under any size limit) raises RecursionError inside the parser, an error the old
server did not expect and that closed the connection with no answer. Checking the depth first turns that into
a 400 with a message, and keeps the parser's recursion bounded whatever Python's recursion limit is.

How the depth is measured without recursion, in time linear in the body and with no Python loop over its
bytes: escaped backslashes and escaped quotes are deleted (`bytes.replace`, left to right, exactly as the JSON
lexer pairs them inside strings), the body is split on the remaining quotes and the string contents (every other
piece) dropped, every byte but the four brackets is deleted (`bytes.translate`), and the running sum of +1/-1
over what is left is taken by `itertools.accumulate` (C). Outside strings a backslash is not JSON, and the
parser stops at the first byte that is not JSON, so it never reaches nesting this view would miss. Bodies with
more than `MAX_STRINGS` strings or `MAX_CONTAINERS` arrays and objects are refused outright: no request needs
that many, and each costs the parser and this check time and memory.
"""

from __future__ import annotations

import json
from itertools import accumulate
from typing import Any

MAX_BODY = 16 << 20  # 16 MiB: a batch of long replies fits; a memory bomb does not
MAX_DEPTH = 64  # a request is at most ~10 levels deep (batch -> item -> task -> harness -> files)

MAX_STRINGS = 1 << 19  # a 1024-item batch of inline tasks with many files has ~100k
MAX_CONTAINERS = 1 << 18

_NOT_BRACKET = bytes(sorted(set(range(256)) - set(b"[]{}")))
_STEP = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")  # as signed bytes: +1 for an opener, -1 for a closer


class BodyError(ValueError):
    """A body the server refuses before scoring: `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def check_structure(body: bytes, max_depth: int = MAX_DEPTH) -> None:
    """BodyError unless `body` nests arrays/objects at most `max_depth` deep and holds at most `MAX_STRINGS`
    strings and `MAX_CONTAINERS` arrays/objects (counting brackets outside strings)."""
    if body.count(b'"') > 2 * MAX_STRINGS:  # millions of tiny strings: hundreds of MB once parsed
        raise BodyError(f"request body has more than {MAX_STRINGS} strings: split it into smaller requests")
    if body.count(b"[") + body.count(b"{") <= max_depth:
        return  # cannot nest deeper than it has openers: most requests stop here
    unescaped = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    structure = b"".join(unescaped.split(b'"')[0::2]).translate(_STEP, _NOT_BRACKET)
    if len(structure) > 2 * MAX_CONTAINERS:
        raise BodyError(
            f"request body has more than {MAX_CONTAINERS} arrays and objects: split it into smaller requests"
        )
    if structure and max(accumulate(memoryview(structure).cast("b"))) > max_depth:
        raise BodyError(f"request body is nested deeper than {max_depth} levels (a request needs about 10)")


def parse_body(body: bytes, *, max_body: int = MAX_BODY, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value of a request body, or BodyError (413 over `max_body`, 400 for anything not JSON, not
    UTF-8, or nested deeper than `max_depth`). An empty body is `null` (the caller says what it wanted)."""
    if len(body) > max_body:
        raise BodyError(f"request body over {max_body} bytes: split the batch into smaller requests", 413)
    if not body.strip():
        return None
    check_structure(body, max_depth)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(f"request body is not JSON: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        return json.loads(text)
    except RecursionError:  # unreachable after the depth check; kept so no parser error escapes
        raise BodyError(f"request body is nested deeper than {max_depth} levels") from None
    except ValueError as exc:  # JSONDecodeError, or an integer past Python's digit limit
        raise BodyError(f"request body is not JSON: {exc}") from None
