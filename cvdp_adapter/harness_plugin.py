"""Plugin module: the `cvdp` harness runner for the tests stage, the `cvdp-strict` profile, and the
`rtlreward cvdp setup-envs` / `rtlreward cvdp conformance` commands.

The runner itself is `cvdp_adapter.runner.CvdpHarnessRunner` (it follows the executor's capabilities); the
commands live with the other `cvdp` commands in `cvdp_adapter.cli`.
"""

from __future__ import annotations

from rtlreward import hookimpl


@hookimpl
def rtlreward_register_harnesses(register):
    from cvdp_adapter.runner import CvdpHarnessRunner

    register("cvdp", CvdpHarnessRunner())


# The benchmark gives each compose service 600 s; the engine's default stage deadline (3 x 60 s + 30 s) would cut
# long CVDP harnesses short. This profile is `strict` with the benchmark's limits: one service per command,
# three services at most before the engine gives up on the stage.
CVDP_STRICT = {
    "name": "cvdp-strict",
    "extends": "strict",
    "description": "strict with CVDP's own limits: 600 s per harness service",
    "stage": {"tests": {"timeout": 600, "deadline": 1830, "options": {"service_timeout": 600}}},
}


@hookimpl
def rtlreward_register_profiles(register):
    register("cvdp-strict", CVDP_STRICT)


@hookimpl
def rtlreward_register_commands(app):
    from cvdp_adapter.cli import register_harness_commands

    register_harness_commands(app)
