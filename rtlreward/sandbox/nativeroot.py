"""A native copy of an image's root, for warm containers on a daemon whose storage driver is slow to walk.

With Docker's `fuse-overlayfs` storage driver (hosts where the daemon cannot use the kernel's overlay, e.g. Docker
inside a container), every path lookup that starts at a container's root goes through FUSE, and for a caller that
is not root it costs 8-15x a lookup on the host (`os.stat("/usr/lib")`: 1.8 us on the host, 2.4 us in the
container as root, 14-28 us as the unprivileged user commands run as). A harness run makes tens of thousands of
them (Python imports, pytest, cocotb, the simulators): the CVDP LFSR harness took 1.6 s in a container against
0.7 s under bubblewrap over the same files.

The warm docker executor therefore keeps, per image, a copy of the image's file system on the host's own disk
(`export_root`, made once per image id), mounts it read-only at `NATIVE` inside the slot's container, and runs each
command as `chroot NATIVE setpriv --reuid U --regid G --clear-groups --inh-caps=-all ...`: the command sees the
image's files (the same bytes, exported from it) with a root on a native file system, and runs as the sandbox user
with no capability. The copy has no set-user-ID or set-group-ID bit and no device node; /proc is not mounted in it
(the between-candidates check runs outside the chroot). `wanted()` says when to use it: the driver is
`fuse-overlayfs`, or `RTLREWARD_DOCKER_NATIVE_ROOT=1` (`0` turns it off).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tarfile
import threading
import uuid
from pathlib import Path
from typing import Any

__all__ = ["DEVICES", "NATIVE", "NATIVE_TMPFS", "export_root", "mountpoint", "proc_shim", "wanted"]

log = logging.getLogger(__name__)

NATIVE = "/native"  # where the copy is mounted in a warm container; commands chroot into it
# tmpfs folders inside the copy (private per container; the copy itself is read-only and shared)
NATIVE_TMPFS = ("/tmp", "/dev", "/dev/shm", "/run")
# host devices bound into the copy's /dev (the ones docker's device policy allows a container)
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
SLOW_DRIVERS = ("fuse-overlayfs",)
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def wanted(client: Any) -> bool:
    """Whether warm containers should run commands in a native copy of the image's root."""
    forced = os.environ.get("RTLREWARD_DOCKER_NATIVE_ROOT", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    try:
        driver = str(client.info().get("Driver", ""))
    except Exception:
        return False
    return driver in SLOW_DRIVERS


def _cache_dir() -> Path:
    explicit = os.environ.get("RTLREWARD_ROOTFS_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rtlreward" / "rootfs"


def _safe(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """The image's own files, as they are, minus what a sandbox has no use for: device nodes and FIFOs are
    skipped, set-user-ID / set-group-ID bits dropped; names that would leave `dest` are refused."""
    if member.isdev():
        return None
    name = os.path.normpath(member.name.lstrip("/"))
    if name.startswith("..") or os.path.isabs(name):
        return None
    if member.mode is not None:
        member = member.replace(mode=member.mode & ~0o6000, deep=False)
    return member


def export_root(client: Any, image: str) -> Path:
    """The host folder holding a copy of `image`'s file system, made on first use (once per image id, shared by
    every executor and process of this user: made in a private folder, then renamed into place)."""
    image_id = client.images.get(image).id.split(":")[-1][:24]
    final = _cache_dir() / image_id
    with _locks_guard:
        lock = _locks.setdefault(str(final), threading.Lock())
    with lock:
        if (final / ".rtlreward-complete").exists():
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.parent / f".{image_id}.{uuid.uuid4().hex[:8]}.tmp"
        tmp.mkdir(mode=0o755)
        container = client.containers.create(image, command=["true"], network_disabled=True)
        try:
            stream = container.export()
            reader = _ChunkReader(stream)
            with tarfile.open(fileobj=reader, mode="r|") as tar:
                for member in tar:
                    kept = _safe(member, str(tmp))
                    if kept is not None:
                        tar.extract(kept, tmp, filter="fully_trusted")
            tmp.chmod(0o755)
            (tmp / ".rtlreward-complete").write_text(image + "\n")
            try:
                os.rename(tmp, final)
            except OSError:  # another process made it first
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            with contextlib.suppress(Exception):
                container.remove(force=True)
        log.info("made a native copy of %s's root at %s", image, final)
        _prune(client, final.parent, keep=final.name)
        return final


def _prune(client: Any, folder: Path, *, keep: str) -> None:
    """Remove the copies of images the daemon no longer has (an image rebuilt under the same tag has a new id)."""
    from docker.errors import ImageNotFound

    for entry in folder.iterdir():
        if entry.name == keep or entry.name.startswith(".") or not entry.is_dir():
            continue
        try:
            client.images.get(f"sha256:{entry.name}")
        except ImageNotFound:
            shutil.rmtree(entry, ignore_errors=True)
        except Exception:
            continue


# The one thing of /proc a tool in the copy needs: Yosys finds its share folder (and refuses to start without it)
# through readlink("/proc/self/exe"). Python, Icarus, vvp and cocotb read nothing under /proc/self here.
PROC_SHIM_EXE = "/usr/bin/yosys"


def proc_shim() -> Path:
    """A host folder to mount read-only at the copy's /proc: `self/exe` -> /usr/bin/yosys and nothing else, so
    there is still no /proc through which a command could reach another process (made once, shared)."""
    final = _cache_dir() / f"proc-shim-{PROC_SHIM_EXE.strip('/').replace('/', '_')}"
    if (final / "self" / "exe").is_symlink():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".proc-shim.{uuid.uuid4().hex[:8]}.tmp"
    (tmp / "self").mkdir(parents=True)
    os.symlink(PROC_SHIM_EXE, tmp / "self" / "exe")
    for d in (tmp, tmp / "self"):
        d.chmod(0o755)
    try:
        os.rename(tmp, final)
    except OSError:  # another process made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def mountpoint(copy: Path, target: str, *, is_file: bool = False) -> None:
    """Make `target` (a path inside the container) exist in the read-only copy, so a mount can be placed on it
    there: an empty folder (or file) owned by the copy's owner. Paths under the copy's tmpfs folders need
    nothing: docker makes them inside the tmpfs."""
    rel = target.strip("/")
    if not rel or any(target == t or target.startswith(t.rstrip("/") + "/") for t in NATIVE_TMPFS):
        return
    path = copy / rel
    if os.path.lexists(path):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if is_file:
        path.touch()
    else:
        path.mkdir(exist_ok=True)


class _ChunkReader:
    """A file-like reader over the Docker SDK's chunk iterator (tarfile's stream mode reads from it)."""

    def __init__(self, chunks: Any) -> None:
        self._it = iter(chunks)
        self._buf = b""

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self._buf) < n:
            try:
                self._buf += next(self._it)
            except StopIteration:
                break
        if n < 0:
            out, self._buf = self._buf, b""
        else:
            out, self._buf = self._buf[:n], self._buf[n:]
        return out
