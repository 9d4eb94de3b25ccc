"""CVDP harness reading: compose services, env files, cocotb generation, workspace order, the service environment
and the verdict from a service's signed record (rtlreward.verdict)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cvdp_adapter.harness import (
    HarnessError,
    ServiceOutcome,
    analyse,
    materialise,
    outcome_from_run,
    parse_compose,
    parse_env_file,
    rewrite_paths,
    service_env,
    verdict,
)
from rtlreward.model import Status
from rtlreward.verdict import Received

COMPOSE = """
services:

  direct:
    #image: __OSS_SIM_IMAGE__
    image: __OSS_SIM_IMAGE__

    volumes:
      - ./src/:/src/:ro # Infrastructure location
      - ./rundir:/code/rundir
    env_file    : ./src/.env
    command     : pytest -s --log-cli-level=INFO -o cache_dir=/rundir/harness/.cache /src/test_runner.py -v
  second:
    build: .
    env_file: [./src/.env_b]
    command: /bin/sh -c "pytest -s /src/test_runner.py -s"
"""


def test_compose_services_in_order_with_benchmark_mounts():
    s1, s2 = parse_compose(COMPOSE)
    assert s1.name == "direct" and s2.name == "second"
    assert s1.command[:2] == ("pytest", "-s") and s1.command[-2:] == ("/src/test_runner.py", "-v")
    assert s1.env_files == ("src/.env",) and s2.env_files == ("src/.env_b",)
    # the /code volume is dropped (the benchmark mounts its own folders there); ./src -> /src read-only
    assert [(v.source, v.target, v.read_only) for v in s1.volumes] == [("src", "/src", True)]
    assert s1.working_dir == "/code/rundir" and s1.image == "__OSS_SIM_IMAGE__" and not s1.build
    assert s2.build and s2.command == ("/bin/sh", "-c", "pytest -s /src/test_runner.py -s")


@pytest.mark.parametrize("text", ["", "services: {}", "services:\n  a:\n    image: x\n", ": ["])
def test_unusable_compose_is_a_clear_error(text):
    with pytest.raises(HarnessError):
        parse_compose(text)


def test_volume_leaving_the_problem_folder_is_refused():
    with pytest.raises(HarnessError, match="leaves"):
        parse_compose("services:\n  a:\n    command: x\n    volumes: ['../../etc:/src']\n")


def test_env_file_with_cvdp_spacing_quotes_and_comments():
    env = parse_env_file(
        "SIM             = icarus\n# comment\nTOPLEVEL_LANG=verilog # trailing\nWAVE = 'True'\n"
        'VERILOG_SOURCES = "/code/rtl/a.sv /code/rtl/b.sv"\nexport PYTHONPATH=/src\nbroken line\n'
    )
    assert env == {
        "SIM": "icarus",
        "TOPLEVEL_LANG": "verilog",
        "WAVE": "True",
        "VERILOG_SOURCES": "/code/rtl/a.sv /code/rtl/b.sv",
        "PYTHONPATH": "/src",
    }


def test_cocotb_generation_and_dockerfile_requirements():
    base = {"docker-compose.yml": COMPOSE}
    new = analyse({**base, "src/test_runner.py": "from cocotb_tools.runner import get_runner\n"})
    old = analyse(
        {
            **base,
            "src/test_runner.py": "from cocotb.runner import get_runner\n",
            "Dockerfile": "FROM __OSS_SIM_IMAGE__\nRUN pip3 install cocotb_bus\n",
        }
    )
    both = analyse(
        {
            **base,
            "src/test_runner.py": "try:\n from cocotb_tools.runner import get_runner\n"
            "except ImportError:\n from cocotb.runner import get_runner\n",
        }
    )
    assert (new.cocotb_api, new.env_name) == ("cocotb2", None)
    assert (old.cocotb_api, old.env_name, old.pip_requirements) == ("cocotb19", "cocotb19", ("cocotb_bus",))
    assert both.cocotb_api == "cocotb2"
    bus = analyse({**base, "Dockerfile": "RUN pip install cocotb-bus\n"})
    assert bus.env_name == "cocotb2-bus"
    with pytest.raises(HarnessError):
        analyse({"src/.env": "SIM=icarus"})


def test_workspace_order_harness_wins_over_answer(tmp_path: Path):
    root = materialise(
        tmp_path / "p",
        context={"docs/spec.md": "spec", "rtl/a.sv": "old"},
        answer={"rtl/a.sv": "new", "src/test_runner.py": "print('hacked')", "src/conftest.py": "x = 1"},
        harness={"src/test_runner.py": "real", "docker-compose.yml": COMPOSE},
    )
    assert sorted(p.name for p in root.iterdir()) == [
        "docker-compose.yml",
        "docs",
        "rtl",
        "rundir",
        "src",
        "verif",
    ]
    assert (root / "rtl/a.sv").read_text() == "new"
    assert (root / "src/test_runner.py").read_text() == "real"
    assert not (root / "src/conftest.py").exists()  # the harness's folder takes no answer file at all
    with pytest.raises(ValueError):
        materialise(tmp_path / "q", context={}, answer={"../escape.sv": "x"}, harness={})


def test_service_env_seeds_probe_and_pytest_options(tmp_path: Path):
    root = materialise(
        tmp_path / "p",
        context={},
        answer={},
        harness={"docker-compose.yml": COMPOSE, "src/.env": "PYTHONPATH = /src\nSIM=icarus\n"},
    )
    svc = parse_compose(COMPOSE)[0]
    env = service_env(root, svc, seed=42, seed_dir="/seed")
    assert env["SIM"] == "icarus" and env["HOME"] == "/code/rundir"
    assert env["RANDOM_SEED"] == env["COCOTB_RANDOM_SEED"] == env["RTLREWARD_SEED"] == "42"
    assert env["PYTHONPATH"] == "/seed:/src"
    assert env["PYTEST_ADDOPTS"] == "--junitxml=/code/rundir/.rtlreward/junit-direct.xml"
    assert env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"  # a bare pytest, as in the benchmark's image
    probed = service_env(root, svc, seed=42, seed_dir="/seed", probe_dirs=["/p1", "/p2"], probe={"K": "v"})
    assert probed["PYTHONPATH"] == "/seed:/p1:/p2:/src"  # the probe before the harness's folder
    opts = probed["PYTEST_ADDOPTS"].split()
    assert (
        opts[:2] == ["-p", "rtlreward_pytest_probe"] and "--noconftest" in opts and "no:cacheprovider" in opts
    )
    assert opts[opts.index("-c") + 1] == "/dev/null"  # no ini file an answer or a design could plant
    assert probed["K"] == "v" and probed["PYTHONNOUSERSITE"] == "1" and probed["PYTHONSAFEPATH"] == "1"


def test_path_rewrite_only_touches_absolute_container_paths(tmp_path: Path):
    text = "VERILOG_SOURCES=/code/rtl/a.sv /code/rtl/b.sv\nsys.path.append('/src')\nx = '/opt/src/y' + 'a/code/b'"
    out = rewrite_paths(text, tmp_path)
    assert f"{tmp_path}/rtl/a.sv {tmp_path}/rtl/b.sv" in out and f"'{tmp_path}/src'" in out
    assert "'/opt/src/y'" in out and "'a/code/b'" in out
    assert (
        rewrite_paths("-o cache_dir=/rundir/harness/.cache", tmp_path)
        == f"-o cache_dir={tmp_path}/rundir/harness/.cache"
    )


def _session(items, sims=(), *, exitstatus=0, collected=None, **extra) -> Received:
    """An authentic session record, as the verified payload of a service's pytest probe."""
    items = [{"nodeid": n, "outcome": o, "message": m} for n, o, m in items]
    sims = list(sims)
    payload = {
        "kind": "pytest",
        "exitstatus": exitstatus,
        "collected": len(items) if collected is None else collected,
        "items": items,
        "errors": [],
        "sims": sims,
        "sims_total": len(sims),
        **extra,
    }
    return Received(payload)


