"""The cache key covers everything a stage reads: every Task field, the task's namespace (inline tasks from a
request never share an entry or an in-flight evaluation with dataset tasks) and the stages' tool versions."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs
import engine_helpers as h
import pytest

from rtlreward import Stage, Status, hookimpl
from rtlreward.cache import stage_key
from rtlreward.engine import Engine
from rtlreward.model import ORIGIN_DATASET, ORIGIN_INLINE, Harness, Interface, Port, Task
from rtlreward_server.server import RewardService

BASE = Task(
    id="t1",
    prompt="p",
    expected_files=("rtl/top.sv",),
    toplevel="top",
    interface=Interface("top", (Port("a", "input", 1),), source="task"),
    context={"docs/spec.md": "spec"},
    compile_sources=("rtl/top.sv",),
    harness=Harness("none", files={"h.py": "x = 1"}, options={"o": 1}),
    reference={"rtl/top.sv": "module top; endmodule"},
    dataset="d",
    category="c",
    difficulty="easy",
    system_prompt="s",
    metadata={"k": "v"},
    origin=ORIGIN_DATASET,
)

# One edit per Task field. A field added to Task without an entry here fails the test below: decide what
# an edit of it looks like (the fingerprint covers it automatically; this proves it).
EDITS: dict[str, Any] = {
    "id": "t1-edited",
    "prompt": "p, reworded",
    "expected_files": ("rtl/top.sv", "rtl/more.sv"),
    "toplevel": "top2",
    "interface": Interface("top", (Port("a", "input", 2),), source="task"),  # a nested value
    "context": {"docs/spec.md": "spec v2"},
    "compile_sources": (),
    "harness": Harness("none", files={"h.py": "x = 2"}, options={"o": 1}),  # a nested value
    "reference": {"rtl/top.sv": "module top; endmodule // v2"},
    "dataset": "d2",
    "category": "c2",
    "difficulty": "hard",
    "system_prompt": "s2",
    "metadata": {"k": "v2"},
    "origin": ORIGIN_INLINE,
}


def test_every_task_field_is_in_the_key(tmp_path):
    fields = [f.name for f in attrs.fields(Task)]
    assert set(fields) == set(EDITS), f"add an edit for the new Task field(s) {set(fields) - set(EDITS)}"
    reply = h.cand("module top; endmodule")
    with Engine("shaped", registry=h.registry(), cache=tmp_path / "c.sqlite") as e:
        first = e.score(BASE, reply)
        again = e.score(BASE, reply)
        assert not any(r.cached for r in first.stages.values())
        assert all(r.cached for r in again.stages.values())  # the cache works for the unedited task
        for name in fields:
            edited = attrs.evolve(BASE, **{name: EDITS[name]})
            assert edited.fingerprint() != BASE.fingerprint(), name
            r = e.score(edited, reply)
            hits = [s for s, res in r.stages.items() if res.cached]
            assert hits == [], f"editing Task.{name} still hit the cache for {hits}"


def test_tool_versions_are_in_the_key(tmp_path):
    class Tool(Stage):
        name = "tool"
        requires = ("format",)
        installed: ClassVar[str] = "1.0"
        runs: ClassVar[int] = 0

        def tool_versions(self):
            return {"sim": type(self).installed}

        def run(self, ctx):
            type(self).runs += 1
            return self.result(Status.PASSED, 1.0)

    class Plugin:
        @hookimpl
        def rtlreward_register_stages(self, register):
            register(Tool())

    prof = {"name": "tool", "stages": ["format", "tool"], "weights": {"tool": 1}, "verdict": "tool"}
    for version, expected_runs in (("1.0", 1), ("1.0", 1), ("2.0", 2)):
        Tool.installed = version
        with Engine(prof, registry=h.registry({"tool": Plugin()}), cache=tmp_path / "c.sqlite") as e:
            e.score(h.task(), h.cand("module top; endmodule"))
        assert Tool.runs == expected_runs, version


def test_stage_key_separates_namespaces():
    common = dict(
        task_fingerprint="f", inputs="i", stage="s", version="1", tool_versions={}, options={}, executor={}
    )
    assert stage_key(namespace=ORIGIN_INLINE, **common) != stage_key(namespace=ORIGIN_DATASET, **common)


class RefCheck(Stage):
    """Passes when the answer is the task's reference: a stage that reads `Task.reference`, which the old key
    left out."""

    name = "refcheck"
    requires = ("format",)
    runs: ClassVar[int] = 0

    def run(self, ctx):
        type(self).runs += 1
        same = ctx.files == (ctx.task.reference or {})
        return self.result(Status.PASSED if same else Status.FAILED, float(same))


class RefPlugin:
    @hookimpl
    def rtlreward_register_stages(self, register):
        register(RefCheck())


REF_PROFILE = {
    "name": "ref",
    "stages": ["format", "refcheck"],
    "weights": {"refcheck": 1},
    "verdict": "refcheck",
}
GOOD = "module top; endmodule"
OTHER = "module top; assign x = 1; endmodule"
REAL = Task(id="real", expected_files=("rtl/top.sv",), toplevel="top", reference={"rtl/top.sv": GOOD})


def service(cache: Any) -> RewardService:
    # No calibration (rtlreward.calibration): these tests count the stage's runs for one scoring each.
    engine = Engine(REF_PROFILE, registry=h.registry({"ref": RefPlugin()}), cache=cache, calibrate=False)
    return RewardService(engine, [REAL], allow_inline_tasks=True)


def done(svc: RewardService) -> None:
    close = getattr(svc, "close", None)  # the service's own worker pool, where it has one
    if callable(close):
        close()
    svc.engine.close()


def swapped(reference: str, **extra: Any) -> dict[str, Any]:
    """The real task as a client would send it inline, with its reference replaced."""
    return {**REAL.to_dict(), "reference": {"rtl/top.sv": reference}, **extra}


def test_inline_task_with_a_swapped_reference_does_not_get_the_real_tasks_result(tmp_path):
    svc = service(tmp_path / "c.sqlite")
    real = svc.score({"task_id": "real", "completion": GOOD})
    assert real["passed"] and real["stages"]["refcheck"]["status"] == "passed"
    # Same id, same answer; the client swapped the reference so the answer no longer matches it. Claiming the
    # dataset's origin does not help: a request's task is inline, whatever it says.
    forged = svc.score({"task": swapped(OTHER, origin=ORIGIN_DATASET), "completion": GOOD})
    assert not forged["passed"] and forged["stages"]["refcheck"]["status"] == "failed"
    assert forged["stages"]["refcheck"]["cached"] is False
    # The real task's entry is intact.
    assert svc.score({"task_id": "real", "completion": GOOD})["stages"]["refcheck"]["cached"] is True
    done(svc)


def test_inline_task_cannot_poison_the_real_tasks_entry(tmp_path):
    svc = service(tmp_path / "c.sqlite")
    # The forger first gets a pass for its own answer by swapping the reference to that answer...
    forged = svc.score({"task": swapped(OTHER), "completion": OTHER})
    assert forged["passed"]
    # ...and the real task, asked about the same answer, still judges it against its own reference.
    real = svc.score({"task_id": "real", "completion": OTHER})
    assert not real["passed"] and real["stages"]["refcheck"]["cached"] is False
    done(svc)


def test_an_identical_inline_task_still_has_its_own_namespace(tmp_path):
    svc = service(tmp_path / "c.sqlite")
    RefCheck.runs = 0
    svc.score({"task_id": "real", "completion": GOOD})
    same = svc.score({"task": REAL.to_dict(), "completion": GOOD})
    assert same["passed"] and RefCheck.runs == 2 and same["stages"]["refcheck"]["cached"] is False
    again = svc.score({"task": REAL.to_dict(), "completion": GOOD})
    assert (
        again["stages"]["refcheck"]["cached"] is True and RefCheck.runs == 2
    )  # inline tasks share among them
    done(svc)


def test_batch_dedupe_does_not_merge_an_inline_task_with_the_real_one():
    svc = service(False)
    RefCheck.runs = 0
    out = svc.score_batch(
        {
            "items": [
                {"task_id": "real", "completion": GOOD},
                {"task": swapped(OTHER), "completion": GOOD},
                {"task": REAL.to_dict(), "completion": GOOD},
                {"task_id": "real", "completion": GOOD, "sample": 1},
            ]
        }
    )["rewards"]
    assert [r["passed"] for r in out] == [True, False, True, True]
    assert RefCheck.runs == 3  # the two real-task items are one evaluation; the inline ones are their own
    done(svc)


def test_in_flight_dedupe_is_keyed_by_the_whole_task():
    edited = attrs.evolve(REAL, reference={"rtl/top.sv": OTHER})
    assert edited.fingerprint() != REAL.fingerprint()
    with Engine(REF_PROFILE, registry=h.registry({"ref": RefPlugin()}), cache=False) as e:
        a, b = e.score_batch([(REAL, GOOD), (edited, GOOD)])
    assert a.passed and not b.passed


@pytest.mark.parametrize("field", ["prompt", "reference", "system_prompt", "metadata", "category"])
def test_fields_the_old_fingerprint_left_out_change_it(field):
    assert attrs.evolve(BASE, **{field: EDITS[field]}).fingerprint() != BASE.fingerprint()


def test_task_dict_round_trip_keeps_the_origin_and_requests_are_inline():
    assert Task.from_dict(BASE.to_dict()) == BASE
    d = BASE.to_dict()
    del d["origin"]
    assert Task.from_dict(d).origin == ORIGIN_INLINE  # not written by to_dict: not from a dataset
    assert Task.from_dict(BASE.to_dict(), origin=ORIGIN_INLINE).origin == ORIGIN_INLINE
