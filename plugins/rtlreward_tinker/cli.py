"""`rtlreward train rl` and `rtlreward train distill`: the cookbook's training loops over rtlreward rewards.

Options are resolved into one plain dict first (what `--dry-run` prints), then turned into the cookbook's chz
configs. tinker and the cookbook are imported only when a run really starts.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import typer

from rtlreward_tinker.config import (
    AGENTIC_DEFAULTS,
    DEFAULTS,
    DISTILL_DEFAULTS,
    api_key_present,
    check_same_tokenizer,
    default_renderer,
)

RECIPE_NAME = "rtlreward"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-").lower() or "run"


def resolve(kind: str, **opts: Any) -> dict[str, Any]:
    """All knobs of a run with defaults filled in: what --dry-run prints and what the configs are built from.
    Raises ValueError (TokenizerMismatch included) for a combination that cannot run."""
    r = dict(opts)
    r["kind"] = kind
    r["renderer_name"] = r.get("renderer_name") or default_renderer(r["model_name"])
    agentic, refine = bool(r.pop("agentic", False)), bool(r.pop("refine", False))
    if agentic and refine:
        raise ValueError("--agentic and --refine exclude each other")
    r["mode"] = "agentic" if agentic else "refine" if refine else "single"
    if r.get("refine_reward", "final") not in ("final", "best", "improvement"):
        raise ValueError(f"--refine-reward must be final, best or improvement, not {r['refine_reward']!r}")
    if r.get("sandbox", "auto") not in ("auto", "docker", "local"):
        raise ValueError(f"--sandbox must be auto, docker or local, not {r['sandbox']!r}")
    for key in ("batch_size", "group_size", "max_tokens", "max_turns"):
        if key in r and r[key] < 1:
            raise ValueError(f"--{key.replace('_', '-')} must be at least 1")
    if not r.get("log_path"):
        r["log_path"] = str(Path("runs") / f"{kind}-{r['mode']}-{_slug(r['model_name'])}")
    if kind == "distill":
        r["teacher_tokenizer_check"] = check_same_tokenizer(r["model_name"], r["teacher_model"])
    return r


def dataset_builder(r: dict[str, Any]) -> Any:
    from rtlreward_tinker.env import RtlRewardDatasetBuilder

    return RtlRewardDatasetBuilder(
        dataset=r["dataset"],
        source=r.get("source"),
        task_ids=r.get("task_ids"),
        limit=r.get("limit"),
        health=r.get("health"),
        keep_broken=bool(r.get("keep_broken")),
        model_name=r["model_name"],
        renderer_name=r["renderer_name"],
        batch_size=r["batch_size"],
        group_size=r["group_size"],
        profile=r["profile"],
        executor=r["executor"],
        max_prompt_tokens=r["max_prompt_tokens"],
        test_fraction=r["test_fraction"],
        test_size=r["test_size"],
        curriculum=r["curriculum"],
        eval_dataset=r.get("eval_dataset"),
        keep_order=bool(r.get("keep_order")),
        seed=r["seed"],
        num_epochs=r["epochs"],
        mode=r["mode"],
        max_turns=r["max_turns"],
        command_timeout=r["command_timeout"],
        output_budget=r["output_budget"],
        sandbox=r["sandbox"],
        sandbox_image=r.get("sandbox_image"),
        max_trajectory_tokens=r.get("max_trajectory_tokens"),
        refine_turns=r["refine_turns"],
        refine_reward=r["refine_reward"],
    )


def rl_config(r: dict[str, Any]) -> Any:
    from tinker_cookbook.rl import train

    kl_ref = None
    if r["kl_penalty_coef"] > 0:
        kl_ref = train.KLReferenceConfig(base_model=r["model_name"])
    return train.Config(
        learning_rate=r["learning_rate"],
        dataset_builder=dataset_builder(r),
        model_name=r["model_name"],
        recipe_name=RECIPE_NAME,
        max_tokens=r["max_tokens"],
        log_path=r["log_path"],
        renderer_name=r["renderer_name"],
        lora_rank=r["lora_rank"],
        temperature=r["temperature"],
        eval_every=r["eval_every"],
        save_every=r["save_every"],
        max_steps=r.get("max_steps"),
        loss_fn=r["loss_fn"],
        kl_penalty_coef=r["kl_penalty_coef"],
        kl_reference_config=kl_ref,
        wandb_project=r.get("wandb_project"),
        wandb_name=r.get("wandb_name"),
        base_url=r.get("base_url"),
        load_checkpoint_path=r.get("load_checkpoint_path"),
        remove_constant_reward_groups=r["remove_constant_reward_groups"],
    )


def distill_config(r: dict[str, Any]) -> Any:
    from tinker_cookbook.distillation import train_on_policy
    from tinker_cookbook.distillation.datasets import DistillationDatasetConfig, TeacherConfig

    ds = DistillationDatasetConfig(
        dataset_builder=dataset_builder(r),
        teacher_config=TeacherConfig(
            base_model=r["teacher_model"], load_checkpoint_path=r.get("teacher_checkpoint")
        ),
        groups_per_batch=r["batch_size"],
    )
    return train_on_policy.Config(
        learning_rate=r["learning_rate"],
        dataset_configs=[ds],
        model_name=r["model_name"],
        recipe_name=RECIPE_NAME,
        renderer_name=r["renderer_name"],
        max_tokens=r["max_tokens"],
        temperature=r["temperature"],
        lora_rank=r["lora_rank"],
        kl_penalty_coef=r["kl_penalty_coef"],
        kl_discount_factor=r["kl_discount_factor"],
        loss_fn=r["loss_fn"],
        log_path=r["log_path"],
        eval_every=r["eval_every"],
        save_every=r["save_every"],
        max_steps=r.get("max_steps"),
        wandb_project=r.get("wandb_project"),
        wandb_name=r.get("wandb_name"),
        base_url=r.get("base_url"),
        load_checkpoint_path=r.get("load_checkpoint_path"),
    )


def run(r: dict[str, Any]) -> None:
    """Start the cookbook loop (blocking)."""
    import asyncio

    if r["kind"] == "distill":
        from tinker_cookbook.distillation import train_on_policy

        asyncio.run(train_on_policy.main(distill_config(r)))
    else:
        from tinker_cookbook.rl import train

        asyncio.run(train.main(rl_config(r)))


def _fail(msg: str, code: int = 2) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


def _start(r: dict[str, Any], dry_run: bool) -> None:
    if dry_run:
        typer.echo(json.dumps(r, indent=2, sort_keys=True, default=str))
        raise typer.Exit(0)
    if not api_key_present():
        _fail("TINKER_API_KEY is not set: export your Tinker API key (or use --dry-run to check the config)")
    try:
        import tinker
        import tinker_cookbook  # noqa: F401
    except ImportError:
        _fail("tinker-cookbook is not installed: pip install 'rtlreward[tinker]'")
    try:
        run(r)
    except (tinker.AuthenticationError, tinker.PermissionDeniedError) as exc:
        _fail(f"the Tinker service refused the API key ({exc}): check TINKER_API_KEY and TINKER_PROJECT_ID")
    except tinker.APIConnectionError as exc:
        _fail(
            f"cannot reach the Tinker service ({exc}): check the network and --base-url / TINKER_BASE_URL", 1
        )
    except tinker.TinkerError as exc:  # e.g. a malformed key: the SDK's message says what is wrong
        _fail(f"Tinker: {exc}", 1)


# `--dataset/-d` before DATASET became positional (as in every other command): still read, not shown.
DATASET_ALIAS = typer.Option(None, "--dataset", "-d", hidden=True)


def _common(opts: dict[str, Any]) -> dict[str, Any]:
    """The options every train command resolves alike: DATASET (positional, or the old --dataset), and the
    profile and executor from the flags, else the project config (rtlreward.toml), else shaped / local."""
    from rtlreward.config import ConfigError, load_config

    opts.pop("dry_run")
    alias = opts.pop("dataset_opt", None)
    if opts.get("dataset") and alias and alias != opts["dataset"]:
        _fail(f"two datasets given ({opts['dataset']} and --dataset {alias}): give DATASET once")
    opts["dataset"] = opts.get("dataset") or alias
    if not opts["dataset"]:
        _fail("give the DATASET to train on (a name such as cvdp or verilog-eval, or a path)")
    try:
        cfg = load_config()
    except ConfigError as exc:
        _fail(str(exc))
    opts["profile"] = cfg.pick_profile(opts.get("profile"))
    opts["executor"] = cfg.pick_executor(opts.get("executor"))
    return opts


def register(train_app: typer.Typer) -> None:
    """Add `rl` and `distill` to the shared `train` group. typer reads each signature, so the options shared by
    both commands are spelled out in each."""

    @train_app.command("rl")
    def train_rl(
        dataset: str | None = typer.Argument(
            None,
            help="dataset name (cvdp, verilog-eval, rtllm, folder) "
            "or a path a dataset plugin recognises; tasks:FILE.jsonl for exported tasks",
        ),
        dataset_opt: str | None = DATASET_ALIAS,
        source: str | None = typer.Option(None, help="where a named dataset reads from"),
        task_ids: str | None = typer.Option(None, help="comma-separated task ids to train on"),
        limit: int | None = typer.Option(None, help="use only the first N tasks"),
        health: str | None = typer.Option(
            None, help="a `rtlreward tasks check --out` report: broken tasks are skipped, limits calibrated"
        ),
        keep_broken: bool = typer.Option(False, help="with --health: train on broken tasks too"),
        model: str = typer.Option(DEFAULTS["model_name"], "--model", help="base model to train"),
        renderer: str | None = typer.Option(None, help="cookbook renderer (default: by model family)"),
        batch_size: int = typer.Option(DEFAULTS["batch_size"], help="problems per batch"),
        group_size: int = typer.Option(DEFAULTS["group_size"], help="samples per problem"),
        learning_rate: float = typer.Option(DEFAULTS["learning_rate"], help="LoRA learning rate"),
        lora_rank: int = typer.Option(DEFAULTS["lora_rank"]),
        max_tokens: int = typer.Option(DEFAULTS["max_tokens"], help="max tokens per reply"),
        temperature: float = typer.Option(DEFAULTS["temperature"]),
        profile: str | None = typer.Option(
            None,
            "--profile",
            "-p",
            help="reward profile: shaped (default, or the project config's), seed (the original experiments' "
            "reward), strict, normalized or a TOML path",
        ),
        executor: str | None = typer.Option(
            None, "--executor", "-x", help="where the evaluator runs commands: local (default), docker"
        ),
        max_prompt_tokens: int = typer.Option(
            DEFAULTS["max_prompt_tokens"], help="cut long specs (not the instruction) to this many tokens"
        ),
        test_fraction: float = typer.Option(
            DEFAULTS["test_fraction"], help="hold out this fraction for eval"
        ),
        test_size: int = typer.Option(0, help="hold out this many tasks (overrides --test-fraction)"),
        eval_dataset: str | None = typer.Option(
            None,
            help="a held-out dataset evaluated every --eval-every steps (e.g. a corpus's test split); "
            "overrides --test-fraction",
        ),
        curriculum: bool = typer.Option(False, help="easy tasks first, then medium, then hard"),
        keep_order: bool = typer.Option(
            False, help="train in the dataset's own order (a `rtlreward corpus curriculum` schedule)"
        ),
        seed: int = typer.Option(DEFAULTS["seed"]),
        epochs: int = typer.Option(1, help="passes over the training tasks"),
        max_steps: int | None = typer.Option(None, help="stop after this many batches"),
        eval_every: int = typer.Option(DEFAULTS["eval_every"]),
        save_every: int = typer.Option(DEFAULTS["save_every"]),
        loss_fn: str = typer.Option("importance_sampling"),
        kl_penalty_coef: float = typer.Option(0.0, help="KL penalty against the base model"),
        remove_constant_reward_groups: bool = typer.Option(False),
        log_path: str | None = typer.Option(
            None, help="run folder (metrics.jsonl, checkpoints); an existing run there is resumed"
        ),
        load_checkpoint_path: str | None = typer.Option(None, help="start from these weights"),
        wandb_project: str | None = typer.Option(None),
        wandb_name: str | None = typer.Option(None),
        base_url: str | None = typer.Option(None, help="Tinker service URL override"),
        agentic: bool = typer.Option(False, help="multi-turn episodes with a bash tool in a /code sandbox"),
        refine: bool = typer.Option(False, help="multi-turn refinement with the evaluator's feedback"),
        max_turns: int = typer.Option(AGENTIC_DEFAULTS["max_turns"], help="agentic: turns per episode"),
        command_timeout: float = typer.Option(
            AGENTIC_DEFAULTS["command_timeout"], help="agentic: seconds per command"
        ),
        output_budget: int = typer.Option(
            AGENTIC_DEFAULTS["output_budget"], help="agentic: characters of command output shown"
        ),
        sandbox: str = typer.Option(AGENTIC_DEFAULTS["sandbox"], help="agentic: auto, docker or local"),
        sandbox_image: str | None = typer.Option(None, help="agentic: Docker image"),
        max_trajectory_tokens: int | None = typer.Option(
            None, help="agentic: context budget of a whole episode (an episode over it ends)"
        ),
        refine_turns: int = typer.Option(3, help="refine: tries per episode"),
        refine_reward: str = typer.Option("final", help="refine: final, best or improvement"),
        dry_run: bool = typer.Option(False, "--dry-run", help="print the resolved config as JSON and exit"),
    ) -> None:
        """Reinforcement learning with tinker-cookbook, rewarded by rtlreward."""
        opts = _common(dict(locals()))
        opts["model_name"] = opts.pop("model")
        opts["renderer_name"] = opts.pop("renderer")
        try:
            r = resolve("rl", **opts)
        except ValueError as exc:
            _fail(str(exc))
        _start(r, dry_run)

    @train_app.command("distill")
    def train_distill(
        dataset: str | None = typer.Argument(None, help="dataset name or path (as for train rl)"),
        dataset_opt: str | None = DATASET_ALIAS,
        teacher: str = typer.Option(
            DISTILL_DEFAULTS["teacher_model"], help="teacher model (same tokenizer family as the student)"
        ),
        teacher_checkpoint: str | None = typer.Option(None, help="teacher weights to load"),
        kl_penalty_coef: float = typer.Option(
            DISTILL_DEFAULTS["kl_penalty_coef"], help="weight of the teacher's reverse KL"
        ),
        kl_discount_factor: float = typer.Option(DISTILL_DEFAULTS["kl_discount_factor"]),
        source: str | None = typer.Option(None),
        task_ids: str | None = typer.Option(None),
        limit: int | None = typer.Option(None),
        health: str | None = typer.Option(None, help="a task health report (as for train rl)"),
        keep_broken: bool = typer.Option(False, help="with --health: train on broken tasks too"),
        model: str = typer.Option(DEFAULTS["model_name"], "--model", help="student model"),
        renderer: str | None = typer.Option(None),
        batch_size: int = typer.Option(DEFAULTS["batch_size"]),
        group_size: int = typer.Option(DEFAULTS["group_size"]),
        learning_rate: float = typer.Option(DEFAULTS["learning_rate"]),
        lora_rank: int = typer.Option(DEFAULTS["lora_rank"]),
        max_tokens: int = typer.Option(DEFAULTS["max_tokens"]),
        temperature: float = typer.Option(DEFAULTS["temperature"]),
        profile: str | None = typer.Option(None, "--profile", "-p", help="reward profile (as for train rl)"),
        executor: str | None = typer.Option(None, "--executor", "-x", help="local (default), docker"),
        max_prompt_tokens: int = typer.Option(DEFAULTS["max_prompt_tokens"]),
        test_fraction: float = typer.Option(DEFAULTS["test_fraction"]),
        test_size: int = typer.Option(0),
        curriculum: bool = typer.Option(False),
        seed: int = typer.Option(DEFAULTS["seed"]),
        epochs: int = typer.Option(1),
        max_steps: int | None = typer.Option(None),
        eval_every: int = typer.Option(DEFAULTS["eval_every"]),
        save_every: int = typer.Option(DEFAULTS["save_every"]),
        loss_fn: str = typer.Option("importance_sampling"),
        log_path: str | None = typer.Option(None),
        load_checkpoint_path: str | None = typer.Option(None),
        wandb_project: str | None = typer.Option(None),
        wandb_name: str | None = typer.Option(None),
        base_url: str | None = typer.Option(None),
        agentic: bool = typer.Option(False),
        refine: bool = typer.Option(False),
        max_turns: int = typer.Option(AGENTIC_DEFAULTS["max_turns"]),
        command_timeout: float = typer.Option(AGENTIC_DEFAULTS["command_timeout"]),
        output_budget: int = typer.Option(AGENTIC_DEFAULTS["output_budget"]),
        sandbox: str = typer.Option(AGENTIC_DEFAULTS["sandbox"]),
        sandbox_image: str | None = typer.Option(None),
        max_trajectory_tokens: int | None = typer.Option(
            None, help="agentic: context budget of a whole episode (an episode over it ends)"
        ),
        refine_turns: int = typer.Option(3),
        refine_reward: str = typer.Option("final"),
        dry_run: bool = typer.Option(False, "--dry-run"),
    ) -> None:
        """On-policy distillation: task reward plus the teacher's per-token KL."""
        opts = _common(dict(locals()))
        opts["model_name"] = opts.pop("model")
        opts["renderer_name"] = opts.pop("renderer")
        opts["teacher_model"] = opts.pop("teacher")
        opts["remove_constant_reward_groups"] = False
        try:
            r = resolve("distill", **opts)
        except ValueError as exc:  # TokenizerMismatch included
            _fail(str(exc))
        _start(r, dry_run)