def _sim(item, tests, module="test_adder") -> dict:
    record = {
        "kind": "cocotb",
        "modules": module,
        "filter": "",
        "testcase": "",
        "tests": [{"name": n, "module": module, "outcome": o, "message": m} for n, o, m in tests],
    }
    return {"item": item, "started": True, "problem": "", "record": record}


HARNESS = {
    "src/test_adder.py": "import cocotb\n\n@cocotb.test()\nasync def add(dut):\n    pass\n\n"
    "@cocotb.test()\nasync def sub(dut):\n    pass\n"
}


def _outcome(rc, received, **kw):
    svc = parse_compose(COMPOSE)[0]
    return outcome_from_run(
        svc,
        rc,
        timed_out=kw.pop("timed_out", False),
        output="",
        duration=0.1,
        received=received,
        harness=HARNESS,
    )


def test_counts_and_verdict_from_the_signed_record():
    rec = _session(
        [
            ("t::a[1]", "passed", ""),
            ("t::a[2]", "failed", "AssertionError: got 3 expected 4"),
            ("t::s", "skipped", ""),
        ]
    )
    res = verdict([_outcome(1, rec)])
    assert res.status is Status.FAILED and res.score == pytest.approx(1 / 2)
    assert res.metrics["tests_passed"] == 1 and res.metrics["tests_total"] == 2
    assert "got 3 expected 4" in res.feedback and any("a[2]" in d.message for d in res.diagnostics)
    good = _session(
        [("t::a[1]", "passed", "")],
        [_sim("t::a[1]", [("add", "passed", ""), ("sub", "passed", "")])],
    )
    ok = verdict([_outcome(0, good)])
    assert ok.passed and ok.score == 1.0


