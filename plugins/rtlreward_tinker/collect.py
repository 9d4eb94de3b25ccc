"""An agent's answer files, read out of its workspace without ever leaving it.

The agent's commands own the workspace: anything in it may be a symbolic link to a host file (`ln -s /root/x
/code/rtl`, a link to `/`), a hard link, a FIFO, a huge sparse file or a hundred thousand entries, and in a
Docker sandbox a background process may still be swapping names while we read. Both sandboxes (bubblewrap and
Docker) bind a host folder at /code, so the collection happens here, on the host, where a followed link would
read the host's files. Hence:

- the walk goes from a directory descriptor opened with O_DIRECTORY|O_NOFOLLOW at the workspace root (checked
  against the identity it had when the sandbox made it), and every path component is opened relative to its
  parent's descriptor with O_NOFOLLOW: a link is never followed, whatever is swapped in between;
- only regular files are read: each entry is lstat-ed, opened with O_NOFOLLOW|O_NONBLOCK (a FIFO swapped in
  cannot block), fstat-ed, and must still be the same inode, a regular file with one link (st_nlink == 1: a
  second name may lie outside the workspace, and no agent needs a hard link to hand in an answer), on the
  workspace's file system, within the size budget; reading stops at the budget even if the file grows;
- budgets bound the work whatever the agent made: bytes per file and in total, files collected, directory
  entries examined, and depth. Directories are listed in sorted order and one whose listing would exceed the
  entry budget is skipped whole, so a collection is deterministic for a given tree.

Everything skipped becomes a `Diagnostic` (never with a file's content), so an episode shows what was left out.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import attrs

from rtlreward.model import Diagnostic

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
BUILD_PRODUCTS = (".vvp", ".out", ".vcd", ".fst", ".o", ".so", ".pyc")


@attrs.frozen(slots=True)
class Budget:
    """How much of a workspace is read at most. The defaults are far above any answer (CVDP answers are a few
    files of tens of KB) and far below what would slow a training step."""

    file_bytes: int = 1 << 20
    total_bytes: int = 8 << 20
    files: int = 500
    entries: int = 20_000
    depth: int = 24


@attrs.frozen(slots=True)
class Collection:
    """The files collected (workspace-relative POSIX path -> text) and what was skipped, with why."""

    files: dict[str, str] = attrs.field(factory=dict)
    skipped: tuple[Diagnostic, ...] = ()
    entries: int = 0  # directory entries examined
    complete: bool = True  # False when a budget stopped the walk early

    @property
    def refused(self) -> tuple[Diagnostic, ...]:
        """Skips that are not routine (build products are routine)."""
        return tuple(d for d in self.skipped if d.severity != "info")

    def report(self, limit: int = 20) -> str:
        """The skips as lines a log or a person can read."""
        lines = [str(d) for d in self.skipped[:limit]]
        if len(self.skipped) > limit:
            lines.append(f"... and {len(self.skipped) - limit} more")
        return "\n".join(lines)


class _Walk:
    def __init__(self, budget: Budget, unchanged: Mapping[str, str], dev: int) -> None:
        self.budget = budget
        self.unchanged = unchanged
        self.dev = dev
        self.files: dict[str, str] = {}
        self.skipped: list[Diagnostic] = []
        self.entries = 0
        self.total = 0
        self.complete = True

    def skip(self, rel: str, message: str, code: str, severity: str = "warning") -> None:
        self.skipped.append(
            Diagnostic(message=f"not collected: {message}", file=rel, severity=severity, code=code)
        )

    def stop(self, rel: str, message: str, code: str) -> None:
        self.complete = False
        self.skip(rel, message, code)

    def list_names(self, fd: int, rel: str) -> list[str] | None:
        """The entry names of a directory, sorted, or None when listing it would exceed the entry budget."""
        room = self.budget.entries - self.entries
        names: list[str] = []
        with os.scandir(fd) as it:
            for entry in it:
                if len(names) >= room:
                    self.stop(
                        rel,
                        f"the workspace has more than {self.budget.entries} entries; this folder and what "
                        "follows it were not read",
                        "entry-budget",
                    )
                    return None
                names.append(entry.name)
        self.entries += len(names)
        return sorted(names)

    def walk(self, fd: int, rel: str, depth: int) -> None:
        names = self.list_names(fd, rel)
        if names is None:
            return
        for name in names:
            if not self.complete:
                return
            child = f"{rel}/{name}" if rel else name
            try:
                child.encode("utf-8")
            except UnicodeEncodeError:
                self.skip(child.encode("utf-8", "replace").decode(), "the name is not UTF-8", "bad-name")
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError as exc:
                self.skip(child, f"cannot stat it ({exc.strerror})", "unreadable")
                continue
            if stat.S_ISLNK(st.st_mode):
                self.skip(child, "a symbolic link (links are never followed)", "symlink")
            elif stat.S_ISDIR(st.st_mode):
                self.directory(fd, name, child, st, depth + 1)
            elif stat.S_ISREG(st.st_mode):
                self.regular(fd, name, child, st)
            else:
                self.skip(child, f"not a regular file ({_kind(st.st_mode)})", "not-regular")

    def directory(self, parent: int, name: str, rel: str, st: os.stat_result, depth: int) -> None:
        if st.st_dev != self.dev:
            self.skip(rel, "on another file system", "other-fs")
            return
        if depth > self.budget.depth:
            self.skip(rel, f"nested deeper than {self.budget.depth} folders", "depth-budget")
            return
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=parent)
        except OSError as exc:
            self.skip(rel, _open_error(exc), "unreadable")
            return
        try:
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                self.skip(rel, "it changed while it was being read", "changed")
                return
            self.walk(fd, rel, depth)
        except OSError as exc:
            self.skip(rel, f"cannot list it ({exc.strerror})", "unreadable")
        finally:
            os.close(fd)

    def regular(self, parent: int, name: str, rel: str, st: os.stat_result) -> None:
        b = self.budget
        if rel.endswith(BUILD_PRODUCTS):
            self.skip(rel, "a build product", "build-product", severity="info")
            return
        if len(self.files) >= b.files:
            self.stop(
                rel, f"more than {b.files} files; this one and what follows were not read", "file-budget"
            )
            return
        reason = self._refuse(st)
        if reason:
            self.skip(rel, *reason)
            return
        if self.total + st.st_size > b.total_bytes:
            self.skip(rel, f"the answer files would exceed {b.total_bytes} bytes in total", "total-budget")
            return
        try:
            fd = os.open(name, FILE_FLAGS, dir_fd=parent)
        except OSError as exc:
            self.skip(rel, _open_error(exc), "unreadable")
            return
        try:
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                self.skip(rel, "it changed while it was being read", "changed")
                return
            reason = self._refuse(now)
            if reason:
                self.skip(rel, *reason)
                return
            data = _read_at_most(fd, b.file_bytes + 1)
        except OSError as exc:
            self.skip(rel, f"cannot read it ({exc.strerror})", "unreadable")
            return
        finally:
            os.close(fd)
        if len(data) > b.file_bytes:
            self.skip(rel, f"larger than {b.file_bytes} bytes", "too-large")
            return
        if self.total + len(data) > b.total_bytes:
            self.skip(rel, f"the answer files would exceed {b.total_bytes} bytes in total", "total-budget")
            return
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            self.skip(rel, "not UTF-8 text", "binary")
            return
        self.total += len(data)
        if self.unchanged.get(rel) != text:
            self.files[rel] = text

    def _refuse(self, st: os.stat_result) -> tuple[str, str] | None:
        if not stat.S_ISREG(st.st_mode):
            return f"not a regular file ({_kind(st.st_mode)})", "not-regular"
        if st.st_dev != self.dev:
            return "on another file system", "other-fs"
        if st.st_nlink != 1:
            return f"a hard link ({st.st_nlink} names); copy the file instead", "hard-link"
        if st.st_size > self.budget.file_bytes:
            return f"larger than {self.budget.file_bytes} bytes ({st.st_size})", "too-large"
        return None


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return name
    return "an unknown kind"


def _open_error(exc: OSError) -> str:
    if exc.errno in (errno.ELOOP, errno.EMLINK):
        return "it became a symbolic link while it was being read (links are never followed)"
    if exc.errno == errno.ENOTDIR:
        return "it stopped being a folder while it was being read"
    return f"cannot open it ({exc.strerror})"


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < limit:
        try:
            chunk = os.read(fd, min(1 << 16, limit - got))
        except BlockingIOError:  # only a non-regular file can say so; it was refused before
            break
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def root_identity(root: Path) -> tuple[int, int]:
    """(st_dev, st_ino) of a workspace root, taken when the sandbox makes it, checked when collecting."""
    st = os.stat(root, follow_symlinks=False)
    return st.st_dev, st.st_ino


def collect_files(
    root: Path,
    tops: Sequence[str],
    *,
    unchanged: Mapping[str, str] | None = None,
    budget: Budget | None = None,
    identity: tuple[int, int] | None = None,
) -> Collection:
    """The UTF-8 regular files under `root/<top>` for each top folder name, minus those equal to `unchanged`
    (the task's context as it was handed over), within `budget`. `identity` (from `root_identity`) makes sure
    the root is still the folder the sandbox was given. Never follows a link and never raises for anything the
    agent can do to the tree."""
    walk_budget = budget or Budget()
    try:
        root_fd = os.open(root, DIR_FLAGS)
    except OSError as exc:
        return Collection(
            skipped=(
                Diagnostic(f"not collected: the workspace cannot be opened ({exc.strerror})", code="root"),
            ),
            complete=False,
        )
    try:
        st = os.fstat(root_fd)
        if identity is not None and (st.st_dev, st.st_ino) != identity:
            return Collection(
                skipped=(Diagnostic("not collected: the workspace root was replaced", code="root"),),
                complete=False,
            )
        w = _Walk(walk_budget, unchanged or {}, st.st_dev)
        for top in tops:
            if not w.complete:
                break
            try:
                tst = os.stat(top, dir_fd=root_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                w.skip(top, f"cannot stat it ({exc.strerror})", "unreadable")
                continue
            w.entries += 1
            if stat.S_ISLNK(tst.st_mode):
                w.skip(top, "a symbolic link (links are never followed)", "symlink")
            elif stat.S_ISDIR(tst.st_mode):
                w.directory(root_fd, top, top, tst, 1)
            else:
                w.skip(top, f"not a folder ({_kind(tst.st_mode)})", "not-regular")
        return Collection(files=w.files, skipped=tuple(w.skipped), entries=w.entries, complete=w.complete)
    finally:
        with contextlib.suppress(OSError):
            os.close(root_fd)


def make_tree_removable(root: Path, max_depth: int = 256) -> None:
    """Give the owner rwx on every real folder under `root` (the agent may have chmod-ed some to 000), so a plain
    `shutil.rmtree` (which never follows links) can remove the tree. Call it only once no agent process is
    left (the sandbox is stopped): each entry is lstat-ed relative to its parent's descriptor and only a real
    folder is chmod-ed, so no link target outside the tree is ever touched. Descriptors are held along one
    path only, at most `max_depth` deep."""

    def children(fd: int) -> Iterator[str]:
        try:
            return iter(os.listdir(fd))
        except OSError:
            return iter(())

    with contextlib.suppress(OSError):
        st = os.stat(root, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            os.chmod(root, stat.S_IRWXU | stat.S_IMODE(st.st_mode))
    try:
        top = os.open(root, DIR_FLAGS)
    except OSError:
        return
    stack = [(top, children(top))]
    try:
        while stack:
            fd, names = stack[-1]
            for name in names:
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    if not stat.S_ISDIR(st.st_mode):
                        continue
                    if st.st_mode & stat.S_IRWXU != stat.S_IRWXU:
                        os.chmod(name, stat.S_IRWXU | stat.S_IMODE(st.st_mode), dir_fd=fd)
                    if len(stack) >= max_depth:
                        continue
                    child = os.open(name, DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue
                stack.append((child, children(child)))
                break
            else:
                stack.pop()
                os.close(fd)
    finally:
        for fd, _ in stack:
            os.close(fd)
