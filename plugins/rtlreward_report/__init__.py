"""`rtlreward report RUN [RUN2]`: one page that says why a model fails.

From a results file of `rtlreward eval` (and, optionally, the dataset and the completions it scored) or a
tinker-cookbook `metrics.jsonl`: pass@k, mean reward, a per-stage funnel, reward histograms, categories and
difficulties, the top failure causes clustered from the structured diagnostics (by code, and for interface
problems by port), the expected and generated interface of each failing task side by side, training curves, and
what changed per task between two runs. HTML (self-contained: inline CSS and SVG, no script, no network) or
Markdown.

Modules, each importing only those before it: `runs` (reading), `interface` (ports: expected, generated, from
diagnostics), `analysis` (everything the report says), `plots` (matplotlib to SVG), `html`, `markdown`, `cli`.
Imports the core and the shared HDL library only (the `report` extra adds matplotlib).
"""

from __future__ import annotations

from rtlreward import hookimpl

__version__ = "1.0"


@hookimpl
def rtlreward_register_commands(app):
    from rtlreward_report.cli import add_command

    add_command(app)
