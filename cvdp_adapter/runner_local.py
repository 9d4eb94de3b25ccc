"""Run a CVDP harness on this machine, each compose service's command through the stage's executor.

With bubblewrap the problem folder's `rtl verif docs src rundir` are bind-mounted at `/code/<dir>` and `src` at
`/src` (read-only), so the harness sees exactly the paths it was written for. Each service's pytest runs the
verdict probe (`cvdp_adapter.harness.open_probe`): its folders are bound read-only, the harness's folder is made
read-only for the run, and the verdict comes from the signed record, never from a file the design can write. Without bubblewrap the same paths
are rewritten in the .env, the harness files and the command (a fidelity fallback; isolation is then only the
executor's rlimits). Harnesses importing `cocotb.runner` (cocotb 1.9) and those whose Dockerfile installs
cocotb-bus run on a managed venv (`cvdp_adapter.cocotb_envs`), whose interpreter is passed explicitly.

Options (the tests stage's options from the profile): `service_timeout` (s, default 600, the benchmark's),
`memory_mb` (default: the stage's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cvdp_adapter import cocotb_envs
from cvdp_adapter.harness import (
    DEFAULT_SERVICE_TIMEOUT,
    HarnessError,
    HarnessSpec,
    Service,
    ServiceOutcome,
    analyse,
    code_mounts,
    error_result,
    freeze_harness,
    harness_hashes,
    materialise,
    open_probe,
    outcome_from_run,
    rewrite_paths,
    service_env,
    thaw_harness,
    verdict,
    write_seed_dir,
)
from rtlreward.model import StageResult
from rtlreward.sandbox import Limits
from rtlreward_hdl.probes import probe_dirs


def service_timeout(ctx: Any) -> float:
    return float((ctx.options or {}).get("service_timeout", DEFAULT_SERVICE_TIMEOUT))


def prepare(ctx: Any) -> tuple[HarnessSpec, Path]:
    """Parse the task's harness and lay out the problem folder in the stage's workspace."""
    task = ctx.task
    if task.harness is None or not task.harness.files:
        raise HarnessError(f"task {task.id} has no CVDP harness files")
    spec = analyse(task.harness.files)
    root = ctx.stage_dir("cvdp")
    materialise(root, context=task.context, answer=ctx.files, harness=task.harness.files)
    return spec, root


class LocalCvdpRunner:
    """`runner.run(ctx) -> StageResult` for `harness.kind == "cvdp"` on the local executor."""

    name = "cvdp-local"

    def run(self, ctx: Any) -> StageResult:
        try:
            spec, root = prepare(ctx)
        except (HarnessError, ValueError) as exc:
            return error_result(f"CVDP harness unusable: {exc}")
        python = ctx.python
        env_name = spec.env_name
        if env_name:
            try:
                python = str(cocotb_envs.ensure_env(env_name))
            except cocotb_envs.EnvSetupError as exc:
                return error_result(
                    f"managed env {env_name} unavailable: {exc}. "
                    "Run `rtlreward cvdp setup-envs` on a machine with PyPI access."
                )
        seed_dir = write_seed_dir(ctx.workspace / ".cvdp-seed")
        # A managed env lives in the user's cache, which the sandbox may hide: bind it back read-only.
        read_only = [cocotb_envs.envs_dir() / env_name] if env_name else []
        read_only += list(probe_dirs())
        if not _binds_ok(ctx):
            _rewrite_tree(root)
        freeze_harness(root)
        hashes = harness_hashes(root)
        try:
            outcomes = [
                self._run_service(ctx, root, svc, python, seed_dir, read_only, hashes)
                for svc in spec.services
            ]
        finally:
            thaw_harness(root)
        return verdict(
            outcomes,
            spec,
            {
                "cvdp_runner": "local",
                "python_env": env_name or "host",
                "isolation": "bind" if _binds_ok(ctx) else "rewrite",
            },
        )

    def _run_service(
        self,
        ctx: Any,
        root: Path,
        svc: Service,
        python: str,
        seed_dir: Path,
        read_only: list[Path],
        hashes: dict[str, str],
    ) -> ServiceOutcome:
        probes = [str(d) for d in probe_dirs()]
        channel, probe = open_probe(
            root,
            trusted_dirs=[*probes, str(seed_dir)],
            trusted_files=hashes,
            untrusted=[str(Path(ctx.workspace).resolve())],
        )
        env = service_env(root, svc, seed=ctx.seed, seed_dir=str(seed_dir), probe_dirs=probes, probe=probe)
        argv = list(svc.command)
        if argv and argv[0] in ("pytest", "py.test"):
            argv = [python, "-m", "pytest", *argv[1:]]
        elif argv and argv[0] in ("python", "python3"):
            argv = [python, *argv[1:]]
        bin_dir = str(Path(python).parent)  # `sh -c "pytest ..."` finds the chosen env's pytest first
        limits = ctx.limits(timeout=service_timeout(ctx))
        limits = Limits(timeout=limits.timeout, memory_mb=limits.memory_mb, network=False)
        try:
            if _binds_ok(ctx):
                binds = {
                    str(host): f"{target}:ro" if ro else target for host, target, ro in code_mounts(root, svc)
                }
                binds[str(seed_dir)] = f"{seed_dir}:ro"
                res = ctx.executor.run(
                    argv,
                    workspace=ctx.workspace,
                    cwd=svc.working_dir,
                    env=env,
                    limits=limits,
                    path_prepend=[bin_dir],
                    read_only=read_only,
                    binds=binds,
                )
            else:
                env = {k: rewrite_paths(v, root) for k, v in env.items()}
                argv = [rewrite_paths(a, root) for a in argv]
                cwd = Path(rewrite_paths(svc.working_dir, root))
                cwd.mkdir(parents=True, exist_ok=True)
                res = ctx.executor.run(
                    argv, workspace=ctx.workspace, cwd=cwd, env=env, limits=limits, path_prepend=[bin_dir]
                )
            received = channel.receive()
        finally:
            channel.close()
        return outcome_from_run(
            svc,
            res.returncode,
            timed_out=res.timed_out,
            output=res.output,
            duration=res.duration,
            received=received,
            harness=ctx.task.harness.files,
            limits=limits,
            truncated=res.truncated,
        )


def _binds_ok(ctx: Any) -> bool:
    return bool(getattr(ctx.executor, "supports_binds", False))


def _rewrite_tree(root: Path) -> None:
    """Rewrite /code and /src in the harness's text files (the fallback without bind mounts). Only src/ is
    touched: it holds the harness; the answer's own files are left as the model wrote them."""
    for path in (root / "src").rglob("*"):
        if path.is_file() and path.suffix in ("", ".py", ".env", ".txt", ".json", ".cfg", ".ini", ".yml"):
            try:
                text = path.read_text()
            except (UnicodeDecodeError, OSError):
                continue
            new = rewrite_paths(text, root)
            if new != text:
                path.write_text(new)
