"""`rtlreward sample --backend tinker` up to the service boundary: the real tinker SDK types and the real
tinker-cookbook renderer and tokenizer (built offline), with the stand-in `tinker.ServiceClient` of
tests/tinker_helpers.py answering. The prompt the service receives is the dataset's chat rendered with the
model's chat template; each task is one request for all its samples; the replies are parsed back into text and
written as a completions file `rtlreward eval` reads."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tinker_cookbook")
pytestmark = pytest.mark.tinker

import tinker_helpers as H  # noqa: E402
import typer  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from rtlreward.evaluate import read_completions  # noqa: E402
from rtlreward.integration import load_tasks  # noqa: E402
from rtlreward_sample.cli import register  # noqa: E402

IDS = ["Prob001_zero", "Prob002_m2014_q4i", "Prob003_step_one"]
GOOD = {"Prob001_zero", "Prob003_step_one"}
BROKEN = "[BEGIN]\nmodule TopModule (output out);\n  assign out = ;\nendmodule\n[DONE]"


@pytest.fixture(scope="module")
def offline_tokenizers(request):
    cache = H.tokenizer_cache_dir(request)
    H.register_offline_tokenizers(cache)
    return cache


@pytest.fixture
def service(offline_tokenizers, monkeypatch):
    """The stand-in service; its policy answers the reference for GOOD tasks, a syntax error otherwise, chosen
    by decoding the rendered prompt it was sent."""
    import tinker
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    tasks = load_tasks("verilog-eval", ids=",".join(IDS))
    tokenizer = get_tokenizer(H.QWEN3_MODEL)
    prompts_seen: list[str] = []

    def reply(model_input) -> str:
        text = tokenizer.decode(model_input.to_ints())
        prompts_seen.append(text)
        for t in tasks:
            if t.prompt.strip() in text:
                return f"[BEGIN]\n{t.reference['TopModule.sv'].strip()}\n[DONE]" if t.id in GOOD else BROKEN
        return "no task found in the prompt"

    script = H.Script(reply, tokenizer, 151645)  # Qwen3's <|im_end|>
    policy = H.FakeSamplingClient(script)
    H.FakeServiceClient.instances.clear()
    monkeypatch.setattr(tinker, "ServiceClient", H.fake_service_factory(policy))
    return {"tasks": {t.id: t for t in tasks}, "prompts": prompts_seen, "script": script}


def _app():
    app = typer.Typer()
    register(app)
    return app


def _args(out, *extra):
    return [
        "sample",
        "verilog-eval",
        "--filter",
        "ids=" + ",".join(IDS),
        "--backend",
        "tinker",
        "--model",
        H.QWEN3_MODEL,
        "-n",
        "2",
        "--out",
        str(out),
        *extra,
    ]


def test_tinker_backend_renders_the_chat_samples_and_writes_completions(service, tmp_path):
    out = tmp_path / "c.jsonl"
    res = CliRunner().invoke(_app(), _args(out), env={"TINKER_API_KEY": "tml-test"})
    assert res.exit_code == 0, res.output
    assert "wrote 6 completions" in res.output

    (svc,) = H.FakeServiceClient.instances
    assert [t.name for t in svc.teachers] == [
        f"teacher:{H.QWEN3_MODEL}"
    ]  # a sampling client of the base model
    # one request per task (both samples at once); the prompt is the Qwen3 chat template over the task's chat
    assert len(service["prompts"]) == 6 and len(set(service["prompts"])) == 3
    for text in set(service["prompts"]):
        assert text.startswith("<|im_start|>system\nYou are a Verilog RTL designer")
        assert "<|im_start|>user\nQuestion:" in text and text.rstrip().endswith("<|im_start|>assistant")

    completions, problems = read_completions(out)
    assert not problems
    assert sorted((c.id, c.sample) for c in completions) == sorted((i, s) for i in IDS for s in (0, 1))
    for c in completions:
        if c.id in GOOD:
            assert "assign" in c.text and c.text.startswith("[BEGIN]") and c.text.endswith("[DONE]")
            assert service["tasks"][c.id].reference["TopModule.sv"].strip() in c.text
        else:
            assert c.text == BROKEN
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert {x["sampler"]["backend"] for x in lines} == {"tinker"}
    assert {x["finish_reason"] for x in lines} == {"stop"}

    # resumable like the OpenAI backend: a rerun asks for nothing
    res = CliRunner().invoke(_app(), _args(out), env={"TINKER_API_KEY": "tml-test"})
    assert res.exit_code == 0 and "nothing to sample" in res.output
    assert len(service["prompts"]) == 6


def test_tinker_backend_without_a_key_is_one_line(tmp_path):
    res = CliRunner().invoke(_app(), _args(tmp_path / "c.jsonl"), env={"TINKER_API_KEY": ""})
    assert res.exit_code == 2
    assert "TINKER_API_KEY is not set" in res.output and "Traceback" not in res.output


def test_tinker_dry_run_needs_no_key(tmp_path):
    res = CliRunner().invoke(_app(), [*_args(tmp_path / "c.jsonl"), "--dry-run"], env={"TINKER_API_KEY": ""})
    assert res.exit_code == 0, res.output
    cfg = json.loads(res.stdout)
    assert cfg["backend"] == "tinker" and cfg["to_sample"] == 6
    assert cfg["tinker_api_key"] == "$TINKER_API_KEY is not set"
