"""Profiles and combiners: the preset math, TOML files, `extends`, and errors that name the bad key."""

from __future__ import annotations

import pytest

from rtlreward import Status
from rtlreward.combine import normalized, strict, weighted
from rtlreward.model import StageResult
from rtlreward.profiles import PRESETS, ProfileError, available_profiles, load_profile

ALL = ("format", "safety", "interface", "lint", "compile", "tests")


def results(**overrides: tuple[str, float]) -> dict[str, StageResult]:
    """All stages passed with score 1, except the overrides {stage: (status, score)}."""
    out = {}
    for name in ALL:
        status, score = overrides.get(name, ("passed", 1.0))
        out[name] = StageResult(name=name, status=Status(status), score=score)
    return out


def test_presets_load_and_have_the_documented_maxima():
    assert set(PRESETS) == {"seed", "shaped", "strict", "normalized"}
    seed, shaped = load_profile("seed"), load_profile("shaped")
    assert seed.weights == {"format": 0.1, "syntax": 0.3, "tests": 1.0}
    assert shaped.weights == {"format": 0.1, "syntax": 0.3, "interface": 0.2, "tests": 1.0}
    assert seed.max_weighted == pytest.approx(1.4) and shaped.max_weighted == pytest.approx(1.6)
    assert {t.name for t in shaped.terms if t.partial} == {"interface", "tests"}
    assert not any(t.partial for t in seed.terms)
    assert dict((t.name, t.stages) for t in seed.terms)["syntax"] == ("lint", "compile")
    assert load_profile("normalized").weights == shaped.weights
    assert shaped.gates == ("safety",) and shaped.verdict == "tests"


@pytest.mark.parametrize(
    ("profile", "combiner", "overrides", "expected", "max_total", "passed"),
    [
        ("seed", weighted, {}, 1.4, 1.4, True),
        ("seed", weighted, {"tests": ("failed", 0.75)}, 0.4, 1.4, False),  # seed: tests all-or-nothing
        ("seed", weighted, {"lint": ("failed", 0.0)}, 1.1, 1.4, True),  # syntax needs lint AND compile
        ("seed", weighted, {"interface": ("failed", 0.0)}, 1.4, 1.4, True),  # seed ignores interface
        ("shaped", weighted, {}, 1.6, 1.6, True),
        ("shaped", weighted, {"tests": ("failed", 0.75)}, 0.1 + 0.3 + 0.2 + 0.75, 1.6, False),
        ("shaped", weighted, {"interface": ("failed", 0.5)}, 1.5, 1.6, True),
        ("shaped", weighted, {"tests": ("timeout", 0.5)}, 0.6, 1.6, False),  # no partial credit on timeout
        ("shaped", weighted, {"tests": ("error", 0.9)}, 0.6, 1.6, False),
        ("shaped", weighted, {"safety": ("failed", 0.0)}, 0.0, 1.6, False),  # the gate zeroes the total
        ("strict", strict, {}, 1.0, 1.0, True),
        ("strict", strict, {"tests": ("failed", 0.99)}, 0.0, 1.0, False),
        ("strict", strict, {"safety": ("failed", 0.0)}, 0.0, 1.0, False),
        ("normalized", normalized, {}, 1.0, 1.0, True),
        ("normalized", normalized, {"tests": ("failed", 0.5)}, 1.1 / 1.6, 1.0, False),
    ],
)
def test_combiner_math(profile, combiner, overrides, expected, max_total, passed):
    p = load_profile(profile)
    res = results(**overrides)
    if profile == "strict":
        res = {k: v for k, v in res.items() if k in p.stages}
    total, mx = combiner(res, p, None)
    assert total == pytest.approx(expected)
    assert mx == pytest.approx(max_total)
    assert p.verdict_passed(res) is passed


def test_passed_is_the_engines_not_the_combiners():
    """A combiner returns (total, max_total); the engine computes the verdict once, and a combiner of the older
    (total, passed, max_total) contract cannot make a failing candidate pass."""
    import engine_helpers as h

    from rtlreward import hookimpl
    from rtlreward.engine import Engine

    def liar(results, profile, task):
        return 1.0, True, 1.0

    class Plugin:
        @hookimpl
        def rtlreward_register_combiners(self, register):
            register("liar", liar)

    prof = {"extends": "shaped", "combiner": "liar"}
    with Engine(prof, registry=h.registry({"liar": Plugin()}), cache=False) as e:
        r = e.score(h.task(), h.cand("module top; endmodule TESTS_HALF"))
    assert r.total == 1.0 and r.max_total == 1.0 and r.passed is False
    for fn in (weighted, normalized, strict):
        assert len(fn(results(), load_profile("shaped"), None)) == 2


