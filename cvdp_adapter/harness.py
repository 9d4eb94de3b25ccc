"""The CVDP harness, read the way NVlabs/cvdp_benchmark runs it, shared by the local and Docker runners.

A CVDP problem's harness is a docker-compose project: `docker-compose.yml` (one service per check, usually one
called `direct`), `src/.env` (SIM, TOPLEVEL, MODULE, VERILOG_SOURCES=/code/rtl/..., PYTHONPATH=/src) and the
cocotb tests with a pytest `src/test_runner.py`. The benchmark writes the problem's context files, then the
model's answer, then the harness files into a folder with `rtl verif docs src rundir`, mounts those at
`/code/<name>` plus `./src` at `/src` (read-only), and runs every service with `docker compose run --rm` in
`/code/rundir`, as the host user, HOME=/code/rundir. A problem passes when every service exits 0.

Everything here is pure (no process is started): parsing, workspace materialisation, the environment each
service sees, and the verdict. The runners decide where the commands run.

The verdict does not read the benchmark's exit code alone, nor any file in the problem folder: those are the
design's to write (a `final` block overwrites cocotb's results XML, which the harness's runner then reports to
pytest as a pass). Each service's pytest runs rtlreward's verdict probe (`rtlreward.verdict`; the pytest hook
`rtlreward_hdl/probe/rtlreward_pytest_probe.py`, loaded with `-p`, no conftest, no ini file, no cache plugin),
which signs the session's outcomes and, for every simulation a test ran, that simulation's own signed cocotb
record. A service passes only when it exited 0 AND its authentic record shows at least one collected test, every
one passed, and every simulation's record complete (`rtlreward_hdl.probes.check_cocotb`) and passed. No authentic
record is an `error`, never a pass.
"""

from __future__ import annotations

import re
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import attrs

from rtlreward.model import Diagnostic, StageResult, Status
from rtlreward.sandbox import Limits, resource_exhaustion
from rtlreward.stage import safe_relpath, write_files
from rtlreward.verdict import Channel, Received, Trust, probe_env, sha256_text
from rtlreward_hdl.probes import PYTEST_HOOK, check_cocotb, modules_of

CODE_DIRS = ("docs", "rundir", "rtl", "verif", "src")  # mounted at /code/<dir>, as the benchmark's docker_cmd
DEFAULT_WORKDIR = "/code/rundir"  # the benchmark passes `-w /code/rundir` whatever the compose file says
DEFAULT_SERVICE_TIMEOUT = 600.0  # the benchmark's DOCKER_TIMEOUT
IMAGE_PLACEHOLDERS = ("__OSS_SIM_IMAGE__", "ghcr.io/hdl/sim/osvb", "hdlc/sim:osvb", "nvidia/cvdp-sim")
JUNIT_DIR = ".rtlreward"  # under rundir: each service's verdict channel (key, signed record) and JUnit XML
HARNESS_DIR = "src"  # the harness's own folder (mounted at /src): answers never write there
# Loaded into every service's pytest: our probe; never a conftest.py, an ini file or the cache (an answer or an
# earlier simulation could have planted them). The harness's own `-o cache_dir=...` then only warns.
PYTEST_PROBE_OPTS = ("-p", PYTEST_HOOK, "--noconftest", "-p", "no:cacheprovider", "-c", "/dev/null")


class HarnessError(ValueError):
    """The harness itself is unusable (no compose file, no service, a volume outside the problem folder)."""


@attrs.frozen(slots=True)
class Volume:
    source: str  # relative to the compose file's folder, e.g. "src"
    target: str  # absolute path in the container, e.g. "/src"
    read_only: bool = False


@attrs.frozen(slots=True)
class Service:
    name: str
    command: tuple[str, ...]  # argv, split like compose splits a string command (no shell)
    env_files: tuple[str, ...] = ()
    volumes: tuple[Volume, ...] = ()
    working_dir: str = DEFAULT_WORKDIR
    image: str | None = None
    build: bool = False  # `build: .` with a Dockerfile FROM the sim image (adds pip packages)