def test_exit_zero_without_an_authentic_record_is_an_error():
    for received in (
        None,
        Received(None, "no verdict record"),
        Received(None, "the verdict record is not authentic"),
    ):
        res = verdict([_outcome(0, received)])
        assert res.status is Status.ERROR and res.score == 0.0 and not res.passed
    # a record that is not a pytest session, or an empty one, is no pass either
    assert verdict([_outcome(0, Received({"kind": "cocotb"}))]).status is Status.ERROR
    empty = verdict([_outcome(0, _session([]))])
    assert not empty.passed and empty.score == 0.0


def test_a_simulation_the_design_failed_fails_its_test_whatever_pytest_said():
    """The design rewrote cocotb's results XML, so pytest passed the test; the simulation's signed record did not."""
    rec = _session(
        [("t::a[1]", "passed", ""), ("t::a[2]", "passed", "")],
        [
            _sim("t::a[1]", [("add", "passed", ""), ("sub", "passed", "")]),
            _sim("t::a[2]", [("add", "failed", "1+2 gave 0"), ("sub", "passed", "")]),
        ],
    )
    res = verdict([_outcome(0, rec)])
    assert res.status is Status.FAILED and res.score == pytest.approx(1 / 2)
    assert any(d.code == "cocotb-failed" and "1+2 gave 0" in d.message for d in res.diagnostics)


def test_incomplete_or_foreign_simulation_records_are_errors():
    missing = _session([("t::a", "passed", "")], [_sim("t::a", [("add", "passed", "")])])
    extra = _session(
        [("t::a", "passed", "")],
        [_sim("t::a", [("add", "passed", ""), ("sub", "passed", ""), ("fake", "passed", "")])],
    )
    twice = _session(
        [("t::a", "passed", "")],
        [_sim("t::a", [("add", "passed", ""), ("sub", "passed", ""), ("add", "passed", "")])],
    )
    foreign = _session([("t::a", "passed", "")], [_sim("t::a", [("x", "passed", "")], module="evil")])
    lost = _session(
        [("t::a", "passed", "")], [{"item": "t::a", "started": True, "problem": "no record", "record": None}]
    )
    for rec in (missing, extra, twice, foreign, lost):
        res = verdict([_outcome(0, rec)])
        assert res.status is Status.ERROR and res.score == 0.0, res.feedback
    never = _session(
        [("t::a", "passed", "")], [{"item": "t::a", "started": False, "problem": "", "record": None}]
    )
    assert not verdict([_outcome(0, never)]).passed


def test_exit_code_must_be_zero_too_and_services_add_up():
    rec = _session([("t::a", "passed", ""), ("t::b", "passed", "")])
    bad = verdict([_outcome(2, rec)])
    assert bad.status is Status.FAILED and bad.score == 0.5  # never full credit for a failed service
    timeout = verdict([_outcome(-9, None, timed_out=True)])
    assert timeout.status is Status.TIMEOUT and not timeout.passed
    good = verdict(
        [
            ServiceOutcome("direct", 0, tests_passed=1, tests_total=1, record_passed=True),
            ServiceOutcome("other", 0, tests_passed=2, tests_total=2, record_passed=True),
        ]
    )
    assert good.passed and good.score == 1.0 and good.metrics["tests_total"] == 3
    unverified = verdict([ServiceOutcome("direct", 0, tests_passed=1, tests_total=1)])
    assert not unverified.passed  # an outcome without a verified record never passes
    one_bad = verdict(
        [
            ServiceOutcome("direct", 0, tests_passed=1, tests_total=1, record_passed=True),
            ServiceOutcome("other", 1, tests_passed=0, tests_total=1),
        ]
    )
    assert one_bad.status is Status.FAILED and one_bad.score == 0.5
