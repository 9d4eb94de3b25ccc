"""The CLI reference page, generated from the typer app whenever the site is built, so it can never drift from
the commands: an mkdocs hook (`hooks:` in mkdocs.yml) adds `cli.md` to the site's files. Every command and
sub-command, plugin commands included, with its usage, its description and a table of its arguments and
options as `--help` states them (defaults included).

`python docs/hooks/cli_reference.py` prints the page, to read it without building the site.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

HEADER = """# CLI reference

Generated from the command line itself when the site is built (`docs/hooks/cli_reference.py`): every command,
plugin commands included, as `rtlreward COMMAND --help` describes it. Every command takes `--help`.

"""

_CODE = re.compile(r"(`[^`]*`)")


def md_text(text: str) -> str:
    """Help text as Markdown: `<`, `>` and `*` outside code spans escaped (a `<think>` would be read as an HTML
    tag, `foo*` as emphasis), line breaks joined."""
    parts = _CODE.split(" ".join(text.split()))
    out = []
    for i, part in enumerate(parts):
        if i % 2:  # a code span
            out.append(part)
        else:
            out.append(
                part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("*", r"\*")
            )
    return "".join(out)


def _cell(text: str) -> str:
    return md_text(text).replace("|", r"\|")


def _app() -> Any:
    """The click command of the `rtlreward` app with every plugin's commands, as `main()` builds it."""
    from typer.main import get_command

    from rtlreward import cli

    if not getattr(cli, "_reference_commands_added", False):
        cli._register_plugin_commands()
        cli._reference_commands_added = True
    return get_command(cli.app)


def _walk(cmd: Any, path: list[str], parent: Any) -> Iterator[tuple[list[str], Any, Any]]:
    """(path, command, its context) for a command and, depth first, its visible sub-commands."""
    ctx = type(parent)(cmd, info_name=path[-1], parent=parent)
    yield path, cmd, ctx
    if hasattr(cmd, "list_commands"):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not getattr(sub, "hidden", False):
                yield from _walk(sub, [*path, name], ctx)


def anchor(path: list[str]) -> str:
    return "-".join(path)


def _description(cmd: Any) -> str:
    """The command's docstring as paragraphs (typer keeps a docstring's blank lines)."""
    text = (cmd.help or "").strip()
    paras = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    return "\n\n".join(md_text(p) for p in paras)


def render() -> str:
    """The whole page."""
    import typer._click as click  # typer >= 0.29 vendors click; its Context is what the commands use

    root = _app()
    root_ctx = click.Context(root, info_name="rtlreward")
    out = [HEADER]
    entries = [(["rtlreward"], root, root_ctx)]
    for name in root.list_commands(root_ctx):
        sub = root.get_command(root_ctx, name)
        if sub is not None and not getattr(sub, "hidden", False):
            entries.extend(_walk(sub, ["rtlreward", name], root_ctx))
    out.append("| command | what it does |\n| --- | --- |\n")
    for path, cmd, _ctx in entries[1:]:
        short = cmd.get_short_help_str(limit=200) if hasattr(cmd, "get_short_help_str") else ""
        out.append(f"| [`{' '.join(path)}`](#{anchor(path)}) | {_cell(short)} |\n")
    out.append("\n")
    for path, cmd, ctx in entries:
        level = "#" * min(len(path) + 1, 4)
        out.append(f"{level} `{' '.join(path)}` {{#{anchor(path)}}}\n\n")
        desc = _description(cmd)
        if desc:
            out.append(desc + "\n\n")
        usage = cmd.get_usage(ctx).removeprefix("Usage:").strip()
        out.append(f"```text\n{usage}\n```\n\n")
        rows = []
        for param in cmd.get_params(ctx):
            if getattr(param, "hidden", False):
                continue
            record = param.get_help_record(ctx)
            if record is None:
                continue
            names, help_text = record
            if names.startswith("--help"):
                continue
            rows.append(f"| `{names}` | {_cell(help_text)} |\n")
        if rows:
            out.append("| argument / option | description |\n| --- | --- |\n")
            out.extend(rows)
            out.append("\n")
        if hasattr(cmd, "list_commands"):
            subs = [
                n for n in cmd.list_commands(ctx) if not getattr(cmd.get_command(ctx, n), "hidden", False)
            ]
            if subs:
                links = ", ".join(f"[`{n}`](#{anchor([*path, n])})" for n in subs)
                out.append(f"Commands: {links}.\n\n")
    return "".join(out)


def on_files(files: Any, config: Any) -> Any:
    """mkdocs hook: add the generated cli.md to the site's files."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, "cli.md", content=render()))
    return files


if __name__ == "__main__":
    print(render(), end="")
