"""Defaults of the original experiments, renderer choice and the student/teacher tokenizer check.

Nothing here imports tinker or torch: `rtlreward train ... --dry-run` and the tokenizer check must work on a
machine without a GPU stack and without network.
"""

from __future__ import annotations

import os
import re

# The original design's RL defaults (batch of 8 problems, 4 samples each, LoRA at 1e-4, long replies).
DEFAULTS: dict[str, object] = {
    "model_name": "Qwen/Qwen3-8B",
    "batch_size": 8,
    "group_size": 4,
    "learning_rate": 1e-4,
    "lora_rank": 32,
    "max_tokens": 8192,
    "temperature": 1.0,
    "profile": "shaped",  # as every command; `-p seed` gives logs comparable with the original runs
    "executor": "local",
    "max_prompt_tokens": 16384,
    "test_fraction": 0.0,
    "eval_every": 20,
    "save_every": 20,
    "seed": 0,
}

# Distillation on top of the RL defaults: task reward plus teacher KL.
DISTILL_DEFAULTS: dict[str, object] = {
    "teacher_model": "Qwen/Qwen3-32B",
    "kl_penalty_coef": 0.7,
    "kl_discount_factor": 0.0,
}

# Agentic episodes (CVDP agentic: a bash tool in a /code workspace).
AGENTIC_DEFAULTS: dict[str, object] = {
    "max_turns": 50,
    "command_timeout": 60.0,
    "output_budget": 8000,
    "sandbox": "auto",
}

# Model family -> tokenizer family. Order matters: the first pattern that matches the model name wins.
# A student and its teacher must share a tokenizer because the student's token ids go to the teacher unchanged.
_TOKENIZER_FAMILIES: tuple[tuple[str, str], ...] = (
    (r"gpt-oss", "o200k_harmony"),
    (r"qwen3\.5|qwen3_5", "qwen3.5"),
    (r"qwen3-vl", "qwen3"),
    (r"qwen/qwen3|qwen3-", "qwen3"),
    (r"qwen2\.5|qwen2-", "qwen2"),
    (r"llama-3|llama3", "llama3"),
    (r"deepseek-v3", "deepseek-v3"),
    (r"deepseek-r1", "deepseek-r1"),
    (r"kimi-k2", "kimi-k2"),
    (r"glm-", "glm"),
    (r"nemotron", "nemotron"),
    (r"inkling", "o200k_chat"),
)

# Model family -> the cookbook renderer the original experiments used.
_RENDERERS: tuple[tuple[str, str], ...] = (
    (r"gpt-oss", "gpt_oss_medium_reasoning"),
    (r"qwen3-.*instruct-2507", "qwen3_instruct"),
    (r"qwen3", "qwen3"),
    (r"llama-3|llama3", "llama3"),
    (r"deepseek-v3", "deepseekv3"),
    (r"kimi-k2", "kimi_k2"),
)


def tokenizer_family(model_name: str) -> str | None:
    """The tokenizer family of a model by name alone (no network); None when unknown."""
    name = model_name.lower()
    for pattern, family in _TOKENIZER_FAMILIES:
        if re.search(pattern, name):
            return family
    return None


def default_renderer(model_name: str) -> str:
    name = model_name.lower()
    for pattern, renderer in _RENDERERS:
        if re.search(pattern, name):
            return renderer
    return "role_colon"


class TokenizerMismatch(ValueError):
    """Student and teacher do not share a tokenizer: distillation would compare unrelated token ids."""


def check_same_tokenizer(student: str, teacher: str) -> str:
    """Refuse a student/teacher pair whose tokenizers differ, naming both. Unknown families are allowed only when
    the names are identical up to the checkpoint suffix (we cannot prove a mismatch without a table entry, but we
    cannot prove a match either, so we refuse)."""
    fs, ft = tokenizer_family(student), tokenizer_family(teacher)
    if fs is not None and fs == ft:
        return fs
    if fs is None and ft is None and student.split(":")[0] == teacher.split(":")[0]:
        return "unknown"
    raise TokenizerMismatch(
        f"student {student!r} uses the {fs or 'unknown'} tokenizer but teacher {teacher!r} uses the "
        f"{ft or 'unknown'} tokenizer; on-policy distillation sends the student's token ids to the teacher, "
        f"so pick a teacher of the same family (e.g. a larger {student.split('/')[0]} model)"
    )


def api_key_present() -> bool:
    return bool(os.environ.get("TINKER_API_KEY", "").strip())
