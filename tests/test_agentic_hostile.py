"""Hostile agents in whole agentic episodes, in both sandboxes an agent runs in (bubblewrap through the local
executor, and a Docker container): the agent's commands plant links to a canary outside the workspace, a link
to `/`, hard links, a FIFO, /dev/zero, a 1 GiB sparse file, 100k files, and a background process that keeps
swapping names. Both sandboxes bind a host folder at /code, so every one of these reaches the host-side file
collection; each case asserts that

- the canary's content is in no candidate file, no reward (stages, diagnostics, feedback) and no observation;
- the collection finished (the episode returned) and reported what it left out;
- the reward is no more than an empty answer's;
- the canary and its folder are unchanged.

The episodes run through the real cookbook rollout and the real engine (CVDP harness) on the official CVDP
agentic example, with a scripted policy.
"""

from __future__ import annotations

import asyncio
import json
import stat
import uuid
from pathlib import Path

import pytest

pytest.importorskip("tinker_cookbook")
pytestmark = pytest.mark.tinker

import tinker_helpers as H  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
AGENTIC = (
    ROOT.parent
    / "shared"
    / "data"
    / "cvdp"
    / "cvdp_v1.1.0_example_agentic_code_generation_no_commercial_with_solutions.jsonl"
)
AGENTIC_ID = "cvdp_agentic_fixed_arbiter_0001"
PROFILE = "seed"
KINDS = ["local", pytest.param("docker", marks=pytest.mark.docker)]


@pytest.fixture(scope="module")
def offline_tokenizers(request):
    cache = H.tokenizer_cache_dir(request)
    H.register_offline_tokenizers(cache)
    return cache


@pytest.fixture(scope="module")
def arbiter():
    if not AGENTIC.exists():
        pytest.skip(f"{AGENTIC} is not there (../shared beside the project)")
    from rtlreward.integration import load_tasks

    return next(t for t in load_tasks(str(AGENTIC)) if t.id == AGENTIC_ID)


@pytest.fixture(scope="module")
def canary(tmp_path_factory):
    """A 0600 secret in a folder outside every workspace (the host's tmp folder, as a workspace's parent is)."""
    folder = tmp_path_factory.mktemp("outside")
    secret = f"CANARY-{uuid.uuid4().hex}"
    path = folder / "secret.sv"
    path.write_text(f"module fixed_priority_arbiter; // {secret}\nendmodule\n")
    path.chmod(0o600)
    return path, secret


_usable: dict[str, str | None] = {}


def need_sandbox(kind: str, task) -> None:
    """Skip (with the reason) when this machine cannot run that sandbox; checked once per kind."""
    if kind not in _usable:
        reason = None
        if kind == "local":
            import shutil

            from rtlreward.sandbox.local import _bwrap_works

            if not shutil.which("bwrap") or not _bwrap_works(shutil.which("bwrap")):
                reason = "bubblewrap is not usable here"
        else:
            from rtlreward_tinker.agentic import (
                DockerSandbox,
                SandboxUnavailable,
                default_image,
                docker_image_present,
            )

            if not docker_image_present(default_image()):
                reason = (
                    f"Docker or the image {default_image()} is not available (rtlreward sandbox build-image)"
                )
            else:
                try:
                    DockerSandbox(task, default_image()).close()
                except SandboxUnavailable as exc:
                    reason = str(exc)[:200]
        _usable[kind] = reason
    if _usable[kind]:
        pytest.skip(_usable[kind])


def _call(cmd: str) -> str:
    return (
        "<tool_call>\n"
        + json.dumps({"name": "execute_bash", "arguments": {"command": cmd}})
        + "\n</tool_call>"
    )


class Outcome:
    def __init__(self, group, rewards, candidates, text):
        self.group = group
        self.rewards = rewards  # rtlreward Reward objects the group was scored with
        self.candidates = candidates
        self.text = text  # the decoded last observation: everything the agent saw

    @property
    def total(self) -> float:
        (r,) = self.group.get_total_rewards()
        return r

    @property
    def metrics(self) -> dict:
        return self.group.metrics_G[0]

    @property
    def logs(self) -> dict:
        return self.group.trajectories_G[0].transitions[-1].logs


def episode(task, commands: list[str], kind: str, monkeypatch) -> Outcome:
    """One scripted episode: each command in turn, then a final answer with no tool call."""
    from tinker_cookbook.rl.rollouts import do_group_rollout

    import rtlreward_tinker.agentic as agentic
    from rtlreward_tinker import base
    from rtlreward_tinker.base import get_renderer

    seen: dict = {}

    async def spy(task_, candidates, profile, executor):
        rewards = await base.score_rewards(task_, candidates, profile, executor)
        assert rewards is not None, "the evaluation broke"
        seen["candidates"], seen["rewards"] = list(candidates), rewards
        return [(float(r.total), base.reward_metrics(r)) for r in rewards]

    monkeypatch.setattr(agentic, "score_group", spy)
    renderer = get_renderer("qwen3", H.QWEN3_MODEL)
    tok = renderer.tokenizer
    replies = [_call(c) for c in commands] + ["Done."]

    def pick(prompt) -> str:
        n = tok.decode(prompt.to_ints()).count("<tool_response>")
        return replies[min(n, len(replies) - 1)]

    builder = agentic.AgenticGroupBuilder(
        task=task,
        renderer_name="qwen3",
        model_name=H.QWEN3_MODEL,
        group_size=1,
        profile=PROFILE,
        executor=kind,
        sandbox=kind,
        command_timeout=60,
    )
    script = H.Script(pick, tok, renderer.get_stop_sequences()[0])
    group = asyncio.run(do_group_rollout(builder, H.ScriptedTokenCompleter(script)))
    assert builder.__dict__.get("_live_envs") == []  # the sandbox was released
    text = tok.decode(group.trajectories_G[0].transitions[-1].ob.to_ints())
    return Outcome(group, seen["rewards"], seen["candidates"], text)


