"""Hostile replies end to end: `$system`, a zero-delay `forever`, `include "/etc/passwd"`. The safety gate
stops them first; with that gate turned off the sandbox and the HDL stages still hold."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from rtlreward.cli import reward_table
from rtlreward.engine import Engine
from rtlreward.model import Status
from rtlreward.plugins import get_registry

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ARB = "fixed_priority_arbiter"
PLACEHOLDER = "/tmp/rtlreward_pwned_by_system_call"
NO_SAFETY = {
    "extends": "seed",
    "name": "seed-without-safety",
    "stages": ["format", "interface", "lint", "compile", "tests"],
    "gates": [],
}


def reply(name: str) -> str:
    return (EXAMPLES / ARB / "completions" / f"{name}.txt").read_text()


@pytest.fixture(scope="module")
def task():
    return get_registry().datasets()["folder"].load(str(EXAMPLES), id=ARB)[0]


def system_reply(target: Path) -> str:
    text = reply("system_call")
    assert PLACEHOLDER in text
    return text.replace(PLACEHOLDER, str(target))


def outputs(reward) -> str:
    buf = io.StringIO()
    Console(file=buf, width=250, color_system=None).print(reward_table(reward))
    return "\n".join([reward.to_json(), reward.feedback(), buf.getvalue()])


def assert_no_passwd_line(text: str) -> None:
    for line in Path("/etc/passwd").read_text().splitlines():
        if line.strip():
            assert line not in text, f"a line of /etc/passwd leaked: {line!r}"


def test_system_call_scores_zero_and_runs_nothing(task, tmp_path):
    target = tmp_path / "pwned"
    with Engine("seed", cache=False) as engine:
        r = engine.score(task, system_reply(target))
    assert r.total == 0.0 and not r.passed
    assert r.stages["safety"].status is Status.FAILED
    assert not target.exists()


def test_sandbox_stops_system_call_when_safety_is_off_icarus(task, tmp_path):
    target = tmp_path / "pwned"
    with Engine(NO_SAFETY, cache=False) as engine:
        r = engine.score(task, system_reply(target))
    # vvp refuses to load a design calling $system: no signed test record (an error), so no credit and no pass.
    tests = r.stages["tests"]
    assert tests.status in (Status.FAILED, Status.ERROR) and tests.score == 0.0 and not r.passed
    assert not target.exists()


def test_sandbox_stops_system_call_when_safety_is_off_verilator(task, tmp_path):
    # Verilator executes $system at simulation time: only the sandbox (writes confined to the workspace,
    # private /tmp) keeps the host file from appearing. This also proves the Verilator simulator path works.
    target = tmp_path / "pwned"
    profile = {**NO_SAFETY, "stage": {"tests": {"timeout": 240, "options": {"simulator": "verilator"}}}}
    with Engine(profile, cache=False) as engine:
        r = engine.score(task, system_reply(target))
    tests = r.stages["tests"]
    assert tests.status is Status.PASSED, tests.diagnostics
    assert tests.metrics["tests_passed"] == tests.metrics["tests_total"] == 7
    assert not target.exists()


def test_zero_delay_forever_ends_with_timeout(task):
    profile = {"extends": "seed", "name": "seed-short", "stage": {"tests": {"timeout": 5}}}
    with Engine(profile, cache=False) as engine:
        r = engine.score(task, reply("forever_loop"))
    tests = r.stages["tests"]
    assert tests.status is Status.TIMEOUT and tests.score == 0.0
    assert tests.duration < 5 * 3  # killed at the command's limit, well inside the stage deadline
    assert r.total == pytest.approx(0.4) and not r.passed  # format + syntax, no test credit


@pytest.mark.parametrize("profile", ["seed", NO_SAFETY], ids=["seed", "without-safety"])
def test_include_passwd_scores_zero_and_never_echoes_it(task, profile):
    with Engine(profile, cache=False) as engine:
        r = engine.score(task, reply("include_passwd"))
    assert r.total == 0.0 if profile == "seed" else r.total <= 0.1
    assert not r.passed
    assert_no_passwd_line(outputs(r))