def test_user_toml_with_options_timeouts_and_extends(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(
        'extends = "seed"\n'
        'stages = ["format", "safety", "lint", "compile", "tests", "mystage"]\n'
        'partial = ["mystage"]\n'
        "[weights]\nmystage = 0.5\n"
        '[stage.tests]\ntimeout = 30\ndeadline = 100\nmemory_mb = 2048\noptions = { simulator = "verilator" }\n'
    )
    p = load_profile(str(f))
    assert p.name == "mine" and p.combiner == "weighted"
    assert p.weights == {"format": 0.1, "syntax": 0.3, "tests": 1.0, "mystage": 0.5}
    assert [t.name for t in p.terms if t.partial] == ["mystage"]
    s = p.settings("tests")
    assert (s.timeout, s.deadline, s.memory_mb, s.options) == (30, 100, 2048, {"simulator": "verilator"})
    assert p.options("lint") == {}
    assert load_profile(p) is p


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('colour = "red"', "unknown key 'colour'"),
        ('extends = "shaped"\n[stage.tests]\nsimulator = "verilator"', "unknown key stage.tests.simulator"),
        ('extends = "shaped"\n[weights]\nformat = "lots"', "weights.format must be a number"),
        ('extends = "shaped"\n[weights]\nnosuch = 1', "weights.nosuch refers to stage 'nosuch'"),
        ('extends = "shaped"\n[terms]\nsyntax = { any = ["lint"] }', "unknown key terms.syntax.any"),
        (
            'extends = "shaped"\n[terms]\nsyntax = { all = ["lint", "verify"] }',
            "terms.syntax refers to stage 'verify'",
        ),
        ('extends = "shaped"\ngates = ["nope"]', "gates lists 'nope'"),
        ('extends = "shaped"\npartial = ["safety"]', "partial lists 'safety'"),
        ('extends = "shaped"\n[stage.tests]\ntimeout = -1', "stage.tests.timeout must be a positive"),
        ('extends = "nosuchpreset"', "unknown profile 'nosuchpreset'"),
        ("stages = [", "not valid TOML"),
        ('extends = "shaped"\nverdict = "nope"', "verdict 'nope' is not in 'stages'"),
    ],
)
def test_bad_profile_names_the_key(tmp_path, content, message):
    f = tmp_path / "bad.toml"
    f.write_text(content)
    with pytest.raises(ProfileError, match=message.replace("[", r"\[").replace(".", r"\.")):
        load_profile(str(f))


def test_unknown_name_and_missing_file():
    with pytest.raises(ProfileError, match=r"unknown profile 'sheped'.*seed, shaped"):
        load_profile("sheped")
    with pytest.raises(ProfileError, match="does not exist"):
        load_profile("/nonexistent/p.toml")


def test_extends_cycle_is_reported(tmp_path):
    (tmp_path / "a.toml").write_text('extends = "b.toml"')
    (tmp_path / "b.toml").write_text('extends = "a.toml"')
    with pytest.raises(ProfileError, match="extends itself"):
        load_profile(str(tmp_path / "a.toml"))


def test_profile_round_trips_through_to_dict():
    for name in PRESETS:
        p = load_profile(name)
        back = load_profile(p.to_dict())
        assert back.terms == p.terms and back.gates == p.gates and back.combiner == p.combiner


def test_available_profiles_lists_presets():
    assert set(available_profiles()) >= set(PRESETS)


def test_stage_requires_override_round_trips():
    p = load_profile({"extends": "shaped", "stage": {"tests": {"requires": ["lint"]}}})
    assert p.settings("tests").requires == ("lint",)
    assert load_profile(p.to_dict()).settings("tests").requires == ("lint",)
    with pytest.raises(ProfileError, match="'requires' must be a list"):
        load_profile({"extends": "shaped", "stage": {"tests": {"requires": "lint"}}})
