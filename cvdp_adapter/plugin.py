"""Plugin module: the `cvdp` dataset and the `rtlreward cvdp list|show|prompts|eval` commands (in
`cvdp_adapter.cli`; `cvdp eval` is the core's `rtlreward eval` with CVDP's filters as options)."""

from __future__ import annotations

from rtlreward import hookimpl


@hookimpl
def rtlreward_register_datasets(register):
    from cvdp_adapter.tasks import CvdpDataset

    register("cvdp", CvdpDataset())


@hookimpl
def rtlreward_register_commands(app):
    from cvdp_adapter.cli import register_commands

    register_commands(app)
