"""Run a CVDP harness the benchmark's own way: every compose service in a fresh container of the sim image.

Per service, as `docker compose run --rm -w /code/rundir` does in NVlabs/cvdp_benchmark: the problem folder's
`docs rundir rtl verif src` mounted at `/code/<dir>`, the compose volumes (`./src:/src:ro`), the service's env
file, HOME=/code/rundir, the host user; and on top of the benchmark: `--network none`, memory, pids and CPU
limits and the per-service time limit. The image placeholder (`__OSS_SIM_IMAGE__`, `build: .` Dockerfiles FROM
it) is replaced by our sim image (`rtlreward sandbox build-image`), which carries what those Dockerfiles add
(cocotb-bus) and a cocotb 1.9 env at /opt/cocotb19 for harnesses importing `cocotb.runner`.

The executor's `run_service(image, command, mounts, workdir, env, limits)` is used when it has one; otherwise
(and for the image probe) a process-wide `DockerExecutor` of this process runs the container, so every CVDP
container gets the executor's policy and lifecycle: an unprivileged user, read-only root, owner and deadline
labels, an in-container `timeout -s KILL`, killed at its limit and always removed. The first run in a process
reaps the containers of dead rtlreward processes (`rtlreward.sandbox.reaper`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from cvdp_adapter.harness import (
    HarnessError,
    HarnessSpec,
    Service,
    ServiceOutcome,
    code_mounts,
    error_result,
    freeze_harness,
    harness_hashes,
    open_probe,
    outcome_from_run,
    service_env,
    thaw_harness,
    verdict,
    write_seed_dir,
)
from cvdp_adapter.runner_local import prepare, service_timeout
from rtlreward.model import StageResult
from rtlreward.sandbox import Limits
from rtlreward_hdl.probes import probe_dirs

SEED_MOUNT = "/opt/rtlreward-seed"
# The verdict probe's folders (rtlreward.verdict), read-only in every service container: the core probe, the HDL
# hooks. Standard library only, so the image's own Python runs them.
PROBE_MOUNTS = ("/opt/rtlreward-probe/core", "/opt/rtlreward-probe/hdl")
# Where a sim image may keep cocotb 1.9.2 (+ pytest): the sandbox plugin's `-cocotb19` images, then the layout
# of hand-built images. The first present in the image is used.
COCOTB19_BINS = ("/opt/venv-cocotb19/bin", "/opt/cocotb19/bin")


def _default_image(cocotb19: bool = False) -> str:
    try:
        from rtlreward.sandbox.image import DEFAULT_TAG, Recipe

        return Recipe(cocotb19=True).tag if cocotb19 else DEFAULT_TAG
    except ImportError:  # the sandbox plugin's image recipe is not installed
        return "rtlreward-sim:latest"


DEFAULT_IMAGE = _default_image()


def sim_image(ctx: Any, spec: HarnessSpec | None = None) -> str:
    """The image for this harness: the profile's `image` option, $RTLREWARD_CVDP_IMAGE, the executor's image;
    for a cocotb 1.9 harness the `-cocotb19` variant of the default image when it is present."""
    chosen = (ctx.options or {}).get("image") or os.environ.get("RTLREWARD_CVDP_IMAGE")
    if chosen:
        return str(chosen)
    base = str(getattr(ctx.executor, "image", None) or DEFAULT_IMAGE)
    if spec is not None and spec.cocotb_api == "cocotb19" and "cocotb19" not in base:
        alt = _default_image(cocotb19=True)
        if image_available((alt,), fallback=False):
            return alt
    return base


class DockerCvdpRunner:
    name = "cvdp-docker"

    def run(self, ctx: Any) -> StageResult:
        from rtlreward.sandbox.reaper import reap_containers_once

        reap_containers_once()  # a dead run's containers go before ours start (no-op after the first time)
        try:
            spec, root = prepare(ctx)
        except (HarnessError, ValueError) as exc:
            return error_result(f"CVDP harness unusable: {exc}")
        image = sim_image(ctx, spec)
        seed_dir = write_seed_dir(ctx.workspace / ".cvdp-seed")
        try:
            base_path, venv19 = _image_layout(image)
        except Exception as exc:  # no engine, no image
            return error_result(
                f"Docker sim image {image!r} unavailable: {exc}. Build it with "
                "`rtlreward sandbox build-image` (or set RTLREWARD_CVDP_IMAGE)."
            )
        if spec.cocotb_api == "cocotb19" and venv19 is None:
            return error_result(
                f"this CVDP harness imports cocotb.runner (cocotb 1.9) and image {image!r} has no cocotb 1.9 env; "
                "build the cocotb19 variant of the sim image or use the local executor."
            )
        freeze_harness(root)
        hashes = harness_hashes(root)
        try:
            outcomes = [
                self._run_service(ctx, spec, root, svc, image, base_path, venv19, seed_dir, hashes)
                for svc in spec.services
            ]
        finally:
            thaw_harness(root)
        return verdict(
            outcomes,
            spec,
            {
                "cvdp_runner": "docker",
                "image": image,
                "python_env": "cocotb19" if spec.cocotb_api == "cocotb19" else "image",
            },
        )

    def _run_service(
        self,
        ctx: Any,
        spec: HarnessSpec,
        root: Path,
        svc: Service,
        image: str,
        base_path: str,
        venv19: str | None,
        seed_dir: Path,
        hashes: dict[str, str],
    ) -> ServiceOutcome:
        channel, probe = open_probe(root, trusted_dirs=[*PROBE_MOUNTS, SEED_MOUNT], trusted_files=hashes)
        env = service_env(
            root, svc, seed=ctx.seed, seed_dir=SEED_MOUNT, probe_dirs=list(PROBE_MOUNTS), probe=probe
        )
        env["PATH"] = f"{venv19}:{base_path}" if spec.cocotb_api == "cocotb19" and venv19 else base_path
        mounts = [(str(h), t, ro) for h, t, ro in code_mounts(root, svc)]
        mounts.append((str(seed_dir), SEED_MOUNT, True))
        mounts += [(str(d), t, True) for d, t in zip(probe_dirs(), PROBE_MOUNTS, strict=True)]
        base = ctx.limits(timeout=service_timeout(ctx))
        limits = Limits(timeout=base.timeout, memory_mb=base.memory_mb, network=False)
        argv = list(svc.command)
        run_service = getattr(ctx.executor, "run_service", None)
        try:
            if run_service is not None:
                res = run_service(
                    image,
                    argv,
                    mounts={h: f"{t}:ro" if ro else t for h, t, ro in mounts},
                    workdir=svc.working_dir,
                    env=env,
                    limits=limits,
                )
                rc, timed_out, output, duration = res.returncode, res.timed_out, res.output, res.duration
                truncated = res.truncated
            else:
                truncated = False
                rc, timed_out, output, duration = run_container(
                    image, argv, mounts, svc.working_dir, env, limits
                )
            received = channel.receive()
        finally:
            channel.close()
        return outcome_from_run(
            svc,
            rc,
            timed_out=timed_out,
            output=output,
            duration=duration,
            received=received,
            harness=ctx.task.harness.files,
            limits=limits,
            truncated=truncated,
        )


def image_available(candidates: tuple[str, ...] = (), *, fallback: bool = True) -> str | None:
    """The first sim image present in the local engine (the candidates, then $RTLREWARD_CVDP_IMAGE and the
    default when `fallback`), or None."""
    import docker

    client = docker.from_env()
    names = [*candidates, *((os.environ.get("RTLREWARD_CVDP_IMAGE", ""), DEFAULT_IMAGE) if fallback else ())]
    for name in (n for n in names if n):
        try:
            client.images.get(name)
            return name
        except docker.errors.ImageNotFound:
            continue
    return None


_LAYOUT: dict[str, tuple[str, str | None]] = {}
_EXECUTOR: Any = None
_EXECUTOR_LOCK = threading.Lock()


def _executor(image: str) -> Any:
    """This process's own DockerExecutor (its construction reaps dead runs' containers), for the image probe and
    for executors without `run_service`."""
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None:
            from rtlreward.sandbox.docker import DockerExecutor

            _EXECUTOR = DockerExecutor(image=image)
        return _EXECUTOR


def _image_layout(image: str) -> tuple[str, str | None]:
    """(the image's PATH, its cocotb 1.9 bin folder or None), looked up once per image id."""
    import docker

    client = docker.from_env()
    img = client.images.get(image)
    if img.id in _LAYOUT:
        return _LAYOUT[img.id]
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    for item in img.attrs.get("Config", {}).get("Env") or ():
        if item.startswith("PATH="):
            path = item[5:]
    probe = " || ".join(f"(test -x {b}/python && echo {b})" for b in COCOTB19_BINS) + " || true"
    res = _executor(image).run_service(
        image, ["sh", "-c", probe], mounts={}, workdir="/", env={"PATH": path}, limits=Limits(timeout=60)
    )
    if res.returncode != 0:
        raise RuntimeError(f"probing the image failed (exit {res.returncode}): {res.output[-500:]}")
    venv19 = res.stdout.strip() or None
    _LAYOUT[img.id] = (path, venv19)
    return _LAYOUT[img.id]


def run_container(
    image: str,
    argv: list[str],
    mounts: list[tuple[str, str, bool]],
    workdir: str,
    env: dict[str, str],
    limits: Limits,
) -> tuple[int, bool, str, float]:
    """One service container with the benchmark's mounts and our policy: (exit code, timed out, output, s)."""
    res = _executor(image).run_service(
        image,
        argv,
        mounts={h: f"{t}:ro" if ro else t for h, t, ro in mounts},
        workdir=workdir,
        env=env,
        limits=limits,
    )
    return res.returncode, res.timed_out, res.output, res.duration
