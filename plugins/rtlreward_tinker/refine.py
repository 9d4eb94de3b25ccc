"""Refinement episodes: one file, several tries, the evaluator's diagnostics as the next user message.

After a reply that does not pass, the failing stages' diagnostics and `Reward.feedback()` become the next user
turn, and the model answers again with the whole corrected file. How a turn is rewarded is a choice:

- `final`: only the last reply counts (its total, given on the last turn);
- `best`: the best total over the episode, given on the last turn;
- `improvement`: every turn gets the change of the total since the previous turn (the first turn its total),
  so the episode's return is still the final total but each fix is credited where it happened.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tinker_cookbook.rl.message_env import MessageEnv, MessageStepResult
from tinker_cookbook.rl.types import Env

from rtlreward.model import Candidate, Reward, Task
from rtlreward_tinker.base import GroupBuilder, get_engine, message_env_adapter, reward_metrics
from rtlreward_tinker.prompts import prompt_for

REWARD_MODES = ("final", "best", "improvement")
MAX_DIAGNOSTICS = 20


def feedback_message(reward: Reward) -> str:
    """What the model sees after a failing reply: per failing stage, its diagnostics, then the stage feedback."""
    lines = [f"Your answer scored {reward.total:.3g} of {reward.max_total:.3g} and does not pass yet."]
    shown = 0
    for name, result in reward.stages.items():
        if result.passed or str(result.status) == "skipped":
            continue
        lines.append(f"[{name}] {result.status}")
        for diag in result.diagnostics:
            if shown >= MAX_DIAGNOSTICS:
                break
            lines.append(f"  {diag}")
            shown += 1
    fb = reward.feedback()
    if fb:
        lines += ["", fb]
    lines += ["", "Fix the problems and reply with the complete corrected file(s)."]
    return "\n".join(lines)


class RefineMessageEnv(MessageEnv):
    def __init__(
        self,
        task: Task,
        messages: list[dict[str, Any]],
        *,
        profile: str,
        executor: str,
        max_turns: int = 3,
        reward_mode: str = "final",
    ) -> None:
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"unknown refine reward {reward_mode!r}: use one of {', '.join(REWARD_MODES)}")
        self.task = task
        self.messages = list(messages)
        self.profile = profile
        self.executor = executor
        self.max_turns = max(1, max_turns)
        self.reward_mode = reward_mode
        self.turn = 0
        self.totals: list[float] = []
        self.last: Reward | None = None
        self.example_id = task.id

    async def initial_observation(self) -> list[dict[str, Any]]:
        return list(self.messages)

    async def score(self, text: str) -> Reward:
        engine = get_engine(self.profile, self.executor)
        (reward,) = await asyncio.to_thread(engine.score_batch, [(self.task, Candidate(text=text, sample=0))])
        return reward

    async def step(self, message: dict[str, Any]) -> MessageStepResult:
        from tinker_cookbook.renderers import get_text_content

        self.turn += 1
        text = get_text_content(message)
        reward = await self.score(text)
        previous = self.totals[-1] if self.totals else 0.0
        self.totals.append(float(reward.total))
        self.last = reward
        done = reward.passed or self.turn >= self.max_turns
        self.messages.append({"role": "assistant", "content": text})
        if self.reward_mode == "improvement":
            step_reward = float(reward.total) - previous
        elif done:
            step_reward = max(self.totals) if self.reward_mode == "best" else float(reward.total)
        else:
            step_reward = 0.0
        metrics = {f"refine/turn{self.turn}/total": float(reward.total)}
        if done:
            metrics.update(reward_metrics(reward))
            metrics.update(
                {
                    "refine/turns": float(self.turn),
                    "refine/best": max(self.totals),
                    "refine/first": self.totals[0],
                    "reward/total": step_reward if self.reward_mode != "improvement" else float(reward.total),
                }
            )
            return MessageStepResult(
                reward=step_reward, episode_done=True, next_messages=list(self.messages), metrics=metrics
            )
        self.messages.append({"role": "user", "content": feedback_message(reward)})
        return MessageStepResult(
            reward=step_reward, episode_done=False, next_messages=list(self.messages), metrics=metrics
        )


@dataclass(frozen=True)
class RefineGroupBuilder(GroupBuilder):
    max_turns: int = 3
    reward_mode: str = "final"

    async def make_envs(self) -> Sequence[Env]:
        renderer = self.renderer()
        messages, _ = prompt_for(self.task, renderer, self.max_prompt_tokens)
        return [
            message_env_adapter(
                renderer,
                RefineMessageEnv(
                    self.task,
                    messages,
                    profile=self.profile,
                    executor=self.executor,
                    max_turns=self.max_turns,
                    reward_mode=self.reward_mode,
                ),
                failed_parse_reward=0.0,
            )
            for _ in range(self.group_size)
        ]

    async def compute_group_rewards(
        self, trajectory_group: list[Any], env_group: Sequence[Env]
    ) -> list[tuple[float, dict[str, float]]]:
        return [(0.0, {}) for _ in trajectory_group]  # rewards come per turn