_empty: dict[str, float] = {}


def empty_total(task, kind: str, monkeypatch) -> float:
    """The reward of an agent that hands in nothing."""
    if kind not in _empty:
        out = episode(task, [], kind, monkeypatch)
        assert out.candidates[0].files == {}
        _empty[kind] = out.total
    return _empty[kind]


def _state(path: Path) -> tuple:
    return path.read_bytes(), stat.S_IMODE(path.stat().st_mode), sorted(p.name for p in path.parent.iterdir())


ANSWER = "rtl/fixed_priority_arbiter.sv"


def _cases(canary: Path) -> dict[str, list[str]]:
    c, d = canary, canary.parent
    return {
        "answer-folder-linked-to-the-canary-folder": [
            f"rm -rf /code/rtl && ln -s {d} /code/rtl && ls -la /code"
        ],
        "answer-folder-linked-to-root": ["rm -rf /code/rtl && ln -s /root /code/rtl && ls -la /code"],
        "answer-file-linked-to-the-canary": [f"ln -sf {c} /code/{ANSWER}; ln -sf {c} /code/verif/tb2.sv"],
        "link-to-slash": ["rm -rf /code/rtl && ln -s / /code/rtl && ln -s / /code/docs/all"],
        "hard-links": [
            f"ln {c} /code/{ANSWER}; echo rc=$?",  # the canary is not in the sandbox's view
            "ln /code/docs/specification.md /code/rtl/spec.sv; ls -li /code/rtl /code/docs",
        ],
        "fifo": [f"mkfifo /code/{ANSWER} && ls -la /code/rtl"],
        "dev-zero": [f"ln -sf /dev/zero /code/{ANSWER}; ln -sf /dev/urandom /code/verif/r.sv"],
        "sparse-1gib": [
            "truncate -s 1G /code/rtl/big.sv; truncate -s 200M /code/rtl/big2.sv; ls -la /code/rtl",
        ],
        "100k-files": [
            "mkdir /code/rtl/many && cd /code/rtl/many && seq -f 'f%g.sv' 100000 | xargs touch && ls | wc -l"
        ],
        "racing-swapper": [  # keeps flipping names while the episode ends (survives `docker exec`)
            f"(while :; do ln -sfn {c} /code/{ANSWER}; rm -f /code/{ANSWER}; ln -sfn {d} /code/verif/x;"
            " rm -f /code/verif/x; done) >/dev/null 2>&1 & sleep 1; echo started"
        ],
    }


CASE_NAMES = list(_cases(Path("/x/y")))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", CASE_NAMES)
def test_a_hostile_agent_gets_no_file_from_outside_and_no_reward(
    offline_tokenizers, arbiter, canary, kind, case, monkeypatch
):
    need_sandbox(kind, arbiter)
    path, secret = canary
    before = _state(path)
    empty = empty_total(arbiter, kind, monkeypatch)
    out = episode(arbiter, _cases(path)[case], kind, monkeypatch)

    (cand,) = out.candidates
    assert all(secret not in t for t in (cand.files or {}).values())
    # Nothing of substance was collected: at most an empty file (under the local executor `truncate -s 1G`
    # dies of the 256 MB file-size limit and leaves a 0-byte file, which is the agent's own).
    assert all(t == "" for t in (cand.files or {}).values()), sorted(cand.files or {})[:5]
    (reward,) = out.rewards
    assert secret not in json.dumps(reward.to_dict(), default=str) and secret not in reward.feedback()
    assert secret not in out.text
    assert out.total <= empty + 1e-9
    assert _state(path) == before
    if case != "racing-swapper":  # the swapper may have left nothing behind when it was stopped
        assert out.metrics["agent/collect_skipped"] >= 1
        assert "not collected" in out.logs.get("collect/skipped", "")
    assert secret not in str(out.logs)


@pytest.mark.parametrize("kind", KINDS)
def test_an_honest_answer_beside_hostile_entries_still_counts(
    offline_tokenizers, arbiter, canary, kind, monkeypatch
):
    """The collection refuses entries, not episodes: the reference answer written next to links, a FIFO and a
    hard link gets the full reward, and the refused entries are reported."""
    need_sandbox(kind, arbiter)
    path, _ = canary
    reference = arbiter.reference or {}
    if ANSWER not in reference:
        pytest.skip("this CVDP release has no reference for the arbiter")
    commands = [
        f"cat > /code/{ANSWER} <<'EOF'\n{reference[ANSWER]}\nEOF",
        f"ln -s {path} /code/rtl/leak.sv; mkfifo /code/rtl/pipe.sv; ln /code/docs/specification.md /code/verif/s.md",
    ]
    out = episode(arbiter, commands, kind, monkeypatch)
    answer = {ANSWER: reference[ANSWER] + "\n"}
    assert out.candidates[0].files == answer
    # The same reward as the answer handed in alone (full marks, as far as the executor's tools allow).
    from rtlreward.model import Candidate
    from rtlreward_tinker.base import get_engine

    (alone,) = get_engine(PROFILE, kind).score_batch([(arbiter, Candidate(files=answer))])
    assert out.total == pytest.approx(alone.total) and out.total > empty_total(arbiter, kind, monkeypatch)
    assert alone.stages["tests"].passed
    assert out.metrics["agent/collect_skipped"] >= 3
