"""The tinker plugin's pieces that need no evaluator: import weight, tool-call parsing, the tokenizer check, the
CLI's dry run and key check, prompt truncation, splits and curriculum, pickling, the sandbox."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tinker_cookbook")
pytestmark = pytest.mark.tinker

import tinker_helpers as H  # noqa: E402

from rtlreward.model import Task  # noqa: E402
from rtlreward_tinker import toolcalls  # noqa: E402
from rtlreward_tinker.config import TokenizerMismatch, check_same_tokenizer, tokenizer_family  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def offline_tokenizers(request):
    """Real Qwen3 and gpt-oss fast tokenizers built offline once (kept in pytest's cache folder)."""
    cache = H.tokenizer_cache_dir(request)
    H.register_offline_tokenizers(cache)
    return cache


def test_importing_the_plugin_loads_neither_torch_nor_tinker():
    code = (
        "import sys, rtlreward_tinker, rtlreward_tinker.cli, rtlreward_tinker.config, rtlreward_tinker.toolcalls;"
        "bad=[m for m in ('torch','tinker','tinker_cookbook') if m in sys.modules]; print(bad); sys.exit(bool(bad))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


# -- tool calls --------------------------------------------------------------------------------------------------
def test_qwen_tool_call_accepts_arguments_and_args():
    a = '<tool_call>\n{"name": "execute_bash", "arguments": {"command": "ls /code"}}\n</tool_call>'
    b = '<tool_call>{"name": "execute_bash", "args": {"command": "cat docs/spec.md"}}</tool_call>'
    assert toolcalls.format_calls(toolcalls.parse_text(a)) == ["ls /code"]
    assert toolcalls.format_calls(toolcalls.parse_text(b)) == ["cat docs/spec.md"]


def test_fenced_bash_is_the_fallback_and_bad_calls_carry_an_error():
    text = "I will look.\n```bash\nls -la /code/rtl\n```\n"
    (call,) = toolcalls.parse_text(text)
    assert (call.command, call.source, call.error) == ("ls -la /code/rtl", "fenced", None)
    (bad,) = toolcalls.parse_text(
        '<tool_call>{"name": "execute_bash", "arguments": {"cmd_typo": 1}}</tool_call>'
    )
    assert bad.error and "no command" in bad.error
    (other,) = toolcalls.parse_text(
        '<tool_call>{"name": "python", "arguments": {"command": "x"}}</tool_call>'
    )
    assert other.error and "unknown tool" in other.error
    assert toolcalls.parse_text("module m; endmodule") == []


def test_harmony_tool_call_is_parsed():
    text = (
        "<|channel|>analysis<|message|>look first<|end|><|start|>assistant to=functions.execute_bash"
        '<|channel|>commentary <|constrain|>json<|message|>{"command": "ls /code"}<|call|>'
    )
    assert toolcalls.format_calls(toolcalls.parse_text(text)) == ["ls /code"]


def test_renderer_parsed_calls_and_unparsed_args_calls(offline_tokenizers):
    from rtlreward_tinker.base import get_renderer

    r = get_renderer("qwen3", H.QWEN3_MODEL)
    stop = r.get_stop_sequences()[0]
    tok = r.tokenizer
    reply = '<tool_call>\n{"name": "execute_bash", "args": {"command": "ls /code"}}\n</tool_call>'
    msg, _ = r.parse_response([*tok.encode(reply, add_special_tokens=False), stop])
    calls = toolcalls.parse_message(msg, "")
    assert toolcalls.format_calls(calls) == ["ls /code"]
    g = get_renderer("gpt_oss_medium_reasoning", H.GPT_OSS_MODEL)
    harmony = '<|channel|>commentary to=functions.execute_bash <|constrain|>json<|message|>{"command": "pwd"}<|call|>'
    gmsg, _ = g.parse_response(g.tokenizer.encode(harmony, add_special_tokens=False))
    assert toolcalls.format_calls(toolcalls.parse_message(gmsg, "")) == ["pwd"]


# -- tokenizer families ------------------------------------------------------------------------------------------
def test_student_and_teacher_must_share_a_tokenizer():
    assert check_same_tokenizer("Qwen/Qwen3-8B", "Qwen/Qwen3-32B") == "qwen3"
    assert check_same_tokenizer("openai/gpt-oss-20b", "openai/gpt-oss-120b") == "o200k_harmony"
    with pytest.raises(TokenizerMismatch) as exc:
        check_same_tokenizer("openai/gpt-oss-20b", "Qwen/Qwen3-32B")
    assert "o200k_harmony" in str(exc.value) and "qwen3" in str(exc.value)
    assert tokenizer_family("Qwen/Qwen3-30B-A3B-Instruct-2507") == "qwen3"


# -- CLI -----------------------------------------------------------------------------------------------------------
def _run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    import os

    full_env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "rtlreward", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=full_env,
        cwd=ROOT,
    )


def _need_cli():
    try:
        import rtlreward.cli as cli
    except ImportError:
        pytest.skip("rtlreward.cli not written yet")
    if not hasattr(cli, "command_group"):
        pytest.skip("rtlreward.cli has no command_group yet")


def test_train_rl_dry_run_prints_the_resolved_config():
    _need_cli()
    r = _run_cli("train", "rl", "--dataset", "cvdp", "--dry-run")
    assert r.returncode == 0, r.stderr
    cfg = json.loads(r.stdout)
    assert (
        cfg["batch_size"],
        cfg["group_size"],
        cfg["learning_rate"],
        cfg["max_tokens"],
        cfg["temperature"],
    ) == (8, 4, 1e-4, 8192, 1.0)
    assert cfg["renderer_name"] == "qwen3" and cfg["mode"] == "single"
    r2 = _run_cli(
        "train", "rl", "--dataset", "cvdp", "--agentic", "--max-turns", "7", "--group-size", "2", "--dry-run"
    )
    cfg2 = json.loads(r2.stdout)
    assert (cfg2["mode"], cfg2["max_turns"], cfg2["group_size"]) == ("agentic", 7, 2)


def test_train_without_api_key_is_one_clear_line_and_exit_2():
    _need_cli()
    r = _run_cli("train", "rl", "--dataset", "cvdp", env={"TINKER_API_KEY": ""})
    assert r.returncode == 2
    assert "TINKER_API_KEY" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_distill_refuses_mismatched_tokenizers_up_front():
    _need_cli()
    r = _run_cli(
        "train",
        "distill",
        "--dataset",
        "cvdp",
        "--model",
        "openai/gpt-oss-20b",
        "--teacher",
        "Qwen/Qwen3-32B",
        "--dry-run",
    )
    assert r.returncode == 2
    assert "o200k_harmony" in r.stderr and "qwen3" in r.stderr and "Traceback" not in r.stderr
    ok = _run_cli("train", "distill", "--dataset", "cvdp", "--dry-run")
    cfg = json.loads(ok.stdout)
    assert (cfg["kl_penalty_coef"], cfg["kl_discount_factor"]) == (0.7, 0.0)


def test_cli_register_works_on_any_typer_group():
    """The commands register on the group handed to them (no global app needed), dry run included."""
    import typer
    from typer.testing import CliRunner

    from rtlreward_tinker.cli import register

    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(
        app, ["rl", "--dataset", "x", "--refine", "--refine-reward", "best", "--dry-run"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["refine_reward"] == "best"


# -- prompts, splits, curriculum, pickling ---------------------------------------------------------------------
def test_long_specs_are_cut_in_the_middle_keeping_the_instruction(offline_tokenizers):
    from rtlreward_tinker.base import get_renderer
    from rtlreward_tinker.prompts import prompt_for

    instruction = "Design module `lfsr_8bit` in rtl/lfsr_8bit.sv following the spec below.\n"
    tail = "\nReturn the complete file rtl/lfsr_8bit.sv in one fenced code block."
    spec = "".join(
        f"Spec line {i}: the register shifts left and feeds back bit {i % 8}.\n" for i in range(3000)
    )
    task = Task(id="long", prompt=instruction + spec + tail, system_prompt="You are an RTL engineer.")
    renderer = get_renderer("qwen3", H.QWEN3_MODEL)
    msgs, cut = prompt_for(task, renderer, 2000)
    assert cut > 0
    assert renderer.build_generation_prompt(msgs).length <= 2000
    user = msgs[-1]["content"]
    assert user.startswith(instruction) and user.endswith(tail) and "truncated" in user
    same, none_cut = prompt_for(task, renderer, 10**6)
    assert none_cut == 0 and same[-1]["content"] == task.prompt


def test_the_prompt_is_the_datasets_never_guessed_from_the_task_id(monkeypatch):
    from rtlreward_tinker import prompts

    # An id that looks like CVDP's, from no registered dataset: the task's own prompt, in every style.
    lookalike = Task(id="cvdp_agentic_lookalike_0001", prompt="the request", system_prompt="the system")
    chat = [{"role": "system", "content": "the system"}, {"role": "user", "content": "the request"}]
    assert prompts.task_messages(lookalike) == chat
    assert prompts.task_messages(lookalike, "agentic") == chat

    class OwnChat:
        def messages(self, task, style):
            return [{"role": "user", "content": f"{style}:{task.id}"}]

    monkeypatch.setattr(prompts, "dataset_of", lambda task: OwnChat() if task.dataset == "mine" else None)
    assert prompts.task_messages(Task(id="t1", dataset="mine"), "agentic") == [
        {"role": "user", "content": "agentic:t1"}
    ]


def test_split_is_deterministic_and_curriculum_orders_by_difficulty():
    from rtlreward_tinker.env import order_tasks, split_tasks

    tasks = [Task(id=f"t{i}", difficulty=("hard", "easy", "medium")[i % 3]) for i in range(30)]
    train, test = split_tasks(tasks, test_fraction=0.2, seed=1)
    assert len(test) == 6 and not {t.id for t in train} & {t.id for t in test}
    _train2, test2 = split_tasks(list(reversed(tasks)), test_fraction=0.2, seed=1)
    assert {t.id for t in test2} == {t.id for t in test}
    ordered = order_tasks(train, curriculum=True, seed=0)
    ranks = [("easy", "medium", "hard").index(t.difficulty) for t in ordered]
    assert ranks == sorted(ranks)
    assert order_tasks(train, curriculum=False, seed=3) == order_tasks(train, curriculum=False, seed=3)


def test_builders_pickle_with_names_only(tmp_path):
    import asyncio

    from rtlreward_tinker.agentic import AgenticGroupBuilder
    from rtlreward_tinker.env import RtlRewardDatasetBuilder, TaskGroupBuilder

    rows = [Task(id=f"t{i}", prompt=f"p{i}", difficulty="easy").to_dict() for i in range(5)]
    f = tmp_path / "tasks.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    builder = RtlRewardDatasetBuilder(
        dataset=f"tasks:{f}",
        model_name=H.QWEN3_MODEL,
        renderer_name="qwen3",
        batch_size=2,
        group_size=3,
        test_size=1,
    )
    train, test = asyncio.run(builder())
    assert (len(train), len(test)) == (2, 1)
    batch = train.get_batch(0)
    assert all(isinstance(b, TaskGroupBuilder) for b in batch)
    clone = pickle.loads(pickle.dumps(batch[0]))
    assert clone == batch[0] and clone.group_size == 3
    agentic = RtlRewardDatasetBuilder(
        dataset=f"tasks:{f}", model_name=H.QWEN3_MODEL, renderer_name="qwen3", mode="agentic", max_turns=5
    )
    agentic_train, _ = asyncio.run(agentic())
    ab = agentic_train.get_batch(0)[0]
    assert isinstance(ab, AgenticGroupBuilder) and ab.max_turns == 5
    assert pickle.loads(pickle.dumps(ab)) == ab


# -- sandbox ------------------------------------------------------------------------------------------------------
def _bwrap_or_skip():
    import shutil

    from rtlreward.sandbox.local import _bwrap_works

    bwrap = shutil.which("bwrap")
    if not bwrap or not _bwrap_works(bwrap):
        pytest.skip("bubblewrap is not usable here")


def test_bwrap_sandbox_has_the_cvdp_layout_limits_and_a_readonly_host(tmp_path):
    _bwrap_or_skip()
    from rtlreward_tinker.agentic import BwrapSandbox, truncate_output

    sentinel = ROOT / ".pytest_cache" / "tinker-sentinel"
    sentinel.parent.mkdir(exist_ok=True)
    sentinel.write_text("still here")
    sb = BwrapSandbox(Task(id="t", prompt="do it", context={"docs/spec.md": "spec"}))
    try:
        out, rc, _ = sb.run("pwd; ls /code; cat /code/prompt.json", 30)
        assert rc == 0 and out.startswith("/code\n")
        for d in ("docs", "rtl", "verif", "rundir", "prompt.json"):
            assert d in out
        assert '"prompt": "do it"' in out
        _, _, timed_out = sb.run("sleep 60", 1)
        assert timed_out
        out, rc, _ = sb.run(f"rm -rf {sentinel}; echo x > {sentinel}; echo rc=$?", 30)
        # the host is read-only or not there at all (the local sandbox shows only what the tools need)
        assert "rc=1" in out and ("Read-only" in out or "No such file" in out)
        sb.run("echo hi > /code/rtl/a.sv", 10)
        assert (sb.root / "rtl" / "a.sv").read_text() == "hi\n"
    finally:
        sb.close()
        sb.close()  # idempotent
    assert sentinel.read_text() == "still here"
    assert not sb.root.exists()
    long = "x" * 1000 + "END"
    cut = truncate_output(long, 100)
    assert len(cut) < 200 and cut.endswith("END") and "cut" in cut


def test_a_key_the_sdk_rejects_is_one_error_line_not_a_traceback(tmp_path):
    _need_cli()
    r = _run_cli(
        "train",
        "rl",
        "--dataset",
        "cvdp",
        "--log-path",
        str(tmp_path / "run"),
        env={"TINKER_API_KEY": "not-a-tinker-key"},
    )
    assert r.returncode == 1
    assert "error: Tinker:" in r.stderr and "Traceback" not in r.stderr


def test_offline_tokenizers_match_the_vocabularies_they_were_built_from(offline_tokenizers):
    from tinker_cookbook.tokenizer_utils import get_tokenizer
    from tml_renderers.tokenizers import HarmonyTokenizer, Qwen3Tokenizer

    samples = [
        "module lfsr_8bit(input clk, input rst, output reg [7:0] q);\n  always @(posedge clk) q <= {q[6:0], q[7]^q[5]};\nendmodule\n",
        "Ünïcödé 日本語 1234567 tabs\tand  spaces\n\n\n",
        "def f(x):\n    return x ** 2  # comment's here\n",
    ]
    for model, tml in ((H.QWEN3_MODEL, Qwen3Tokenizer()), (H.GPT_OSS_MODEL, HarmonyTokenizer())):
        hf = get_tokenizer(model)
        for text in samples:
            assert hf.encode(text, add_special_tokens=False) == list(tml.encode_ordinary(text)), (model, text)
    assert get_tokenizer(H.QWEN3_MODEL).convert_tokens_to_ids("<|im_end|>") == 151645
    assert get_tokenizer(H.GPT_OSS_MODEL).convert_tokens_to_ids("<|call|>") == 200012
