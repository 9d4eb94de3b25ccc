"""Multi-turn agentic episodes in the CVDP agentic layout, with one `execute_bash` tool.

Each episode gets its own sandbox holding `/code/docs`, `/code/rtl`, `/code/verif`, `/code/rundir` and
`/code/prompt.json` (the task's context files in place). The model's tool calls (Qwen `<tool_call>` JSON with
`arguments` or `args`, Harmony for gpt-oss, a fenced ```bash block as a fallback) run there with a per-command
time limit; their output, cut to a budget, is the next observation. The episode ends when the model answers
without a tool call, at `max_turns`, or on a parse error; then the sandbox is stopped (no agent process is
left to swap names while we read) and the task's harness scores the files the agent created or changed
(`Candidate(files=...)` through the Engine), the whole group in one batch.

Collected files never leave the sandbox by reference: `collect.collect_files` reads regular files only, inside
the workspace, through descriptors that never follow a link, within size and count budgets; what it skips is
in the episode's last step (`logs["collect/skipped"]`), in the reward metrics (`agent/collect_skipped`) and in
the log.

Sandbox: a Docker container per episode (`--network none`, memory/pids/cpu limits) when a Docker engine and the
image are there, else bubblewrap with the workspace bound at `/code` (read-only host, private /tmp, no network).
With neither, episodes are refused: model commands never run unsandboxed. The group builder releases every
sandbox in `cleanup()`, which is idempotent and never raises.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import uuid
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tinker_cookbook.rl.message_env import MessageEnv, MessageStepResult
from tinker_cookbook.rl.types import Env

from rtlreward.model import Candidate, Task
from rtlreward.stage import write_files
from rtlreward_tinker import toolcalls
from rtlreward_tinker.base import GroupBuilder, message_env_adapter, score_group
from rtlreward_tinker.collect import Budget, Collection, collect_files, make_tree_removable, root_identity
from rtlreward_tinker.prompts import task_messages

log = logging.getLogger("rtlreward.tinker")

LAYOUT_DIRS = ("docs", "rtl", "verif", "rundir")
CANDIDATE_DIRS = ("rtl", "verif", "docs")
MAX_OUTPUT = 1 << 20  # bytes of command output read back from a container

BASH_TOOL = {
    "name": toolcalls.TOOL_NAME,
    "description": "Run a bash command in the /code workspace and return its output (stdout and stderr).",
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "the bash command to run"}},
        "required": ["command"],
    },
}

DEFAULT_SYSTEM = (
    "You are a hardware design engineer working in a Linux shell. The project is in /code: the specification "
    "and other documents in /code/docs, RTL in /code/rtl, verification code in /code/verif, and /code/rundir "
    "for scratch work. Use the execute_bash tool to inspect files, write RTL, and compile or simulate it with "
    "iverilog/vvp. When the files are in place, reply with a short summary and no tool call."
)


class SandboxUnavailable(RuntimeError):
    """Neither Docker nor bubblewrap can isolate model commands here."""


class AgentSandbox(Protocol):
    root: Path  # the host folder seen as /code
    root_id: tuple[int, int]  # its (st_dev, st_ino) when made: the collection checks it is still that folder

    def run(self, command: str, timeout: float) -> tuple[str, int, bool]: ...

    def stop(self) -> None:
        """End every process of the agent; afterwards nothing writes the workspace any more."""

    def close(self) -> None: ...


def truncate_output(text: str, budget: int) -> str:
    """Head and tail of a long output: the start says what ran, the end says how it ended."""
    if budget <= 0 or len(text) <= budget:
        return text
    head = budget * 2 // 3
    tail = budget - head
    return f"{text[:head]}\n[... {len(text) - budget} characters of output cut ...]\n{text[-tail:]}"


def remove_tree(path: str) -> None:
    """Remove a sandbox folder even after the agent chmod-ed parts of it to 000; never raises, never follows a
    link the agent left (a chmod through `rtl/x -> ~/.ssh/id_rsa` would change a host file). Call it after the
    sandbox is stopped."""
    with contextlib.suppress(Exception):
        make_tree_removable(Path(path))
    shutil.rmtree(path, ignore_errors=True)


def prepare_workspace(root: Path, task: Task) -> None:
    """The CVDP agentic layout: context files in place, prompt.json with the task's prompt."""
    for d in LAYOUT_DIRS:
        (root / d).mkdir(parents=True, exist_ok=True)
    write_files(root, task.context)
    (root / "prompt.json").write_text(json.dumps({"prompt": task.prompt}, indent=2))


def collect_answer(
    root: Path, task: Task, identity: tuple[int, int] | None = None, budget: Budget | None = None
) -> Collection:
    """Text files the agent created or changed under rtl/, verif/ and docs/ (its answer, like CVDP's patch), read
    without following links and within the budget (see `collect`)."""
    return collect_files(root, CANDIDATE_DIRS, unchanged=task.context, budget=budget, identity=identity)


