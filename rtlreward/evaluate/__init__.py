"""Bulk evaluation: score a file of model completions against a dataset's tasks, resumably.

    from rtlreward.evaluate import evaluate, render_summary
    summary = evaluate(tasks, "completions.jsonl", engine, out_path="results.jsonl")

Input is JSONL, one completion a line (`{"id", "completion"}` or `{"id", "files": {path: text}}`); output is JSONL,
one result a line, appended and flushed as each result arrives: a killed run loses nothing, and rerunning with the
same output file scores only what is missing. Nothing here knows about a particular dataset or tool.

One concern per module:
- `completions`: reading the input (and the reference / empty answers made up from the tasks);
- `results`: the results file: one row per scored completion, reading it back, appending to it;
- `settings`: what a run was scored under (the results file's header) and the resume check;
- `summary`: folding result rows into a `Summary` (pass rates, pass@k, per category and stage) and its tables;
- `runner`: `evaluate`, the scheduling loop with resume, the progress bar and the warnings;
- `command`: the `rtlreward eval` command and `run_eval_command`, the body dataset front doors share.
"""

from __future__ import annotations

from rtlreward.evaluate.command import (
    default_out_path,
    parse_filters,
    register_eval_command,
    run_eval,
    run_eval_command,
)
from rtlreward.evaluate.completions import (
    Completion,
    Problem,
    empty_completions,
    parse_completion,
    read_completions,
    reference_completions,
)
from rtlreward.evaluate.results import ResultAppender, read_header, read_results, result_row
from rtlreward.evaluate.runner import evaluate
from rtlreward.evaluate.settings import SettingsMismatch, run_settings
from rtlreward.evaluate.summary import Summary, render_summary, summarize

__all__ = [
    "Completion",
    "Problem",
    "ResultAppender",
    "SettingsMismatch",
    "Summary",
    "default_out_path",
    "empty_completions",
    "evaluate",
    "parse_completion",
    "parse_filters",
    "read_completions",
    "read_header",
    "read_results",
    "reference_completions",
    "register_eval_command",
    "render_summary",
    "result_row",
    "run_eval",
    "run_eval_command",
    "run_settings",
    "summarize",
]
