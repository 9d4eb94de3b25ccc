"""Plugin: `rtlreward prompts DATASET` (the chat of every task, as its benchmark builds it) and `rtlreward sample
DATASET --model M` (a model's replies to them, from any OpenAI-compatible endpoint or Tinker's sampling client,
as a resumable completions file for `rtlreward eval`). See docs/sampling.md.

Modules, each importing only those before it: `store` (the completions file: resume, cut-off lines),
`backends` (OpenAI-compatible over httpx with retries; Tinker), `run` (the worker pool), `cli`.
Imports the core only; httpx (the `sample` extra) and tinker (the `tinker` extra) are imported when used.
"""

from __future__ import annotations

from rtlreward import hookimpl

__version__ = "1.0"


@hookimpl
def rtlreward_register_commands(app):
    from rtlreward_sample.cli import register

    register(app)