def changed_files(root: Path, task: Task) -> dict[str, str]:
    """The files of `collect_answer` alone."""
    return collect_answer(root, task).files


class BwrapSandbox:
    """The workspace bound at /code by the local executor's bubblewrap policy (host read-only, home folders and
    /run hidden, private /tmp, no network, own pid namespace, capabilities dropped), with its wall-clock limit
    (process-group kill), rlimits and scrubbed environment."""

    def __init__(self, task: Task, memory_mb: int = 4096) -> None:
        from rtlreward.sandbox.local import LocalExecutor

        with warnings.catch_warnings():  # without bwrap it warns; we refuse below instead of running unjailed
            warnings.simplefilter("ignore")
            self.executor = LocalExecutor()
        if not getattr(self.executor, "supports_binds", False):
            raise SandboxUnavailable(
                "bubblewrap is not usable here and no Docker sandbox was chosen: install bubblewrap "
                "(apt-get install bubblewrap) or run with --sandbox docker"
            )
        self.tmp = tempfile.mkdtemp(prefix="rtlreward-agent-")
        self.root = Path(self.tmp) / "code"
        self.root.mkdir()
        self.root_id = root_identity(self.root)
        prepare_workspace(self.root, task)
        self.memory_mb = memory_mb

    def run(self, command: str, timeout: float) -> tuple[str, int, bool]:
        from rtlreward.sandbox import Limits

        r = self.executor.run(
            ["bash", "-c", command],
            workspace=self.root,
            cwd=Path("/code"),
            binds={str(self.root): "/code"},
            env={"HOME": "/code", "TMPDIR": "/tmp"},
            limits=Limits(timeout=timeout, memory_mb=self.memory_mb),
        )
        return r.output, r.returncode, r.timed_out

    def stop(self) -> None:
        """Nothing to do: every command runs in its own PID namespace whose processes die with it."""

    def close(self) -> None:
        remove_tree(self.tmp)


class DockerSandbox:
    """A container per episode from the rtlreward sim image, under the docker executor's policy: no network,
    memory/pids/cpu limits, read-only root with a tmpfs /tmp, capabilities dropped, no-new-privileges, the
    caller's uid:gid, and the workspace bind-mounted read-write at /code."""

    def __init__(self, task: Task, image: str, memory_mb: int = 4096) -> None:
        self.docker = shutil.which("docker")
        if not self.docker:
            raise SandboxUnavailable("the docker CLI is not installed: install Docker or use --sandbox local")
        self.tmp = tempfile.mkdtemp(prefix="rtlreward-agent-")
        self.root = Path(self.tmp) / "code"
        self.root.mkdir()
        self.root_id = root_identity(self.root)
        prepare_workspace(self.root, task)
        # A name of our own, so a container whose start timed out can still be found and removed.
        self.name = f"rtlreward-agent-{uuid.uuid4().hex[:12]}"
        self.container: str | None = None
        argv = [
            self.docker,
            "run",
            "-d",
            "--rm",
            "--name",
            self.name,
            "--network",
            "none",
            "--memory",
            f"{memory_mb}m",
            "--memory-swap",
            f"{memory_mb}m",
            "--pids-limit",
            "512",
            "--cpus",
            "1",
            "--read-only",
            "--tmpfs",
            "/tmp:rw,exec,size=512m",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--user",
            f"{os.getuid()}:{os.getgid()}",
            "-v",
            f"{self.root}:/code",
            "-w",
            "/code",
            "-e",
            "HOME=/code",
            image,
            "sleep",
            "infinity",
        ]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.container = self.name  # it may still appear: remove it by name
            self.close()
            raise SandboxUnavailable(f"could not start the sandbox container: {exc}") from exc
        if r.returncode != 0:
            self.container = self.name
            self.close()
            raise SandboxUnavailable(
                f"could not start the sandbox container from {image}: {r.stderr.strip()}"
            )
        self.container = r.stdout.strip()

    def run(self, command: str, timeout: float) -> tuple[str, int, bool]:
        if not self.container:
            return "the sandbox is stopped", 125, False
        # `timeout` inside the container kills the command's process group; the host-side limit is a backstop.
        argv = [
            self.docker,
            "exec",
            "-w",
            "/code",
            self.container or "",
            "timeout",
            "-s",
            "KILL",
            str(max(1, round(timeout))),
            "bash",
            "-c",
            command,
        ]
        try:
            r = subprocess.run(argv, capture_output=True, timeout=timeout + 30)
        except subprocess.TimeoutExpired:
            return "", -9, True
        out = (r.stdout[:MAX_OUTPUT] + r.stderr[:MAX_OUTPUT]).decode(errors="replace")
        return out, r.returncode, r.returncode == 137

    def stop(self) -> None:
        """Remove the container: a command's background processes (`cmd &` survives `docker exec`) would go on
        writing the bind-mounted workspace while it is collected."""
        container, self.container = self.container, None
        if container and self.docker:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run([self.docker, "rm", "-f", container], capture_output=True, timeout=60)

    def close(self) -> None:
        self.stop()
        remove_tree(self.tmp)


