"""Every hook rtlreward calls, in one place. The docstrings are the plugin author's documentation.

A plugin is a module (or object) with functions named like these hooks and decorated with
`rtlreward.hookimpl`, registered through the `rtlreward` entry-point group:

    [project.entry-points.rtlreward]
    my_stage = "my_package.my_module"

The `register_*` hooks follow the register-callback pattern: the hook receives a `register` function and calls it
once per thing it provides. rtlreward records which plugin registered what, so `rtlreward plugins` can list it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import typer

    from rtlreward.model import Candidate, Reward, StageResult, Task

hookspec = pluggy.HookspecMarker("rtlreward")


@hookspec
def rtlreward_register_stages(register: Any) -> None:
    """Register reward stages: `register(stage)` with an instance of `rtlreward.stage.Stage` (or any object with
    `name`, `version`, `requires` and `run(ctx) -> StageResult`, optionally `provides` and `needs`: a stage that
    extracts the answer's files from the raw reply declares `provides = ("files",)`, every other stage needs
    them unless it declares `needs = ()`). A stage name is unique; registering a name twice is an error that
    names both plugins. Weights belong to profiles, not stages."""


@hookspec
def rtlreward_register_combiners(register: Any) -> None:
    """Register combiners: `register(name, fn)` where `fn(results, profile, task) -> (total, max_total)` folds the
    stage results of one candidate into one reward. `passed` is the engine's (`profile.verdict_passed`), never a
    combiner's; an older combiner returning `(total, passed, max_total)` still works, its `passed` ignored."""


@hookspec
def rtlreward_register_profiles(register: Any) -> None:
    """Register named reward profiles: `register(name, path_or_dict)` (a TOML file or its parsed content)."""


@hookspec
def rtlreward_register_datasets(register: Any) -> None:
    """Register task sources: `register(name, dataset)` where `dataset.load(source, **filters)` yields `Task`s,
    and `dataset.detect(source) -> bool` says whether a path looks like this dataset (optional)."""


@hookspec
def rtlreward_register_harnesses(register: Any) -> None:
    """Register harness runners for the `tests` stage: `register(kind, runner)` where
    `runner.run(ctx) -> StageResult` runs a task whose `harness.kind == kind` (cocotb, cvdp, verilog-eval, ...)."""


@hookspec
def rtlreward_register_executors(register: Any) -> None:
    """Register executors: `register(name, factory)` where `factory(**options)` returns an
    `rtlreward.sandbox.Executor`. `local` is the default."""


@hookspec
def rtlreward_register_trainers(register: Any) -> None:
    """Register trainer integrations: `register(name, trainer)`; `trainer.description` is shown by
    `rtlreward plugins`. Trainers add their CLI through `rtlreward_register_commands`."""


@hookspec
def rtlreward_register_commands(app: typer.Typer) -> None:
    """Add commands to the CLI. Use `rtlreward.cli.command_group(app, "train")` to share a sub-command group with
    other plugins."""


@hookspec
def rtlreward_stage_finished(task: Task, candidate: Candidate, result: StageResult) -> None:
    """Observer: a stage produced a result (also when it came from the cache). Must not raise."""


@hookspec
def rtlreward_reward_computed(task: Task, candidate: Candidate, reward: Reward) -> None:
    """Observer: a candidate's reward is final. Use for logging, progress and reward-hacking monitors."""


@hookspec(firstresult=True)
def rtlreward_audit_tasks(
    tasks: list[Task],
    profile: str,
    budget: int,
    attacks: tuple[str, ...],
    executor: str,
    jobs: int | None,
    progress: Any,
) -> dict[str, Any] | None:
    """Search `tasks` for unearned reward under `profile` (the `rtlreward audit` plugin implements it; docs/audit.md)
    and return its report (`{"profile": ..., "tasks": [...]}`), or None where no installed plugin audits. Lets other
    plugins (`tasks check --audit`) ask for an audit without importing the plugin that does it."""
