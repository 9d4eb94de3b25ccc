"""The tinker plugin through the REAL cookbook code and the REAL rtlreward engine: group rollouts with a scripted
policy, `rl.train.main` and on-policy distillation `main` for two steps against a stand-in Tinker service, agentic
episodes on the official CVDP agentic example, and refinement episodes. No model weights: the policy replies
from a script; the rewards come from rtlreward's stages (format, lint, compile, the CVDP harness)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

pytest.importorskip("tinker_cookbook")
pytest.importorskip("rtlreward.engine", reason="the engine is not written yet")
pytestmark = pytest.mark.tinker

import tinker_helpers as H  # noqa: E402

from rtlreward.model import Task  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CVDP = ROOT.parent / "shared" / "data" / "cvdp"
NONAGENTIC = CVDP / "cvdp_v1.1.0_example_nonagentic_code_generation_no_commercial_with_solutions.jsonl"
AGENTIC = CVDP / "cvdp_v1.1.0_example_agentic_code_generation_no_commercial_with_solutions.jsonl"
AGENTIC_ID = "cvdp_agentic_fixed_arbiter_0001"
PROFILE = "seed"  # 0.1 format + 0.3 syntax + 1.0 tests: the original experiments' reward
NO_CODE = "I am not able to write this module."


@pytest.fixture(scope="module")
def offline_tokenizers(request):
    cache = H.tokenizer_cache_dir(request)
    H.register_offline_tokenizers(cache)
    return cache


def _load(path: Path, task_id: str | None = None) -> tuple[Task, dict[str, str]]:
    if not path.exists():
        pytest.skip(f"{path} is not there (../shared beside the project)")
    from rtlreward.integration import load_tasks

    try:
        tasks = load_tasks(str(path))
    except ValueError as exc:
        pytest.skip(f"the cvdp dataset plugin cannot load {path.name} yet: {exc}")
    task = next(t for t in tasks if task_id is None or t.id == task_id)
    reference = task.reference
    if not reference:
        from cvdp_adapter.records import parse_record

        rec = next(json.loads(line) for line in path.read_text().splitlines() if task.id in line)
        reference = parse_record(rec).reference()
    return task, reference


@pytest.fixture(scope="module")
def lfsr():
    return _load(NONAGENTIC)


@pytest.fixture(scope="module")
def arbiter():
    return _load(AGENTIC, AGENTIC_ID)


def _fenced(files: dict[str, str]) -> str:
    return "\n".join(f"```verilog\n// {path}\n{text}\n```" for path, text in files.items())


def _reply(model: str, text: str) -> str:
    """A reply in the model's own chat format (Harmony's final channel for gpt-oss)."""
    return f"<|channel|>final<|message|>{text}" if "gpt-oss" in model else text


def _script(model: str, renderer_name: str, replies) -> H.Script:
    from rtlreward_tinker.base import get_renderer

    renderer = get_renderer(renderer_name, model)
    return H.Script(replies, renderer.tokenizer, renderer.get_stop_sequences()[0])


class CountingEngine:
    """The real engine, with its batch calls counted (to show one batch per group)."""

    def __init__(self, engine):
        self.engine = engine
        self.batches: list[int] = []

    def score_batch(self, pairs, **kw):
        self.batches.append(len(pairs))
        return self.engine.score_batch(pairs, **kw)


@pytest.fixture
def counting_engine(monkeypatch):
    import rtlreward_tinker.base as base_mod

    real = base_mod.get_engine(PROFILE, "local")
    counting = CountingEngine(real)
    monkeypatch.setattr(base_mod, "get_engine", lambda profile, executor: counting)
    return counting


# -- single-shot group rollouts ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("model", "renderer_name"), [(H.QWEN3_MODEL, "qwen3"), (H.GPT_OSS_MODEL, "gpt_oss_medium_reasoning")]
)
def test_group_rollout_is_scored_by_the_engine_in_one_batch(
    offline_tokenizers, lfsr, counting_engine, model, renderer_name
):
    from tinker_cookbook.rl.rollouts import do_group_rollout

    from rtlreward_tinker.env import TaskGroupBuilder

    task, reference = lfsr
    good, bad = _reply(model, _fenced(reference)), _reply(model, NO_CODE)
    script = _script(model, renderer_name, [good, bad, good, bad])
    builder = TaskGroupBuilder(
        task=task,
        renderer_name=renderer_name,
        model_name=model,
        group_size=4,
        profile=PROFILE,
        max_prompt_tokens=8192,
    )
    group = asyncio.run(do_group_rollout(builder, H.ScriptedTokenCompleter(script)))
    rewards = group.get_total_rewards()
    assert counting_engine.batches == [4]
    assert rewards == [pytest.approx(1.4), 0.0, pytest.approx(1.4), 0.0]
    assert [m["format_valid"] for m in group.metrics_G] == [1.0, 0.0, 1.0, 0.0]
    assert [m["reward/total"] for m in group.metrics_G] == rewards
    assert group.metrics_G[0]["tests_passed"] > 0 and group.metrics_G[0]["syntax_valid"] == 1.0
    assert any(k.startswith("stage/") and k.endswith("/duration") for k in group.metrics_G[0])


# -- training loops against the stand-in service ------------------------------------------------------------------
def _metrics(log_path: Path) -> list[dict]:
    """The per-iteration rows of metrics.jsonl (0.6.1 adds a final token-count row without a batch index)."""
    rows = [
        json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines() if line.strip()
    ]
    return [row for row in rows if "progress/batch" in row]


def _fake_service(monkeypatch, script: H.Script) -> H.FakeSamplingClient:
    import tinker

    policy = H.FakeSamplingClient(script)
    H.FakeServiceClient.instances.clear()
    monkeypatch.setattr(tinker, "ServiceClient", H.fake_service_factory(policy))
    return policy


def _resolved(tmp_path: Path, kind: str, **over) -> dict:
    from rtlreward_tinker.cli import resolve
    from rtlreward_tinker.config import AGENTIC_DEFAULTS, DEFAULTS, DISTILL_DEFAULTS

    opts = dict(
        dataset=str(NONAGENTIC),
        source=None,
        task_ids=None,
        limit=None,
        model_name=H.QWEN3_MODEL,
        renderer_name="qwen3",
        batch_size=1,
        group_size=4,
        learning_rate=DEFAULTS["learning_rate"],
        lora_rank=32,
        max_tokens=2048,
        temperature=1.0,
        profile=PROFILE,
        executor="local",
        max_prompt_tokens=8192,
        test_fraction=0.0,
        test_size=0,
        curriculum=False,
        seed=0,
        epochs=2,
        max_steps=2,
        eval_every=0,
        save_every=0,
        loss_fn="importance_sampling",
        kl_penalty_coef=0.0,
        remove_constant_reward_groups=False,
        log_path=str(tmp_path / "run"),
        load_checkpoint_path=None,
        wandb_project=None,
        wandb_name=None,
        base_url=None,
        agentic=False,
        refine=False,
        max_turns=AGENTIC_DEFAULTS["max_turns"],
        command_timeout=60.0,
        output_budget=8000,
        sandbox="auto",
        sandbox_image=None,
        refine_turns=3,
        refine_reward="final",
    )
    if kind == "distill":
        opts.update(
            teacher_model="Qwen/Qwen3-32B",
            teacher_checkpoint=None,
            kl_penalty_coef=DISTILL_DEFAULTS["kl_penalty_coef"],
            kl_discount_factor=0.0,
        )
    opts.update(over)
    return resolve(kind, **opts)


def test_rl_train_main_runs_two_steps_on_rtlreward_rewards(offline_tokenizers, lfsr, tmp_path, monkeypatch):
    from rtlreward_tinker.cli import run

    _task, reference = lfsr
    script = _script(H.QWEN3_MODEL, "qwen3", [_fenced(reference), NO_CODE])
    _fake_service(monkeypatch, script)
    r = _resolved(tmp_path, "rl")
    run(r)
    rows = _metrics(Path(r["log_path"]))
    assert [row["progress/batch"] for row in rows] == [0, 1]
    for row in rows:  # half the replies are the reference (max 1.4), half have no code (0)
        assert row["env/all/format_valid"] == pytest.approx(0.5)
        assert row["env/all/reward/total"] == pytest.approx(0.7)
        assert row["env/all/syntax_valid"] == pytest.approx(0.5)
    (service,) = H.FakeServiceClient.instances
    assert service.training_clients[0].steps == 2
    assert (Path(r["log_path"]) / "checkpoints.jsonl").exists()


def test_distillation_main_runs_two_steps_with_task_reward_and_teacher_kl(
    offline_tokenizers, lfsr, tmp_path, monkeypatch
):
    from rtlreward_tinker.cli import run

    _task, reference = lfsr
    script = _script(H.QWEN3_MODEL, "qwen3", [_fenced(reference), NO_CODE])
    _fake_service(monkeypatch, script)
    r = _resolved(tmp_path, "distill")
    assert r["teacher_tokenizer_check"] == "qwen3"
    run(r)
    rows = _metrics(Path(r["log_path"]))
    assert len(rows) == 2
    for row in rows:
        assert row["env/all/reward/total"] == pytest.approx(0.7)
        assert row["env/all/format_valid"] == pytest.approx(0.5)
        assert any("teacher_kl" in k for k in row)
    (service,) = H.FakeServiceClient.instances
    assert [t.name for t in service.teachers] == ["teacher:Qwen/Qwen3-32B"]
    assert service.teachers[0].logprob_calls > 0


# -- agentic episodes ------------------------------------------------------------------------------------------------
def _call(cmd: str, key: str = "arguments") -> str:
    return "<tool_call>\n" + json.dumps({"name": "execute_bash", key: {"command": cmd}}) + "\n</tool_call>"


def _episode(task: Task, replies: list[str], model: str = H.QWEN3_MODEL, renderer_name: str = "qwen3", **kw):
    """One scripted agentic episode (group of 1): the reply is chosen by how many tool results came back."""
    from tinker_cookbook.rl.rollouts import do_group_rollout

    from rtlreward_tinker.agentic import AgenticGroupBuilder
    from rtlreward_tinker.base import get_renderer

    renderer = get_renderer(renderer_name, model)
    tok = renderer.tokenizer
    marker = "<tool_response>" if "gpt-oss" not in model else "functions.execute_bash to=assistant"

    def pick(prompt) -> str:
        n = tok.decode(prompt.to_ints()).count(marker)
        return replies[min(n, len(replies) - 1)]

    script = H.Script(pick, tok, renderer.get_stop_sequences()[0])
    builder = AgenticGroupBuilder(
        task=task,
        renderer_name=renderer_name,
        model_name=model,
        group_size=1,
        profile=PROFILE,
        **{"sandbox": "local", **kw},
    )
    group = asyncio.run(do_group_rollout(builder, H.ScriptedTokenCompleter(script)))
    return group, builder, tok


def _need_bwrap():
    import shutil

    from rtlreward.sandbox.local import _bwrap_works

    if not shutil.which("bwrap") or not _bwrap_works(shutil.which("bwrap")):
        pytest.skip("bubblewrap is not usable here")


def test_agentic_episode_writing_the_reference_gets_the_maximum(offline_tokenizers, arbiter):
    _need_bwrap()
    task, reference = arbiter
    ((path, text),) = reference.items()
    replies = [
        _call("ls -R /code", key="args"),  # the original agents' `args` spelling
        _call(f"cat > /code/{path} <<'EOF'\n{text}\nEOF"),
        # runs the task's own testbench in /code/verif against the RTL it wrote
        _call(f"iverilog -g2012 -o /tmp/sim /code/{path} /code/verif/*.sv && vvp /tmp/sim | tail -3"),
        "The arbiter is in place.",
    ]
    group, builder, tok = _episode(task, replies)
    (traj,) = group.trajectories_G
    assert len(traj.transitions) == 4
    seen = tok.decode(traj.transitions[-1].ob.to_ints())
    assert "specification.md" in seen and "All test cases completed" in seen
    (reward,) = group.get_total_rewards()
    assert reward == pytest.approx(group.metrics_G[0]["reward/max_total"]) and reward > 0
    assert group.metrics_G[0]["agent/commands"] == 3
    assert builder.__dict__.get("_live_envs") == []  # sandbox released


def _harmony_call(cmd: str) -> str:
    body = json.dumps({"command": cmd})
    return f"<|channel|>commentary to=functions.execute_bash <|constrain|>json<|message|>{body}<|call|>"


def test_agentic_gpt_oss_episode_with_harmony_tool_calls(offline_tokenizers, arbiter):
    _need_bwrap()
    task, reference = arbiter
    ((path, text),) = reference.items()
    replies = [
        _harmony_call("ls /code/docs"),
        _harmony_call(f"cat > /code/{path} <<'EOF'\n{text}\nEOF"),
        "<|channel|>final<|message|>The arbiter is written.",
    ]
    group, _, tok = _episode(task, replies, model=H.GPT_OSS_MODEL, renderer_name="gpt_oss_medium_reasoning")
    (traj,) = group.trajectories_G
    assert len(traj.transitions) == 3
    assert "specification.md" in tok.decode(traj.transitions[-1].ob.to_ints())
    (reward,) = group.get_total_rewards()
    assert reward == pytest.approx(group.metrics_G[0]["reward/max_total"]) and reward > 0


def test_agentic_episode_writing_nothing_gets_zero_and_a_hung_command_is_cut(offline_tokenizers, arbiter):
    _need_bwrap()
    task, _ = arbiter
    replies = [_call("sleep 600"), _call("echo still-going"), "I give up."]
    group, _, tok = _episode(task, replies, command_timeout=2)
    (traj,) = group.trajectories_G
    assert len(traj.transitions) == 3  # the episode went on after the timeout
    seen = tok.decode(traj.transitions[-1].ob.to_ints())
    assert "timed out after 2s" in seen and "still-going" in seen
    assert group.get_total_rewards() == [0.0]
    assert group.metrics_G[0]["agent/timeouts"] == 1


def test_agentic_rm_rf_root_harms_nothing_outside_the_sandbox(offline_tokenizers, arbiter, tmp_path):
    _need_bwrap()
    task, _ = arbiter
    sentinel = ROOT / ".pytest_cache" / "tinker-agent-sentinel"
    sentinel.parent.mkdir(exist_ok=True)
    sentinel.write_text("intact")
    replies = ["```bash\nrm -rf --no-preserve-root / 2>/dev/null; echo done\n```", "Finished."]
    group, _, _ = _episode(task, replies, command_timeout=20)
    assert sentinel.read_text() == "intact"
    assert (ROOT / "pyproject.toml").exists()
    assert group.get_total_rewards() == [0.0]


def test_agentic_sandboxes_are_released_when_the_rollout_fails(offline_tokenizers, arbiter, monkeypatch):
    _need_bwrap()
    from tinker_cookbook.rl.rollouts import do_group_rollout

    import rtlreward_tinker.agentic as agentic

    task, _ = arbiter
    made = []
    real = agentic.make_sandbox

    def spy(*args, **kw):
        made.append(real(*args, **kw))
        return made[-1]

    monkeypatch.setattr(agentic, "make_sandbox", spy)

    class Broken:
        calls = 0

        async def __call__(self, model_input, stop, *, max_tokens=None):
            Broken.calls += 1
            if Broken.calls > 2:
                raise RuntimeError("sampler died")
            return await H.ScriptedTokenCompleter(H.Script([_call("chmod 000 /code/docs")], tok, 151645))(
                model_input, stop
            )

    from rtlreward_tinker.base import get_renderer

    tok = get_renderer("qwen3", H.QWEN3_MODEL).tokenizer
    builder = agentic.AgenticGroupBuilder(
        task=task,
        renderer_name="qwen3",
        model_name=H.QWEN3_MODEL,
        group_size=2,
        profile=PROFILE,
        sandbox="local",
    )
    with pytest.raises(RuntimeError, match="sampler died"):
        asyncio.run(do_group_rollout(builder, Broken()))
    assert len(made) == 2 and all(not sb.root.exists() for sb in made)
    asyncio.run(builder.cleanup())  # again: idempotent, no error


def test_agentic_max_turns_ends_the_episode(offline_tokenizers, arbiter):
    _need_bwrap()
    task, _ = arbiter
    group, _, _ = _episode(task, [_call("true")], max_turns=3)
    (traj,) = group.trajectories_G
    assert len(traj.transitions) == 3
    assert traj.transitions[-1].metrics.get("stop/max_turns") == 1.0


# -- refinement ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["final", "improvement", "best"])
def test_refinement_feeds_diagnostics_back_and_rewards_per_mode(offline_tokenizers, lfsr, mode):
    from tinker_cookbook.rl.rollouts import do_group_rollout

    from rtlreward_tinker.refine import RefineGroupBuilder

    task, reference = lfsr
    broken = _fenced({p: t.replace("endmodule", "") for p, t in reference.items()})
    script = _script(H.QWEN3_MODEL, "qwen3", [broken, _fenced(reference)])
    builder = RefineGroupBuilder(
        task=task,
        renderer_name="qwen3",
        model_name=H.QWEN3_MODEL,
        group_size=1,
        profile=PROFILE,
        max_turns=3,
        reward_mode=mode,
    )
    group = asyncio.run(do_group_rollout(builder, H.ScriptedTokenCompleter(script)))
    (traj,) = group.trajectories_G
    steps = [t.reward for t in traj.transitions]
    assert len(steps) == 2  # passed on the second try
    first_total = traj.transitions[0].metrics["refine/turn1/total"]
    if mode == "improvement":
        assert steps[0] == pytest.approx(first_total) and sum(steps) == pytest.approx(1.4)
    else:
        assert steps == [0.0, pytest.approx(1.4)]
    second_prompt = script.tokenizer.decode(traj.transitions[1].ob.to_ints())
    assert "does not pass yet" in second_prompt and "Fix the problems" in second_prompt
    assert traj.transitions[-1].metrics["refine/turns"] == 2


def test_cvdp_prompt_is_the_benchmarks_and_long_context_is_cut_not_the_request(offline_tokenizers, arbiter):
    from cvdp_adapter import build_messages
    from rtlreward_tinker.base import get_renderer
    from rtlreward_tinker.prompts import prompt_for

    task, _ = arbiter
    renderer = get_renderer("qwen3", H.QWEN3_MODEL)
    full, cut = prompt_for(task, renderer, None, "copilot")
    assert cut == 0 and full == build_messages(task, "copilot")
    budget = renderer.build_generation_prompt(full).length // 2
    short, cut = prompt_for(task, renderer, budget, "copilot")
    assert cut > 0 and renderer.build_generation_prompt(short).length <= budget
    request = task.metadata.get("request") or task.prompt
    assert request.strip()[-80:] in short[-1]["content"]  # the instruction survives whole
    assert "characters of context truncated" in short[-1]["content"]


def test_an_agentic_episode_over_a_copilot_record_gets_the_datasets_agentic_chat(lfsr):
    """The dataset, not the plugin, builds the chat: the copilot record's task as loaded, and its agentic form
    (workspace layout, no inlined files) from `CvdpDataset.messages`."""
    from cvdp_adapter import build_messages
    from rtlreward_tinker.prompts import task_messages

    task, _ = lfsr
    assert task_messages(task) == [
        {"role": "system", "content": task.system_prompt},
        {"role": "user", "content": task.prompt},
    ]
    agentic = task_messages(task, "agentic")
    assert agentic == build_messages(task, "agentic") and agentic != task_messages(task)


@pytest.mark.docker
def test_agentic_episodes_in_a_docker_sandbox(offline_tokenizers, arbiter):
    from rtlreward_tinker.agentic import default_image, docker_image_present

    if not docker_image_present(default_image()):
        pytest.skip(f"Docker or the image {default_image()} is not available (rtlreward sandbox build-image)")
    task, reference = arbiter
    ((path, text),) = reference.items()
    replies = [
        _call("ls /code/docs && (ping -c1 -W1 10.0.0.1 || echo no-network)"),
        _call("sleep 600"),
        _call(f"cat > /code/{path} <<'EOF'\n{text}\nEOF"),
        "Done.",
    ]
    from rtlreward_tinker.agentic import DockerSandbox, SandboxUnavailable

    try:  # a daemon that cannot start a container is an environment problem, not a finding
        DockerSandbox(task, default_image()).close()
    except SandboxUnavailable as exc:
        pytest.skip(str(exc)[:200])
    group, builder, tok = _episode(task, replies, sandbox="docker", command_timeout=2)
    (traj,) = group.trajectories_G
    seen = tok.decode(traj.transitions[-1].ob.to_ints())
    assert "specification.md" in seen and "no-network" in seen and "timed out after 2s" in seen
    (reward,) = group.get_total_rewards()
    assert reward == pytest.approx(group.metrics_G[0]["reward/max_total"]) and reward > 0
    assert builder.__dict__.get("_live_envs") == []
    # A wrecked container is the agent's loss only: the host is untouched and the episode still ends cleanly.
    group, _, _ = _episode(
        task,
        [_call("rm -rf --no-preserve-root / 2>/dev/null; echo wiped"), "Done."],
        sandbox="docker",
        command_timeout=20,
    )
    assert (ROOT / "pyproject.toml").exists()
    assert group.get_total_rewards() == [0.0]


def test_rl_trains_on_a_corpus_split_and_evaluates_the_held_out_split(offline_tokenizers, tmp_path, monkeypatch):
    """Issue 18: train on a corpus's train split in its own order, evaluate its test split every step."""
    from corpus_gen import problems, write

    from rtlreward_corpus.load import read_corpus, write_rows
    from rtlreward_corpus.split import parse_ratios, split_of
    from rtlreward_tinker.cli import run

    corpus = write(tmp_path / "corpus.jsonl", problems(8, seed=4))
    tasks, _ = read_corpus(corpus)
    ratios = parse_ratios("train=0.5,test=0.5")
    parts = {n: [t for t in tasks if split_of(t, ratios) == n] for n in ("train", "test")}
    assert parts["train"] and parts["test"]
    for name, picked in parts.items():
        write_rows(corpus, [t.metadata["row"] for t in picked], tmp_path / f"corpus.{name}.jsonl")
    first = parts["train"][0]
    script = _script(H.QWEN3_MODEL, "qwen3", [_fenced(first.reference), NO_CODE])
    _fake_service(monkeypatch, script)
    r = _resolved(
        tmp_path,
        "rl",
        dataset=str(tmp_path / "corpus.train.jsonl"),
        eval_dataset=str(tmp_path / "corpus.test.jsonl"),
        keep_order=True,
        profile="equiv",
        eval_every=1,
        epochs=1,
    )
    run(r)
    rows = _metrics(Path(r["log_path"]))
    evals = [row for row in rows if any(k.startswith("test/") for k in row)]
    assert evals, "the held-out split was never evaluated"
    assert any("reward/total" in k for k in evals[0] if k.startswith("test/"))
    # the first step trained on the first task of the train split (kept order): half its replies are its
    # reference (equiv: 1.0), half have no code (0)
    assert rows[0]["env/all/reward/total"] == pytest.approx(0.5)