def default_image() -> str:
    try:
        from rtlreward.sandbox.image import DEFAULT_TAG

        return os.environ.get("RTLREWARD_SIM_IMAGE") or DEFAULT_TAG
    except Exception:
        return os.environ.get("RTLREWARD_SIM_IMAGE") or "rtlreward-sim:latest"


def docker_image_present(image: str) -> bool:
    docker = shutil.which("docker")
    if not docker:
        return False
    try:
        r = subprocess.run([docker, "image", "inspect", image], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def make_sandbox(task: Task, kind: str = "auto", image: str | None = None) -> AgentSandbox:
    image = image or default_image()
    if kind == "docker" or (kind == "auto" and docker_image_present(image)):
        return DockerSandbox(task, image)
    if kind in ("auto", "local"):
        return BwrapSandbox(task)
    raise ValueError(f"unknown sandbox {kind!r}: use auto, docker or local")


_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


async def in_sandbox_pool(fn: Any, *args: Any) -> Any:
    """Run a blocking sandbox call on a pool of its own: a batch of episodes whose commands each wait up to the
    time limit must not starve the default executor the scoring and rendering threads use."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=64, thread_name_prefix="rtlreward-agent"
            )
    return await asyncio.get_running_loop().run_in_executor(_pool, fn, *args)


class AgenticMessageEnv(MessageEnv):
    """The conversation of one agentic episode; the sandbox is created on the first observation."""

    def __init__(
        self,
        task: Task,
        renderer: Any,
        *,
        max_turns: int = 50,
        command_timeout: float = 60.0,
        output_budget: int = 8000,
        sandbox: str = "auto",
        sandbox_image: str | None = None,
    ) -> None:
        self.task = task
        self.renderer = renderer
        self.max_turns = max_turns
        self.command_timeout = command_timeout
        self.output_budget = output_budget
        self.sandbox_kind = sandbox
        self.sandbox_image = sandbox_image
        self.sandbox: AgentSandbox | None = None
        self.messages: list[dict[str, Any]] = []
        self.turns = 0
        self.commands = 0
        self.timeouts = 0
        self.tool_errors = 0
        self.example_id = task.id
        self.collection: Collection | None = None

    async def initial_observation(self) -> list[dict[str, Any]]:
        self.sandbox = await in_sandbox_pool(make_sandbox, self.task, self.sandbox_kind, self.sandbox_image)
        chat = task_messages(
            self.task, "agentic"
        )  # CVDP: the record's system message + prompt + /code layout
        system = next((m["content"] for m in chat if m["role"] == "system"), "").strip() or DEFAULT_SYSTEM
        user = next((m["content"] for m in reversed(chat) if m["role"] == "user"), self.task.prompt)
        self.messages = [
            *self.renderer.create_conversation_prefix_with_tools([BASH_TOOL], system),
            {"role": "user", "content": user},
        ]
        return list(self.messages)

    async def run_command(self, command: str) -> str:
        assert self.sandbox is not None
        self.commands += 1
        output, rc, timed_out = await in_sandbox_pool(self.sandbox.run, command, self.command_timeout)
        output = truncate_output(output, self.output_budget)
        if timed_out:
            self.timeouts += 1
            output += f"\n[command timed out after {self.command_timeout:g}s and was killed]"
        elif rc != 0:
            output += f"\n[exit status {rc}]"
        return output or "[no output]"

    async def step(self, message: dict[str, Any]) -> MessageStepResult:
        from tinker_cookbook.renderers import ToolCall, get_text_content

        self.turns += 1
        text = get_text_content(message)
        calls = toolcalls.parse_message(message, text)
        assistant: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            # Re-rendered with canonical `arguments`, whatever shape the model used.
            assistant["tool_calls"] = [
                ToolCall(
                    id=f"call_{self.turns}_{i}",
                    function=ToolCall.FunctionBody(
                        name=toolcalls.TOOL_NAME, arguments=json.dumps({"command": c.command})
                    ),
                )
                for i, c in enumerate(calls)
            ]
        self.messages.append(assistant)
        if not calls:
            return await self._done("completed")
        for i, call in enumerate(calls):
            if call.error is not None:
                self.tool_errors += 1
                output = f"error: {call.error}"
            else:
                output = await self.run_command(call.command)
            self.messages.append(
                {
                    "role": "tool",
                    "name": toolcalls.TOOL_NAME,
                    "content": output,
                    "tool_call_id": f"call_{self.turns}_{i}",
                }
            )
        if self.turns >= self.max_turns:
            return await self._done("max_turns")
        return MessageStepResult(
            reward=0.0, episode_done=False, next_messages=list(self.messages), metrics={}
        )

    async def _done(self, reason: str) -> MessageStepResult:
        collection = await in_sandbox_pool(self.collect)
        logs: dict[str, str | int | float] = {}
        if collection.skipped:
            logs["collect/skipped"] = collection.report()
        return MessageStepResult(
            reward=0.0,
            episode_done=True,
            next_messages=list(self.messages),
            metrics={**self.episode_metrics(), f"stop/{reason}": 1.0},
            logs=logs,
        )

    def episode_metrics(self) -> dict[str, float]:
        out = {
            "agent/turns": float(self.turns),
            "agent/commands": float(self.commands),
            "agent/timeouts": float(self.timeouts),
            "agent/tool_errors": float(self.tool_errors),
        }
        if self.collection is not None:
            out["agent/collect_files"] = float(len(self.collection.files))
            out["agent/collect_skipped"] = float(len(self.collection.refused))
            out["agent/collect_incomplete"] = float(not self.collection.complete)
        return out

    def collect(self) -> Collection:
        """The agent's answer, read once: the sandbox is stopped first, then its workspace collected (blocking;
        run it on the sandbox pool). Skips are logged with the task id."""
        if self.collection is None:
            if self.sandbox is None:
                self.collection = Collection()
            else:
                self.sandbox.stop()
                self.collection = collect_answer(self.sandbox.root, self.task, self.sandbox.root_id)
                if self.collection.refused:
                    log.warning(
                        "rtlreward: task %s: %d workspace entries not collected:\n%s",
                        self.task.id,
                        len(self.collection.refused),
                        self.collection.report(),
                    )
        return self.collection

    def candidate_files(self) -> dict[str, str]:
        return self.collect().files

    def close(self) -> None:
        sandbox, self.sandbox = self.sandbox, None
        if sandbox is not None:
            sandbox.close()


@dataclass(frozen=True)
class AgenticGroupBuilder(GroupBuilder):
    max_turns: int = 50
    command_timeout: float = 60.0
    output_budget: int = 8000
    sandbox: str = "auto"
    sandbox_image: str | None = None
    max_trajectory_tokens: int | None = None  # the whole episode's context budget (None: the service's limit)

    def _message_envs(self) -> list[AgenticMessageEnv]:
        # Kept per builder instance (not pickled state: set after construction via object.__setattr__).
        envs = self.__dict__.get("_live_envs")
        if envs is None:
            envs = []
            object.__setattr__(self, "_live_envs", envs)
        return envs

    async def make_envs(self) -> Sequence[Env]:
        renderer = self.renderer()
        out = []
        for _ in range(self.group_size):
            menv = AgenticMessageEnv(
                self.task,
                renderer,
                max_turns=self.max_turns,
                command_timeout=self.command_timeout,
                output_budget=self.output_budget,
                sandbox=self.sandbox,
                sandbox_image=self.sandbox_image,
            )
            self._message_envs().append(menv)
            out.append(
                message_env_adapter(
                    renderer, menv, failed_parse_reward=0.0, max_trajectory_tokens=self.max_trajectory_tokens
                )
            )
        return out

    async def compute_group_rewards(
        self, trajectory_group: list[Any], env_group: Sequence[Env]
    ) -> list[tuple[float, dict[str, float]]]:
        menvs = [getattr(e, "message_env", None) for e in env_group]
        # Episodes cut short by the cookbook (a parse error, the context budget) were not collected yet.
        files = [await in_sandbox_pool(m.candidate_files) if m else {} for m in menvs]
        candidates = [Candidate(files=f, sample=i) for i, f in enumerate(files)]
        scored = await score_group(self.task, candidates, self.profile, self.executor)
        return [
            (r, {**m_, **(m.episode_metrics() if m else {})})
            for (r, m_), m in zip(scored, menvs, strict=True)
        ]

    async def cleanup(self) -> None:
        envs = self.__dict__.get("_live_envs") or []
        while envs:
            menv = envs.pop()
            try:
                await asyncio.shield(in_sandbox_pool(menv.close))
            except BaseException:  # cleanup must never raise, not even on cancellation
                log.warning("rtlreward: releasing an agent sandbox failed", exc_info=True)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_live_envs", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, v)


__all__ = [
    "AgenticGroupBuilder",
    "AgenticMessageEnv",
    "BwrapSandbox",
    "DockerSandbox",
    "collect_answer",
    "make_sandbox",
    "truncate_output",
]
