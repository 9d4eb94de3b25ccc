"""The `cvdp` harness runner the tests stage calls: one entry point, two ways of running a CVDP harness.

Which way follows what the stage's executor can do, never its name, so a third-party executor gets the right
runner by declaring its capability:
- `executor.runs_in_container` (the docker executor): every compose service in a fresh container of the sim image,
  as the benchmark runs it (`cvdp_adapter.runner_docker`);
- anything else (local, bubblewrap, ray): the services' commands through the executor on this machine
  (`cvdp_adapter.runner_local`).
"""

from __future__ import annotations

from typing import Any


class CvdpHarnessRunner:
    """`register("cvdp", CvdpHarnessRunner())`: runs a `Harness(kind="cvdp")` for the tests stage."""

    kind = "cvdp"

    def run(self, ctx: Any) -> Any:
        if getattr(ctx.executor, "runs_in_container", False):
            from cvdp_adapter.runner_docker import DockerCvdpRunner

            return DockerCvdpRunner().run(ctx)
        from cvdp_adapter.runner_local import LocalCvdpRunner

        return LocalCvdpRunner().run(ctx)
