"""TRL GRPOTrainer reward functions: scored by the real engine and stages, and a real GRPO step on CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtlreward.integration import load_tasks

ROOT = Path(__file__).resolve().parents[1]
ARBITER = ROOT / "examples" / "fixed_priority_arbiter"


@pytest.fixture(scope="module")
def task():
    return load_tasks(str(ARBITER))[0]


@pytest.fixture(scope="module")
def replies():
    comp = ARBITER / "completions"
    return {name: (comp / f"{name}.txt").read_text() for name in ("correct", "syntax_error", "prose_only")}


@pytest.fixture(scope="module")
def reward_funcs(task):
    from rtlreward_trl.rewards import RTLRewardFunctions

    return RTLRewardFunctions([task], profile="seed")


def _call(funcs, task_ids, completions):
    return {
        f.__name__: f(prompts=[None] * len(completions), completions=completions, task_id=task_ids)
        for f in funcs
    }


def test_reward_funcs_follow_the_seed_profile(reward_funcs, task, replies):
    funcs = reward_funcs.funcs()
    names = [f.__name__ for f in funcs]
    assert names[0] == "rtlreward_total" and "rtlreward_tests" in names and "rtlreward_format" in names
    assert reward_funcs.weights()[0] == 1.0 and sum(reward_funcs.weights()) == 1.0
    order = ["correct", "syntax_error", "prose_only"]
    out = _call(funcs, [task.id] * 3, [replies[k] for k in order])
    assert out["rtlreward_total"] == pytest.approx([1.4, 0.1, 0.0])
    assert out["rtlreward_passed"] == [1.0, 0.0, 0.0]
    assert out["rtlreward_tests"][0] == 1.0 and out["rtlreward_tests"][1] == 0.0
    assert out["rtlreward_format"] == [1.0, 1.0, 0.0]


def test_conversational_completions_and_batch_memo(reward_funcs, task, replies):
    conv = [[{"role": "assistant", "content": replies["correct"]}]]
    first = _call(reward_funcs.funcs(), [task.id], conv)
    assert first["rtlreward_total"] == pytest.approx([1.4])
    # The memo holds it: every function of a batch reads one engine result.
    assert (task.id, replies["correct"]) in reward_funcs._memo


def test_missing_task_column_is_a_clear_error(reward_funcs, replies):
    with pytest.raises(KeyError, match="task_id"):
        reward_funcs.funcs()[0](prompts=[None], completions=[replies["correct"]])
    with pytest.raises(KeyError, match="unknown task id"):
        reward_funcs.funcs()[0](prompts=[None], completions=["x"], task_id=["nope"])


def _tiny_model_and_tokenizer(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    tok = tokenizers.ByteLevelBPETokenizer()
    corpus = ["module arbiter(input clk); endmodule", "```verilog\nassign grant = req & -req;\n```"] * 20
    tok.train_from_iterator(corpus, vocab_size=300, min_frequency=1, special_tokens=["<pad>", "<eos>"])
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok._tokenizer, pad_token="<pad>", eos_token="<eos>"
    )
    config = transformers.LlamaConfig(
        vocab_size=len(fast),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=fast.pad_token_id,
        eos_token_id=fast.eos_token_id,
    )
    model = transformers.LlamaForCausalLM(config)
    return model, fast


@pytest.mark.slow
def test_grpo_step_on_cpu_logs_rtlreward_rewards(tmp_path, task):
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    from rtlreward_trl.rewards import RTLRewardFunctions

    rf = RTLRewardFunctions([task], profile="seed")
    seen: list[str] = []
    funcs = rf.funcs()
    real_total = funcs[0]

    def rtlreward_total(prompts, completions, **kw):  # records what TRL passed, then scores for real
        seen.extend(completions)
        return real_total(prompts, completions, **kw)

    funcs[0] = rtlreward_total
    model, tok = _tiny_model_and_tokenizer(tmp_path)
    ds = datasets.Dataset.from_list([{"prompt": "Write the arbiter:", "task_id": task.id}] * 4)
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=8,
        max_steps=1,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        reward_weights=rf.weights(),
        save_strategy="no",
        bf16=False,
    )
    trainer = trl.GRPOTrainer(
        model=model, reward_funcs=funcs, args=args, train_dataset=ds, processing_class=tok
    )
    trainer.train()
    logs = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    assert seen, "TRL never called the rtlreward reward function"
    expected = [
        r.total
        for r in rf.engine.score_batch(
            [(task, __import__("rtlreward.model").model.Candidate(text=c)) for c in seen]
        )
    ]
    assert logs["rewards/rtlreward_total/mean"] == pytest.approx(sum(expected) / len(expected), abs=1e-5)
    assert "rewards/rtlreward_tests/mean" in logs and "rewards/rtlreward_format/mean" in logs


@pytest.mark.slow
def test_grpo_trains_on_a_corpus_split_and_evaluates_the_held_out_split(tmp_path):
    """Issue 18: the train split feeds GRPO, the test split is evaluated every step through the same rewards."""
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    from corpus_gen import problems, write

    from rtlreward.integration import load_tasks
    from rtlreward_trl.rewards import RTLRewardFunctions

    corpus = str(write(tmp_path / "corpus.jsonl", problems(12, seed=4)))
    train = load_tasks(corpus, split="train", ratios="train=0.5,test=0.5")[:2]
    held_out = load_tasks(corpus, split="test", ratios="train=0.5,test=0.5")[:2]
    rf = RTLRewardFunctions(train, eval_tasks=held_out, profile="equiv", stages=("format", "equivalence"))
    with pytest.raises(ValueError, match="also in the training"):
        RTLRewardFunctions(train, eval_tasks=train[:1])
    assert [r["task_id"] for r in rf.dataset_rows()] == [t.id for t in train]
    assert [r["task_id"] for r in rf.eval_dataset_rows()] == [t.id for t in held_out]
    seen: list[str] = []
    funcs = rf.funcs()
    real_total = funcs[0]

    def rtlreward_total(prompts, completions, **kw):
        seen.extend(kw["task_id"])
        return real_total(prompts, completions, **kw)

    funcs[0] = rtlreward_total
    model, tok = _tiny_model_and_tokenizer(tmp_path)
    plain = lambda rows: [{"prompt": r["prompt"][-1]["content"][:40], "task_id": r["task_id"]} for r in rows]  # noqa: E731
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=2,
        per_device_eval_batch_size=2,
        num_generations=2,
        max_completion_length=8,
        max_steps=1,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=1,
        report_to=[],
        use_cpu=True,
        reward_weights=rf.weights(),
        save_strategy="no",
        bf16=False,
    )
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=funcs,
        args=args,
        train_dataset=datasets.Dataset.from_list(plain(rf.dataset_rows())),
        eval_dataset=datasets.Dataset.from_list(plain(rf.eval_dataset_rows())),
        processing_class=tok,
    )
    trainer.train()
    logs = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    assert {t.id for t in held_out} <= set(seen) and {t.id for t in train} & set(seen)
    assert any(k.startswith("eval_") and "rtlreward_total" in k for k in logs), sorted(logs)
