"""The agentic file collection against workspaces an attacker built on the host side, where every trick is
possible (the episode tests in test_agentic_hostile.py do the same from inside the sandboxes): symbolic links
to a canary and to `/`, a hard link to a file outside, a FIFO, /dev/zero, a 1 GiB sparse file, 100k files, a
name swapped between a file and a link while the collection runs, a replaced root. Each asserts that the
canary's content is nowhere in the result (files or diagnostics) and that what was left out is reported.

No timings: "finishes quickly" is asserted as work done (entries examined within the budget) and, for the
cases that would block or walk the disk, by the collection returning at all within a generous guard.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import threading
import uuid
from pathlib import Path

import pytest

from rtlreward.model import Task
from rtlreward_tinker.collect import Budget, Collection, collect_files, make_tree_removable, root_identity

TOPS = ("rtl", "verif", "docs")
GUARD = 120  # seconds: only a hang reaches it


@pytest.fixture
def canary(tmp_path: Path) -> tuple[Path, str]:
    """A 0600 secret outside the workspace."""
    secret = f"CANARY-{uuid.uuid4().hex}"
    folder = tmp_path / "outside"
    folder.mkdir()
    path = folder / "secret.sv"
    path.write_text(f"module leak; // {secret}\nendmodule\n")
    path.chmod(0o600)
    return path, secret


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "code"
    for d in ("rtl", "verif", "docs", "rundir"):
        (root / d).mkdir(parents=True)
    (root / "docs" / "spec.md").write_text("the spec\n")
    return root


CONTEXT = {"docs/spec.md": "the spec\n"}


def collect(root: Path, **kw) -> Collection:
    """collect_files in a worker thread, so a blocking read fails the test instead of hanging it."""
    out: list[Collection] = []
    t = threading.Thread(target=lambda: out.append(collect_files(root, TOPS, unchanged=CONTEXT, **kw)))
    t.daemon = True
    t.start()
    t.join(GUARD)
    assert out, "the collection blocked"
    return out[0]


def assert_no_leak(c: Collection, secret: str) -> None:
    assert all(secret not in text for text in c.files.values())
    assert all(secret not in str(d) for d in c.skipped)
    assert secret not in c.report(10**6)


def codes(c: Collection) -> set[str]:
    return {d.code for d in c.skipped}


def test_a_plain_answer_is_collected_and_unchanged_context_is_not(ws):
    (ws / "rtl" / "top.sv").write_text("module top; endmodule\n")
    (ws / "rtl" / "sub").mkdir()
    (ws / "rtl" / "sub" / "a.v").write_text("module a; endmodule\n")
    (ws / "rtl" / "sim.vvp").write_text("#! vvp\n")
    (ws / "rundir" / "scratch.sv").write_text("not an answer\n")
    c = collect(ws, identity=root_identity(ws))
    assert c.files == {"rtl/sub/a.v": "module a; endmodule\n", "rtl/top.sv": "module top; endmodule\n"}
    assert c.complete and not c.refused
    assert [(d.file, d.code, d.severity) for d in c.skipped] == [("rtl/sim.vvp", "build-product", "info")]
    (ws / "docs" / "spec.md").write_text("edited spec\n")
    assert collect(ws).files["docs/spec.md"] == "edited spec\n"


def test_answer_folder_linked_to_a_folder_outside_is_not_read(ws, canary):
    path, secret = canary
    (ws / "rtl").rmdir()
    (ws / "rtl").symlink_to(path.parent)
    c = collect(ws)
    assert c.files == {}
    assert_no_leak(c, secret)
    assert [(d.file, d.code) for d in c.refused] == [("rtl", "symlink")]


def test_answer_file_linked_to_a_canary_is_not_read(ws, canary):
    path, secret = canary
    (ws / "rtl" / "top.sv").symlink_to(path)
    (ws / "verif" / "deep").mkdir()
    (ws / "verif" / "deep" / "tb.sv").symlink_to(path)
    c = collect(ws)
    assert c.files == {}
    assert_no_leak(c, secret)
    assert {d.file for d in c.refused} == {"rtl/top.sv", "verif/deep/tb.sv"} and codes(c) == {"symlink"}


def test_a_link_to_the_root_of_the_disk_is_not_walked(ws):
    (ws / "rtl" / "all").symlink_to("/")
    (ws / "docs").rename(ws / "docs-old")
    (ws / "docs").symlink_to("/")
    c = collect(ws)
    assert c.files == {} and codes(c) == {"symlink"}
    assert c.entries < 10  # the disk was not walked


def test_a_hard_link_to_a_file_outside_is_refused(ws, canary):
    path, secret = canary
    os.link(path, ws / "rtl" / "top.sv")  # same file system (both under pytest's tmp folder)
    c = collect(ws)
    assert c.files == {}
    assert_no_leak(c, secret)
    assert [(d.file, d.code) for d in c.refused] == [("rtl/top.sv", "hard-link")]


def test_a_fifo_and_dev_zero_do_not_block_and_are_reported(ws):
    os.mkfifo(ws / "rtl" / "top.sv")
    (ws / "rtl" / "zero.sv").symlink_to("/dev/zero")
    (ws / "verif" / "null.sv").symlink_to("/dev/null")
    c = collect(ws)
    assert c.files == {}
    assert {(d.file, d.code) for d in c.refused} == {
        ("rtl/top.sv", "not-regular"),
        ("rtl/zero.sv", "symlink"),
        ("verif/null.sv", "symlink"),
    }


def test_a_1gib_sparse_file_is_refused_by_its_size_without_being_read(ws):
    big = ws / "rtl" / "top.sv"
    with open(big, "wb") as f:
        f.truncate(1 << 30)
    (ws / "rtl" / "ok.sv").write_text("module ok; endmodule\n")
    c = collect(ws)
    assert c.files == {"rtl/ok.sv": "module ok; endmodule\n"}
    assert [(d.file, d.code) for d in c.refused] == [("rtl/top.sv", "too-large")]


def test_100k_files_stop_at_the_entry_budget(ws):
    many = ws / "rtl" / "many"
    many.mkdir()
    for i in range(100_000):
        (many / f"f{i}.sv").touch()
    (ws / "rtl" / "a.sv").write_text("module a; endmodule\n")
    budget = Budget()
    c = collect(ws, budget=budget)
    assert not c.complete and "entry-budget" in codes(c)
    assert c.entries <= budget.entries
    assert c.files == {"rtl/a.sv": "module a; endmodule\n"}  # listed before the folder that blew the budget


def test_file_count_and_byte_budgets(ws):
    for i in range(20):
        (ws / "rtl" / f"f{i:02}.sv").write_text("x" * 100 + "\n")
    c = collect(ws, budget=Budget(files=5))
    assert sorted(c.files) == [f"rtl/f{i:02}.sv" for i in range(5)]
    assert not c.complete and "file-budget" in codes(c)
    c = collect(ws, budget=Budget(total_bytes=350))
    assert len(c.files) == 3 and "total-budget" in codes(c)
    c = collect(ws, budget=Budget(file_bytes=50))
    assert c.files == {} and codes(c) == {"too-large"}


def test_depth_budget_binary_and_bad_names(ws):
    deep = ws / "rtl"
    for i in range(6):
        deep = deep / f"d{i}"
    deep.mkdir(parents=True)
    (deep / "x.sv").write_text("deep\n")
    (ws / "rtl" / "bin.sv").write_bytes(b"\xff\xfe\x00")
    (Path(os.fsdecode(bytes(ws / "rtl") + b"/bad\xffname.sv"))).write_text("x\n")
    c = collect(ws, budget=Budget(depth=4))
    assert c.files == {}
    assert {"depth-budget", "binary", "bad-name"} <= codes(c)


def test_a_replaced_root_is_not_collected(ws, tmp_path):
    ident = root_identity(ws)
    (ws / "rtl" / "a.sv").write_text("x\n")
    ws.rename(tmp_path / "moved")
    (tmp_path / "code").symlink_to(tmp_path / "moved")
    c = collect(ws, identity=ident)
    assert c.files == {} and codes(c) == {"root"}
    (tmp_path / "code").unlink()
    (tmp_path / "code").mkdir()
    c = collect(ws, identity=ident)
    assert c.files == {} and codes(c) == {"root"}


def test_a_name_swapped_between_file_and_link_never_yields_the_canary(ws, canary):
    """A writer flips rtl/top.sv (and the rtl folder itself) between real entries and links to the canary
    while collections run: whatever each collection sees, the canary never comes back."""
    path, secret = canary
    stop = threading.Event()

    flips = [0]

    def swap():
        rtl, top = ws / "rtl", ws / "rtl" / "top.sv"
        while not stop.is_set():
            with contextlib.suppress(OSError):
                top.unlink(missing_ok=True)
                top.symlink_to(path)
                top.unlink()
                top.write_text("module top; endmodule\n")
                os.replace(rtl, ws / "rtl-real")
                rtl.symlink_to(path.parent)
                rtl.unlink()
                os.replace(ws / "rtl-real", rtl)
                flips[0] += 1

    t = threading.Thread(target=swap, daemon=True)
    t.start()
    try:
        results = [collect(ws) for _ in range(300)]
    finally:
        stop.set()
        t.join(GUARD)
    assert flips[0] > 0
    for c in results:
        assert_no_leak(c, secret)
        assert set(c.files) <= {"rtl/top.sv"}
        assert all(v == "module top; endmodule\n" or v == "" for v in c.files.values())


def test_removal_never_touches_a_link_target(ws, canary):
    path, secret = canary
    outside = path.parent
    outside.chmod(0o700)
    (ws / "rtl" / "dir-link").symlink_to(outside)
    (ws / "rtl" / "file-link").symlink_to(path)
    locked = ws / "verif" / "locked"
    (locked / "inner").mkdir(parents=True)
    (locked / "inner" / "x").write_text("x")
    (locked / "inner").chmod(0)
    locked.chmod(0)
    before = (stat.S_IMODE(path.stat().st_mode), stat.S_IMODE(outside.stat().st_mode))
    make_tree_removable(ws)
    shutil.rmtree(ws)
    assert not ws.exists()
    assert (stat.S_IMODE(path.stat().st_mode), stat.S_IMODE(outside.stat().st_mode)) == before
    assert secret in path.read_text()


def test_collect_answer_uses_the_task_context(ws):
    pytest.importorskip("tinker_cookbook")
    from rtlreward_tinker.agentic import collect_answer

    (ws / "rtl" / "top.sv").write_text("module top; endmodule\n")
    task = Task(id="t", context=CONTEXT)
    c = collect_answer(ws, task)
    assert c.files == {"rtl/top.sv": "module top; endmodule\n"}
