"""verl compute_score: the task travels as ground truth; scored by the real stages; through verl's own manager."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rtlreward.integration import load_tasks

ROOT = Path(__file__).resolve().parents[1]
ARBITER = ROOT / "examples" / "fixed_priority_arbiter"


@pytest.fixture(scope="module")
def row():
    from rtlreward_verl import make_rows

    return make_rows(load_tasks(str(ARBITER)), profile="seed")[0]


def _reply(name):
    return (ARBITER / "completions" / f"{name}.txt").read_text()


def test_compute_score_reports_every_component(row):
    from rtlreward_verl import SCORE_KEYS, compute_score

    gt = row["reward_model"]["ground_truth"]
    good = compute_score(row["data_source"], _reply("correct"), gt, row["extra_info"])
    bad = compute_score(row["data_source"], _reply("syntax_error"), gt, row["extra_info"])
    none = compute_score(row["data_source"], "", gt, row["extra_info"])
    assert set(good) == set(SCORE_KEYS) == set(bad) == set(none)
    assert good["score"] == pytest.approx(1.4) and good["passed"] == 1.0 and good["stage_tests"] == 1.0
    assert bad["score"] == pytest.approx(0.1) and bad["syntax_valid"] == 0.0
    assert none["score"] == 0.0


def test_batch_form_matches_single(row):
    from rtlreward_verl import compute_score, compute_score_batch

    gt = row["reward_model"]["ground_truth"]
    replies = [_reply("correct"), _reply("prose_only"), _reply("correct")]
    batch = compute_score_batch([row["data_source"]] * 3, replies, [gt] * 3, [row["extra_info"]] * 3)
    assert [b["score"] for b in batch] == pytest.approx([1.4, 0.0, 1.4])
    assert batch[1] == compute_score(row["data_source"], replies[1], gt, row["extra_info"])


def test_bad_ground_truth_says_how_to_build_rows():
    from rtlreward_verl import compute_score

    with pytest.raises(ValueError, match="make_rows"):
        compute_score("x", "module m; endmodule", "not json", {})
    with pytest.raises(ValueError, match="make_rows"):
        compute_score("x", "module m; endmodule", json.dumps({"no": "id"}), {})


def test_through_verls_naive_reward_manager(row):
    pytest.importorskip("verl.workers.reward_manager.naive", exc_type=ImportError)
    import numpy as np
    import torch
    from verl import DataProto
    from verl.workers.reward_manager.naive import NaiveRewardManager

    from rtlreward_verl import compute_score

    class ByteTok:  # verl decodes token ids with the trainer's tokenizer; bytes are enough here
        def decode(self, ids, skip_special_tokens=True):
            return bytes(int(i) for i in ids if int(i) > 0).decode()

    replies = [_reply("correct"), _reply("syntax_error")]
    prompt = [ord(c) for c in "p"]
    width = max(len(r.encode()) for r in replies)
    responses = torch.zeros((2, width), dtype=torch.long)
    mask = torch.zeros((2, len(prompt) + width), dtype=torch.long)
    for i, r in enumerate(replies):
        b = list(r.encode())
        responses[i, : len(b)] = torch.tensor(b)
        mask[i, : len(prompt) + len(b)] = 1
    data = DataProto.from_dict(
        tensors={"prompts": torch.tensor([prompt, prompt]), "responses": responses, "attention_mask": mask},
        non_tensors={
            "reward_model": np.array([row["reward_model"]] * 2, dtype=object),
            "data_source": np.array([row["data_source"]] * 2, dtype=object),
            "extra_info": np.array([dict(row["extra_info"]), dict(row["extra_info"])], dtype=object),
        },
    )
    out = NaiveRewardManager(tokenizer=ByteTok(), num_examine=0, compute_score=compute_score)(
        data, return_dict=True
    )
    totals = out["reward_tensor"].sum(dim=-1).tolist()
    assert totals == pytest.approx([1.4, 0.1])
    assert out["reward_extra_info"]["tests_passed"][0] > 0 and out["reward_extra_info"]["passed"] == [
        1.0,
        0.0,
    ]


def test_corpus_split_as_verl_train_and_val_files(tmp_path):
    """Issue 18: a corpus's train split and held-out split as verl's train/val Parquet (evaluated every
    trainer.test_freq steps); a val row is scored through verl's own naive reward manager."""
    pytest.importorskip("verl.workers.reward_manager.naive", exc_type=ImportError)
    pa = pytest.importorskip("pyarrow.parquet")
    import numpy as np
    import torch
    from corpus_gen import problems, write
    from verl import DataProto
    from verl.workers.reward_manager.naive import NaiveRewardManager

    from rtlreward_verl import compute_score, write_split

    corpus = str(write(tmp_path / "corpus.jsonl", problems(12, seed=4)))
    train = load_tasks(corpus, split="train", ratios="train=0.5,test=0.5")
    held_out = load_tasks(corpus, split="test", ratios="train=0.5,test=0.5")
    over = write_split(train, held_out, tmp_path / "verl", profile="equiv", eval_every=5)
    assert over["trainer.test_freq"] == 5
    val = pa.read_table(over["data.val_files"]).to_pylist()
    assert [json.loads(r["reward_model"]["ground_truth"])["id"] for r in val] == [t.id for t in held_out]
    assert {r["extra_info"]["split"] for r in val} == {"val"}
    assert len(pa.read_table(over["data.train_files"]).to_pylist()) == len(train)
    with pytest.raises(ValueError, match="no tasks"):
        write_split(train, [], tmp_path / "empty")

    class ByteTok:
        def decode(self, ids, skip_special_tokens=True):
            return bytes(int(i) for i in ids if int(i) > 0).decode()

    row = val[0]
    task = held_out[0]
    replies = [f"```verilog\n{task.reference[task.expected_files[0]]}```", "no code"]
    prompt = [ord("p")]
    width = max(len(r.encode()) for r in replies)
    responses = torch.zeros((2, width), dtype=torch.long)
    mask = torch.zeros((2, 1 + width), dtype=torch.long)
    for i, r in enumerate(replies):
        b = list(r.encode())
        responses[i, : len(b)] = torch.tensor(b)
        mask[i, : 1 + len(b)] = 1
    data = DataProto.from_dict(
        tensors={"prompts": torch.tensor([prompt, prompt]), "responses": responses, "attention_mask": mask},
        non_tensors={
            "reward_model": np.array([row["reward_model"]] * 2, dtype=object),
            "data_source": np.array([row["data_source"]] * 2, dtype=object),
            "extra_info": np.array([dict(row["extra_info"]), dict(row["extra_info"])], dtype=object),
        },
    )
    out = NaiveRewardManager(tokenizer=ByteTok(), num_examine=0, compute_score=compute_score)(
        data, return_dict=True
    )
    assert out["reward_tensor"].sum(dim=-1).tolist() == pytest.approx(
        [1.0, 0.0]
    )  # equiv: the reference, nothing