@attrs.frozen(slots=True)
class HarnessSpec:
    services: tuple[Service, ...]
    cocotb_api: str  # "cocotb2" (cocotb_tools.runner) or "cocotb19" (cocotb.runner, removed in cocotb 2)
    pip_requirements: tuple[str, ...] = ()  # what the harness's Dockerfile installs on top of the image
    needs_network: bool = False  # a command installs packages at run time (fails under --network none)

    @property
    def env_name(self) -> str | None:
        """The managed env (cvdp_adapter.cocotb_envs) the local runner needs, None for the host's Python."""
        if self.cocotb_api == "cocotb19":
            return "cocotb19"
        if any(_is_cocotb_bus(r) for r in self.pip_requirements):
            return "cocotb2-bus"
        return None


def _is_cocotb_bus(req: str) -> bool:
    return req.lower().replace("_", "-").startswith("cocotb-bus")


# -- parsing ---------------------------------------------------------------------------------------------------
def parse_compose(text: str) -> tuple[Service, ...]:
    """The services of a docker-compose file, in file order (the order the benchmark runs them)."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise HarnessError(f"docker-compose.yml is not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict) or not data["services"]:
        raise HarnessError("docker-compose.yml has no services")
    services = []
    for name, conf in data["services"].items():
        conf = conf or {}
        cmd = conf.get("command")
        if cmd is None:
            raise HarnessError(f"service {name!r} has no command")
        argv = tuple(shlex.split(cmd)) if isinstance(cmd, str) else tuple(str(x) for x in cmd)
        env_files = conf.get("env_file") or ()
        if isinstance(env_files, str):
            env_files = (env_files,)
        vols = []
        for v in conf.get("volumes") or ():
            vol = _parse_volume(v)
            if vol.target == "/code" or vol.target.startswith("/code/"):
                continue  # the benchmark drops /code volumes and mounts its own folders there
            vols.append(vol)
        services.append(
            Service(
                name=str(name),
                command=argv,
                env_files=tuple(str(_compose_rel(e)) for e in env_files),
                volumes=tuple(vols),
                working_dir=DEFAULT_WORKDIR,
                image=conf.get("image"),
                build="build" in conf,
            )
        )
    return tuple(services)


def _compose_rel(path: str) -> PurePosixPath:
    try:
        return safe_relpath(path)
    except ValueError as exc:
        raise HarnessError(f"compose path {path!r} leaves the problem folder") from exc


def _parse_volume(v: Any) -> Volume:
    if isinstance(v, dict):  # long syntax
        src, target, ro = v.get("source", ""), v.get("target", ""), bool(v.get("read_only"))
    else:
        parts = str(v).split(":")
        if len(parts) < 2:
            raise HarnessError(f"unsupported volume {v!r} (anonymous volumes are not used by CVDP harnesses)")
        src, target = parts[0], parts[1]
        ro = len(parts) > 2 and "ro" in parts[2].split(",")
    rel = _compose_rel(src)
    return Volume(source=str(rel), target="/" + str(target).strip("/"), read_only=ro)


_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(.*?)\s*$")


def parse_env_file(text: str) -> dict[str, str]:
    """Compose's env_file rules as CVDP files use them: `KEY = value` (spaces around `=` allowed), `#` comment
    lines and ` #` trailing comments on unquoted values, single/double quotes stripped."""
    env: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _ENV_LINE.match(line)
        if not m:
            continue
        key, value = m.group(1), m.group(2)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        else:
            value = re.split(r"\s+#", value, maxsplit=1)[0].rstrip()
        env[key] = value
    return env


_RUNNER_OLD = re.compile(r"\bfrom\s+cocotb\.runner\s+import|\bimport\s+cocotb\.runner\b|cocotb\.runner\.")
_RUNNER_NEW = re.compile(r"\bcocotb_tools\.runner\b")
_PIP = re.compile(r"\bpip3?\s+install\s+([^&;|\n]+)")


def analyse(files: Mapping[str, str]) -> HarnessSpec:
    """Parse a harness file dict (the record's `harness` verbatim) into what the runners need."""
    compose = files.get("docker-compose.yml")
    if compose is None:
        raise HarnessError("the harness has no docker-compose.yml; CVDP code-generation harnesses always do")
    services = parse_compose(compose)
    py = "\n".join(t for p, t in files.items() if p.endswith(".py"))
    # Detect the runner API actually imported; a harness importing both (seen once) is a cocotb-2 harness with a
    # fallback, so the host's cocotb is preferred.
    api = "cocotb19" if _RUNNER_OLD.search(py) and not _RUNNER_NEW.search(py) else "cocotb2"
    reqs: list[str] = []
    for path, text in files.items():
        if PurePosixPath(path).name == "Dockerfile":
            for line in text.splitlines():
                if line.strip().upper().startswith("RUN"):
                    for m in _PIP.finditer(line):
                        reqs += [w for w in m.group(1).split() if not w.startswith("-")]
    needs_net = any(_PIP.search(" ".join(s.command)) for s in services)
    return HarnessSpec(
        services=services,
        cocotb_api=api,
        pip_requirements=tuple(dict.fromkeys(reqs)),
        needs_network=needs_net,
    )


# -- workspace -------------------------------------------------------------------------------------------------
def materialise(
    root: Path, *, context: Mapping[str, str], answer: Mapping[str, str], harness: Mapping[str, str]
) -> Path:
    """Lay out one problem folder: the five folders, then context files, the answer, the harness files (in the
    benchmark's order, so a harness file always wins over an answer file of the same name). An answer file
    under `src/` is never written: that folder is the harness's, on every service's PYTHONPATH, and a module
    there (or a `pytest.ini`, a `sitecustomize.py`) would run as harness code."""
    root.mkdir(parents=True, exist_ok=True)
    for d in CODE_DIRS:
        (root / d).mkdir(exist_ok=True)
    write_files(root, context)
    write_files(root, {k: v for k, v in answer.items() if safe_relpath(k).parts[0] != HARNESS_DIR})
    write_files(root, harness)
    (root / "rundir" / JUNIT_DIR).mkdir(exist_ok=True)
    return root


def freeze_harness(root: Path) -> None:
    """Make the harness's folder read-only for the run (files 0444, folders 0555). It is also reachable
    read-write (at /code/src, and through the workspace's own mount): a design that wrote a module there would
    run it in the next simulation or service. The sandbox's user has no capability to override file modes."""
    src = root / HARNESS_DIR
    for path in sorted(src.rglob("*"), key=lambda p: -len(p.parts)):
        if not path.is_symlink():
            path.chmod(0o555 if path.is_dir() else 0o444)
    src.chmod(0o555)


def thaw_harness(root: Path) -> None:
    """Undo `freeze_harness`, so the workspace can be removed by a caller that is not root."""
    src = root / HARNESS_DIR
    if not src.is_dir():
        return
    src.chmod(0o755)
    for path in src.rglob("*"):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)


