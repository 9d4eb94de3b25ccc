"""Answers write only where answers go: the engine keeps a candidate's files to the paths its task expects
(or, for a task that names none, to HDL sources), drops the rest with a diagnostic, and no stage ever sees a
dropped file, whether the files came from the extraction stage, from `Candidate(files=...)`, or with no
extraction stage at all."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import engine_helpers as h
import pytest

from rtlreward import Candidate, Harness, Stage, Status, Task, hookimpl
from rtlreward.answers import (
    ANSWER_SUFFIXES,
    DUPLICATE_PATH,
    MAX_REPORTED,
    NOT_TEXT,
    TASK_FILE,
    UNEXPECTED_PATH,
    UNSAFE_PATH,
    restrict_answer,
)
from rtlreward.engine import Engine
from rtlreward.plugins import get_registry
from rtlreward.stage import write_files

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GOOD = "module top; endmodule"
TASK = Task(
    id="ans",
    expected_files=("rtl/top.sv",),
    toplevel="top",
    context={"docs/spec.md": "spec", "rtl/pkg.sv": "package p; endpackage"},
    harness=Harness("none", files={"test_top.py": "import cocotb", "src/test_runner.py": "run"}),
)
HOSTILE = {
    "rtl/top.sv": GOOD,
    "src/conftest.py": "import os  # runs inside pytest",
    "rtl/../x.sv": "module x; endmodule",
    "/etc/cron.d/x": "* * * * * root sh",
    "test_top.py": "# a harness file name: would replace the tests",
    "rtl/pkg.sv": "// a context file the task does not expect the answer to replace",
    "sitecustomize.py": "import os",
    "rtl/extra.sv": "module extra; endmodule",
}


def codes(diags) -> dict[str, str]:
    return {d.file: d.code for d in diags}


def test_only_expected_paths_are_kept_and_each_drop_is_reported():
    a = restrict_answer(TASK, HOSTILE)
    assert a.files == {"rtl/top.sv": GOOD}
    assert codes(a.dropped) == {
        "src/conftest.py": UNEXPECTED_PATH,
        "rtl/../x.sv": UNSAFE_PATH,
        "/etc/cron.d/x": UNSAFE_PATH,
        "test_top.py": TASK_FILE,
        "rtl/pkg.sv": UNEXPECTED_PATH,
        "sitecustomize.py": UNEXPECTED_PATH,
        "rtl/extra.sv": UNEXPECTED_PATH,
    }
    assert all(d.severity == "warning" for d in a.dropped)
    assert "expects only rtl/top.sv" in next(d.message for d in a.dropped if d.file == "rtl/extra.sv")


def test_paths_are_normalised_duplicates_and_non_text_dropped():
    a = restrict_answer(TASK, {"./rtl//top.sv": GOOD, "rtl/top.sv": "second", "rtl/x.sv": 3})
    assert a.files == {"rtl/top.sv": GOOD}
    assert [d.code for d in a.dropped] == [DUPLICATE_PATH, NOT_TEXT]
    b = restrict_answer(TASK, {"rtl/top.sv": b"bytes"})
    assert b.files == {} and b.dropped[0].code == NOT_TEXT


def test_a_flood_of_paths_is_reported_in_bounded_space():
    flood = {"rtl/top.sv": GOOD, **{f"junk/{i}.py": "x" for i in range(5000)}}
    a = restrict_answer(TASK, flood)
    assert a.files == {"rtl/top.sv": GOOD} and a.dropped_count == 5000
    assert len(a.dropped) == MAX_REPORTED + 1 and a.dropped[-1].message.startswith("4980 more answer file(s)")


def test_an_expected_path_may_replace_a_context_file_but_never_a_harness_file():
    modify = Task(id="m", expected_files=("rtl/pkg.sv",), context={"rtl/pkg.sv": "old"})
    assert restrict_answer(modify, {"rtl/pkg.sv": "new"}).files == {"rtl/pkg.sv": "new"}
    clash = Task(id="c", expected_files=("src/test_runner.py",), harness=TASK.harness)
    a = restrict_answer(clash, {"src/test_runner.py": "import os"})
    assert a.files == {} and a.dropped[0].code == TASK_FILE


def test_a_task_without_expected_files_takes_only_hdl_sources():
    task = Task(id="open", context={"rtl/ctx.sv": "ctx"}, harness=Harness("none", files={"h.py": "x"}))
    files = {
        "top.sv": GOOD,
        "rtl/a.v": GOOD,
        "inc/defs.svh": "`define X 1",
        "conftest.py": "x",
        "src/conftest.py": "x",
        "x.pth": "import os",
        "Makefile": "all:",
        ".env": "A=1",
        ".hidden/a.sv": GOOD,
        "rtl/ctx.sv": "replaces a context file",
        "h.py/evil.sv": "inside a folder named like a harness file",
        "run.sh": "sh",
    }
    a = restrict_answer(task, files)
    assert a.files == {"top.sv": GOOD, "rtl/a.v": GOOD, "inc/defs.svh": "`define X 1"}
    assert codes(a.dropped)["rtl/ctx.sv"] == TASK_FILE
    assert codes(a.dropped)["h.py/evil.sv"] == TASK_FILE
    assert {codes(a.dropped)[p] for p in ("conftest.py", "x.pth", "Makefile", ".env", ".hidden/a.sv")} == {
        UNEXPECTED_PATH
    }
    assert ".py" not in ANSWER_SUFFIXES and ".pth" not in ANSWER_SUFFIXES


class Peek(Stage):
    """Writes what it is given into its workspace, as a harness stage does, and records it."""

    name = "peek"
    requires = ()
    seen: ClassVar[list[dict[str, Any]]] = []

    def run(self, ctx):
        root = ctx.stage_dir("peek")
        write_files(root, ctx.files)
        on_disk = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        type(self).seen.append(
            {"files": dict(ctx.files), "candidate_files": ctx.candidate.files, "on_disk": on_disk}
        )
        return self.result(Status.PASSED, 1.0)


class Leaky(Stage):
    """A third-party extractor that returns more files than the task expects."""

    name = "leaky"
    provides = ("files",)
    needs = ()

    def run(self, ctx):
        return self.result(
            Status.PASSED,
            1.0,
            artifacts={"files": {"rtl/top.sv": ctx.candidate.text, "src/conftest.py": "import os"}},
        )


class Plugin:
    @hookimpl
    def rtlreward_register_stages(self, register):
        register(Peek())
        register(Leaky())


def engine(stages: list[str], **kw: Any) -> Engine:
    prof = {"name": "peek", "stages": stages, "weights": {"peek": 1}, "verdict": "peek"}
    return Engine(prof, registry=h.registry({"peek": Plugin()}), **kw)


@pytest.fixture(autouse=True)
def _clear():
    Peek.seen.clear()


def assert_only_the_answer_reached_the_stage():
    (seen,) = Peek.seen
    assert seen["files"] == {"rtl/top.sv": GOOD} and seen["on_disk"] == ["rtl/top.sv"]
    assert seen["candidate_files"] in (None, {"rtl/top.sv": GOOD})


def test_candidate_files_through_the_extraction_stage(tmp_path):
    with engine(["format", "peek"], cache=tmp_path / "c.sqlite") as e:
        r = e.score(TASK, Candidate(files=HOSTILE))
        assert_only_the_answer_reached_the_stage()
        fmt = r.stages["format"]
        assert fmt.status is Status.PASSED  # the dropped files have no effect; the answer is judged as it is
        assert {d.file for d in fmt.diagnostics if d.code == UNEXPECTED_PATH} >= {"src/conftest.py"}
        assert "src/conftest.py" in fmt.feedback and "dropped" in fmt.feedback
        assert r.files == {"rtl/top.sv": GOOD} and r.metrics["answer/dropped"] == 7
        assert set(r.diagnostics) <= set(fmt.diagnostics) and len(r.diagnostics) == 7
        assert r.to_dict()["diagnostics"][0]["code"]
        # A cache hit gives the same report (the engine restricts after the cache, every time).
        again = e.score(TASK, Candidate(files=HOSTILE))
        assert again.stages["format"].cached and again.stages["format"].diagnostics == fmt.diagnostics
        assert again.files == r.files


def test_files_a_third_party_extractor_returns_are_restricted_too():
    with engine(["leaky", "peek"], cache=False) as e:
        r = e.score(TASK, Candidate(text=GOOD))
    assert_only_the_answer_reached_the_stage()
    assert codes(r.stages["leaky"].diagnostics) == {"src/conftest.py": UNEXPECTED_PATH}
    assert r.stages["leaky"].artifacts["files"] == {"rtl/top.sv": GOOD}  # later stages' ctx.results too


def test_without_an_extraction_stage_the_candidates_files_are_restricted():
    with engine(["peek"], cache=False) as e:
        r = e.score(TASK, Candidate(files=HOSTILE))
    assert_only_the_answer_reached_the_stage()
    assert r.files == {"rtl/top.sv": GOOD} and len(r.diagnostics) == 7
    assert "[answer] answer file 'src/conftest.py' dropped" in r.feedback()


def test_real_stages_never_see_an_extra_file_and_the_reward_is_the_designs_own():
    """The bundled arbiter with the real format, interface, lint, compile and cocotb stages: the reference plus
    a rogue conftest, a replacement for the harness's test module and an extra module scores exactly like the
    reference alone, and only the answer path reaches the reward's files."""
    task = get_registry().datasets()["folder"].load(str(EXAMPLES), id="fixed_priority_arbiter")[0]
    (path,) = task.expected_files
    rogue = {
        **task.reference,
        "conftest.py": "import pytest\n",
        "src/conftest.py": "import pytest\n",
        "test_fixed_priority_arbiter.py": "import cocotb\n",
        "rtl/helper.sv": "module helper; endmodule\n",
    }
    with Engine("shaped", cache=False) as e:
        alone, with_rogue = e.score_batch(
            [(task, Candidate(files=task.reference)), (task, Candidate(files=rogue))]
        )
    assert alone.passed and with_rogue.passed and with_rogue.total == pytest.approx(alone.total)
    assert with_rogue.files == {path: task.reference[path]}
    assert codes(with_rogue.stages["format"].diagnostics) == {
        "conftest.py": UNEXPECTED_PATH,
        "src/conftest.py": UNEXPECTED_PATH,
        "test_fixed_priority_arbiter.py": TASK_FILE,
        "rtl/helper.sv": UNEXPECTED_PATH,
    }
    assert with_rogue.metrics["answer/dropped"] == 4 and alone.metrics["answer/dropped"] == 0