def code_mounts(root: Path, service: Service) -> list[tuple[Path, str, bool]]:
    """(host path, container path, read-only) for one service: the benchmark's /code folders, then the
    compose file's own volumes (./src -> /src:ro)."""
    mounts = [(root / d, f"/code/{d}", False) for d in CODE_DIRS]
    for v in service.volumes:
        host = root / v.source
        host.mkdir(parents=True, exist_ok=True)
        mounts.append((host, v.target, v.read_only))
    return mounts


def service_env(
    root: Path,
    service: Service,
    *,
    seed: int,
    seed_dir: str | None = None,
    probe_dirs: Sequence[str] = (),
    probe: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The variables a service sees: its env files, HOME=/code/rundir (as the benchmark passes), fixed seeds
    (`rtlreward.seeding.seed_env`: cocotb's COCOTB_RANDOM_SEED / RANDOM_SEED, PYTHONHASHSEED, and Python's
    `random` seeded by a sitecustomize in `seed_dir` (its path as the service sees it), which covers
    test_runner.py's import-time parametrisation), the verdict probe (`probe`: the channel's variables; its
    folders `probe_dirs` on PYTHONPATH right after the seeding folder, before the harness's), and pytest's
    options: the probe plugin, no conftest / ini file / cache, a JUnit XML for people (never the verdict)."""
    env: dict[str, str] = {}
    for ef in service.env_files:
        path = root / ef
        if path.is_file():
            env.update(parse_env_file(path.read_text(errors="replace")))
    env["HOME"] = "/code/rundir"
    base = [p for p in env.get("PYTHONPATH", "").split(":") if p]
    env.update(_seed_vars(seed))
    env["PYTHONPATH"] = ":".join([*([seed_dir] if seed_dir else []), *probe_dirs, *base])
    opts = [*PYTEST_PROBE_OPTS, f"--rootdir={DEFAULT_WORKDIR}"] if probe else []
    opts.append(f"--junitxml=/code/rundir/{JUNIT_DIR}/junit-{_safe_name(service.name)}.xml")
    env["PYTEST_ADDOPTS"] = " ".join(opts)
    # The benchmark's image has a bare pytest; the host's may carry plugins (asyncio, anyio) that cost start-up
    # time and could change collection. Harnesses need none of them.
    env.setdefault("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    if probe:
        env.update(probe_env())
        env.update(probe)
    return env


def harness_hashes(root: Path) -> dict[str, str]:
    """{path as a service sees it: sha256} of the harness's Python files as written (after any path rewriting):
    the only files under /code a probed process may import. Read once, before any service runs."""
    src = root / HARNESS_DIR
    out: dict[str, str] = {}
    for path in sorted(src.rglob("*.py")):
        if path.is_file() and not path.is_symlink():
            rel = path.relative_to(src).as_posix()
            digest = sha256_text(path.read_bytes())
            out[f"/src/{rel}"] = out[f"/code/src/{rel}"] = digest
    return out


def open_probe(
    root: Path,
    *,
    trusted_dirs: Sequence[str],
    trusted_files: Mapping[str, str],
    untrusted: Sequence[str] = (),
) -> tuple[Channel, dict[str, str]]:
    """One service's verdict channel: its key file under rundir/.rtlreward, and the probe's variables with paths
    as the service sees them (/code/rundir/...). `trusted_dirs`: the probe and seeding folders as the service sees
    them (read-only there); `trusted_files`: `harness_hashes(root)`; `untrusted`: writable roots besides /code
    (e.g. the workspace's own mount)."""
    channel = Channel.open(root / "rundir" / JUNIT_DIR, role="pytest", hooks=(PYTEST_HOOK,))
    trust = Trust(dirs=trusted_dirs, files=trusted_files, untrusted=["/code", *untrusted])
    rundir = (root / "rundir").resolve()

    def place(path: Path) -> str:
        return f"{DEFAULT_WORKDIR}/{Path(path).resolve().relative_to(rundir).as_posix()}"

    return channel, channel.env(trust, place)


def _seed_vars(seed: int) -> dict[str, str]:
    try:
        from rtlreward.seeding import seed_env

        with tempfile.TemporaryDirectory() as tmp:  # only the variables: the folder is ours (seed_dir)
            env = seed_env(seed, site_dir=tmp)
        env.pop("PYTHONPATH", None)
        return env
    except ImportError:  # pragma: no cover - the core's seeding module is part of rtlreward
        s = str(int(seed) % (1 << 32))
        return {"RTLREWARD_SEED": s, "COCOTB_RANDOM_SEED": s, "RANDOM_SEED": s, "PYTHONHASHSEED": s}


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def write_seed_dir(path: Path) -> Path:
    """The seeding sitecustomize (rtlreward.seeding's) in a folder the sandbox or container can read."""
    from rtlreward.seeding import write_sitecustomize

    return write_sitecustomize(path)


_CONTAINER_PATH = re.compile(r"(?<![\w./-])/(code|src|rundir)(?=/|\b)")


def rewrite_paths(text: str, root: Path) -> str:
    """Map the container's /code/<dir>, /src (and the /rundir some commands use as pytest's cache) onto the
    problem folder, for hosts without bubblewrap. One pass, so a rewritten path is never rewritten again."""

    def sub(m: re.Match[str]) -> str:
        return {"code": str(root), "src": str(root / "src"), "rundir": str(root / "rundir")}[m.group(1)]

    return _CONTAINER_PATH.sub(sub, text)


# -- results ---------------------------------------------------------------------------------------------------
@attrs.frozen(slots=True)
class CaseFailure:
    name: str
    message: str


@attrs.frozen(slots=True)
class ServiceOutcome:
    name: str
    returncode: int
    timed_out: bool = False
    tests_passed: int = 0
    tests_total: int = 0
    failures: tuple[CaseFailure, ...] = ()
    record_passed: bool = False  # the service's authentic record shows every collected test passed
    output_tail: str = ""
    duration: float = 0.0
    error: str = ""  # no authentic, complete record (or the runner could not start the service at all)
    cocotb_failures: tuple[CaseFailure, ...] = ()  # from the simulations' signed cocotb records
    # The answer's design ran and the service ended at a sandbox limit (rtlreward.sandbox.resource_exhaustion):
    # the limit's name ("memory", "stack", ...) and what the model is told. The answer's failure, not an error.
    limit: str = ""
    limit_message: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.error and self.record_passed


def outcome_from_run(
    service: Service,
    returncode: int,
    *,
    timed_out: bool,
    output: str,
    duration: float,
    received: Received | None,
    harness: Mapping[str, str],
    limits: Limits | None = None,
    truncated: bool = False,
) -> ServiceOutcome:
    """One service's outcome from its signed record. The exit status must be 0 too; credit is the record's
    tests passed / tests collected, and a failed service never gets full credit. `limits`: the service's
    sandbox limits, named when the answer's design ran into one (`truncated`: its output passed the cap)."""

    def exhausted() -> ServiceOutcome | None:
        # The service ran the answer's design (its harness compiles and simulates it) and ended without a
        # verdict: a sandbox limit hit on the way is the design's doing, since the reference passes under the same
        # limits. What stays an error is a service that ended some other way.
        hit = resource_exhaustion(output, returncode, limits=limits, truncated=truncated)
        if hit is None:
            return None
        return ServiceOutcome(tests_total=1, limit=hit.limit, limit_message=hit.message, **base)

    base = {
        "name": service.name,
        "returncode": returncode,
        "output_tail": output[-4000:],
        "duration": duration,
    }
    if timed_out:
        return ServiceOutcome(timed_out=True, tests_total=1, **base)
    if received is None or not received.authentic:
        why = received.problem if received is not None else "no verdict channel"
        if received is not None:  # a channel was open, so the service started: a limit it hit is the design's
            limited = exhausted()
            if limited is not None:
                return limited
        return ServiceOutcome(
            tests_total=1,
            error=f"no authentic test record from the service's pytest ({why}; exit code {returncode})",
            **base,
        )
    rec = received.payload or {}
    items, sims, collected = rec.get("items"), rec.get("sims"), rec.get("collected")
    if rec.get("kind") != "pytest" or not isinstance(items, list) or not isinstance(sims, list):
        return ServiceOutcome(tests_total=1, error="the service's record is not a pytest session", **base)
    if rec.get("sims_total") != len(sims):
        return ServiceOutcome(tests_total=1, error="the service's record lists too many simulations", **base)
    if collected is not None and (not isinstance(collected, int) or collected < len(items)):
        return ServiceOutcome(tests_total=1, error="the service's record is inconsistent", **base)

    modules = sorted(
        {
            m.strip()
            for s in sims
            if isinstance(s, dict) and isinstance(s.get("record"), dict)
            for m in str(s["record"].get("modules") or "").split(",")
            if m.strip()
        }
    )
    defined = modules_of(harness, modules, roots=(f"{HARNESS_DIR}/", ""))
    bad_items: set[str] = set()
    cocotb: list[CaseFailure] = []
    sims_ok = True
    for s in sims:
        item = s.get("item") if isinstance(s, dict) else None
        if not isinstance(s, dict) or not s.get("started"):
            bad_items.add(str(item))  # a test whose simulator never started cannot pass
            sims_ok = False
            continue
        if not isinstance(s.get("record"), dict):
            limited = exhausted()  # the simulation started: the answer's design was running
            if limited is not None:
                return limited
            return ServiceOutcome(
                tests_total=1,
                error=f"a simulation ended without an authentic test record ({s.get('problem') or 'none'}): the "
                "simulator crashed or the design destroyed its record",
                **base,
            )
        run = check_cocotb(s["record"], defined)
        if run.problem:
            return ServiceOutcome(
                tests_total=1, error=f"a simulation's test record is incomplete: {run.problem}", **base
            )
        if not run.ok:
            bad_items.add(str(item))
            sims_ok = False
            cocotb += [CaseFailure(c.name, c.message) for c in run.cases if c.outcome == "failed"]
    passed = total = 0
    failures: list[CaseFailure] = []
    for it in items:
        if not isinstance(it, dict):
            continue
        outcome, nodeid = it.get("outcome"), str(it.get("nodeid") or "?")
        if outcome == "skipped":
            continue
        total += 1
        if outcome == "passed" and nodeid not in bad_items:
            passed += 1
        elif outcome == "passed":
            failures.append(
                CaseFailure(_case_name(nodeid), "its simulation failed (the signed cocotb record)")
            )
        else:
            failures.append(CaseFailure(_case_name(nodeid), str(it.get("message") or outcome)))
    missing = (
        _missing_tool(failures) if not any(isinstance(s, dict) and s.get("started") for s in sims) else None
    )
    if missing:
        # No simulation started and the harness says why in cocotb's own words: the environment lacks a tool (a
        # simulator, cocotb itself). That is an error, never the design's failure: no design code ran yet.
        return ServiceOutcome(
            tests_total=1,
            error=f"the harness could not start: {missing} (not installed where it runs)",
            **base,
        )
    if collected is not None:
        total = max(
            total,
            collected - sum(1 for it in items if isinstance(it, dict) and it.get("outcome") == "skipped"),
        )
    record_passed = bool(
        rec.get("exitstatus") == 0 and total >= 1 and passed == total and sims_ok and not rec.get("errors")
    )
    ok = returncode == 0 and record_passed
    if total == 0:
        total = 1
    if not ok and passed >= total:
        passed = total - 1  # a crash after the cases must not read as full credit
    return ServiceOutcome(
        tests_passed=passed,
        tests_total=total,
        failures=tuple(failures),
        record_passed=record_passed,
        cocotb_failures=tuple(dict.fromkeys(cocotb))[:20],
        **base,
    )


# What cocotb or Python say, first line of a test's failure, when a tool is missing: matched from the start only,
# so a design's text quoted later in a message (a compile error) cannot make its own failure look like one.
_MISSING_TOOL = (
    re.compile(r"^(?:SystemExit: )?ERROR: (\S+) executable not found!"),
    re.compile(r"^(?:E\s+)?ModuleNotFoundError: No module named '((?:cocotb|cocotb_tools|pytest)\b[\w.]*)'"),
)


def _missing_tool(failures: Sequence[CaseFailure]) -> str | None:
    """`iverilog executable not found` / `No module named 'cocotb'` when every failed case says so."""
    found = []
    for f in failures:
        first = (f.message or "").strip().splitlines()[0] if (f.message or "").strip() else ""
        hit = next((m for m in (p.match(first) for p in _MISSING_TOOL) if m), None)
        if hit is None:
            return None
        found.append(hit.group(1))
    return ", ".join(dict.fromkeys(found)) if found else None


def _case_name(nodeid: str) -> str:
    return nodeid.rsplit("::", 1)[-1]


RESULT_VERSION = "cvdp-1"


def verdict(
    outcomes: Sequence[ServiceOutcome],
    spec: HarnessSpec | None = None,
    extra_metrics: Mapping[str, Any] | None = None,
    *,
    name: str = "tests",
) -> StageResult:
    """The CVDP verdict (every service exited 0) with partial credit = cases passed / cases run."""
    passed = sum(o.tests_passed for o in outcomes)
    total = sum(o.tests_total for o in outcomes)
    all_ok = bool(outcomes) and all(o.ok for o in outcomes)
    if all_ok:
        status = Status.PASSED
    elif any(o.timed_out for o in outcomes):
        status = Status.TIMEOUT
    elif any(o.error for o in outcomes):
        status = Status.ERROR  # ours or the task's; a limit the design ran into is not (`o.limit`: failed)
    else:
        status = Status.FAILED
    diags: list[Diagnostic] = []
    lines: list[str] = []
    for o in outcomes:
        if o.ok:
            continue
        if o.error:
            diags.append(Diagnostic(f"service {o.name}: {o.error}", code="harness-error"))
            lines.append(f"service {o.name} could not run: {o.error}")
            continue
        if o.limit:
            diags.append(
                Diagnostic(
                    f"service {o.name}: {o.limit_message}", code="resource-limit", fields={"limit": o.limit}
                )
            )
            lines.append(f"service {o.name}: {o.limit_message}")
            continue
        if o.timed_out:
            diags.append(Diagnostic(f"service {o.name} exceeded its time limit", code="timeout"))
            lines.append(f"service {o.name} timed out")
        for f in o.failures[:10]:
            diags.append(Diagnostic(f"{f.name}: {_first_lines(f.message, 3)}", code="test-failed"))
        if not o.failures and not o.cocotb_failures and not o.timed_out:
            diags.append(
                Diagnostic(
                    f"service {o.name} exited with {o.returncode}: {_tail(o.output_tail, 6)}",
                    code="service-failed",
                )
            )
        lines.append(
            f"service {o.name}: {o.tests_total - o.tests_passed} of {o.tests_total} test cases failed"
            if o.tests_total
            else f"service {o.name} failed"
        )
        lines += [f"  {f.name}: {_first_lines(f.message, 2)}" for f in o.failures[:5]]
        for f in o.cocotb_failures[:10]:
            diags.append(
                Diagnostic(f"cocotb test {f.name}: {_first_lines(f.message, 3)}", code="cocotb-failed")
            )
        lines += [f"  cocotb {f.name}: {_first_lines(f.message, 2)}" for f in o.cocotb_failures[:5]]
    metrics: dict[str, Any] = {
        "tests_passed": passed,
        "tests_total": total,
        "services": {
            o.name: {
                "returncode": o.returncode,
                "timed_out": o.timed_out,
                "passed": o.tests_passed,
                "total": o.tests_total,
                "duration": round(o.duration, 3),
            }
            for o in outcomes
        },
    }
    limited = [o.limit for o in outcomes if o.limit]
    if limited:
        metrics["resource_limit"] = limited[0]
    if spec is not None:
        metrics["cocotb_api"] = spec.cocotb_api
    metrics.update(extra_metrics or {})
    score = 1.0 if all_ok else (passed / total if total else 0.0)
    feedback = "all CVDP harness services passed" if all_ok else "\n".join(lines)[:4000]
    return StageResult(
        name=name,
        status=status,
        score=max(0.0, min(1.0, score)),
        metrics=metrics,
        diagnostics=tuple(diags),
        feedback=feedback,
        version=RESULT_VERSION,
        artifacts={"outputs": {o.name: o.output_tail for o in outcomes}},
    )


def error_result(message: str, *, name: str = "tests", code: str = "harness-error") -> StageResult:
    """The harness could not run at all: an error (never the candidate's credit, never a pass)."""
    return StageResult(
        name=name,
        status=Status.ERROR,
        score=0.0,
        metrics={"tests_passed": 0, "tests_total": 0},
        diagnostics=(Diagnostic(message, code=code),),
        feedback=message,
        version=RESULT_VERSION,
    )


def _first_lines(text: str, n: int) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[:n])[:500]


def _tail(text: str, n: int) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-n:] if line.strip())[:800]
