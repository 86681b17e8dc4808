"""TurnBatch: the per-turn rows of one rollout, with their next-turn links and bootstrap prompts.

One row is one agent turn: the prompt the model saw, the tokens it wrote, the env's reward for the executed action
and whether the episode ended there. Rows of the same episode are linked (``next_row``) so that the dual-discount GAE
carries credit across turns; a row whose next turn is not in the batch but whose episode goes on (the rollout
stopped, or a time limit cut the episode) carries a *bootstrap prompt*, the prompt of state ``s_{t+1}``, whose
critic value ``V(s_{t+1})`` stands in for the missing turn.

Plain lists and tensors only: the trainer turns :meth:`TurnBatch.to_tensors` into verl's DataProto.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from verlog.algorithms.dual_gae import link_turns  # the one definition of row links (also imported from here)
from verlog.prompting.memory import prompt_metrics


@dataclass
class TurnRow:
    """One agent turn.

    Attributes:
        slot: env slot index.
        episode_id: unique id of the episode (``"<run>-s<slot>-e<count>"``).
        turn_index: index of this turn in its episode (0 = first action).
        prompt_ids: the prompt's token ids (chat template applied).
        response_ids: the tokens the model wrote (the end-of-turn token included when it stopped there).
        response_logprobs: log-probabilities of ``response_ids`` under the rollout policy, or None.
        reward: env reward of the executed action (format penalty included).
        terminated: the episode truly ended at this turn (no bootstrap).
        truncated: the episode was cut at this turn (time limit or env failure; bootstrap from the final state).
        next_row: index in the batch of the same episode's next turn, or -1.
        bootstrap_prompt_ids: prompt of ``s_{t+1}`` when ``next_row == -1`` and not ``terminated``, else None.
        bootstrap_images: the images that prompt shows, in prompt order (empty for text; the critic's bootstrap
            value reads them with it).
        action: the action the env executed; ``action_valid`` whether the model's text named a valid action.
        env_error: the env failure that cut the episode here, or None.
        seed: the env seed the episode was reset with (None: reset unseeded or restored from a saved state).
        observation: the current observation the prompt showed; ``response_text`` the decoded response (what the
            env got); ``memory_turns`` the past turns the prompt held (fewer than the memory's when the prompt budget
            dropped some); ``observation_truncated`` whether the budget shortened an observation; ``success`` the
            env's success flag on an episode's last turn (None on other turns); ``frame`` the observation's RGB
            image when the env renders one (tapes; never sent to verl).
        group_id: the episode's group in group rollouts (episodes started from one seed in one iteration), else "".
        anchor: the observation text the turn started from, in group rollouts (GiGPO's anchor state), else "".
        trained: the row enters the loss; False for idle rows and for the turns of an episode that did not end
            within the batch (group rollouts), whose response mask is then all 0.
        idle: a placeholder row of a slot whose episode already ended in this iteration (group rollouts): no model
            call, no env step, a one-token prompt and response outside the loss; left out of the rollout metrics.
        task: the episode's task family in multi-task training (``env.tasks``), else "".
        policy_versions: the policy versions that wrote the response, ``(version, tokens)`` segments in order
            (:attr:`verlog.rollout.generator.Generation.versions`), or None when unknown.
        images: the images the prompt showed, in prompt order ([H, W, 3] uint8 each; one per ``<|image_pad|>`` run
            of ``prompt_ids``), sent with it to the model; the trainer's ``multi_modal_inputs`` (empty for text).
    """

    slot: int
    episode_id: str
    turn_index: int
    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float] | None
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    next_row: int = -1
    bootstrap_prompt_ids: list[int] | None = None
    action: str = ""
    action_valid: bool = True
    env_error: str | None = None
    generation_failed: bool = False
    seed: int | None = None
    observation: str = ""
    response_text: str = ""
    memory_turns: int | None = None
    observation_truncated: bool = False
    success: bool | None = None
    frame: Any = field(default=None, repr=False)
    group_id: str = ""
    anchor: str = ""
    trained: bool = True
    idle: bool = False
    task: str = ""
    policy_versions: tuple[tuple[int, int], ...] | None = None
    images: list[Any] = field(default_factory=list, repr=False)
    bootstrap_images: list[Any] = field(default_factory=list, repr=False)

    @property
    def oldest_version(self) -> int | None:
        """The oldest policy version among the response's tokens (None when unknown)."""
        return min(v for v, _ in self.policy_versions) if self.policy_versions else None

    @property
    def prompt_size(self) -> PromptRecord:
        """The prompt's size and what the budget did to it (:func:`verlog.prompting.memory.prompt_metrics` reads it)."""
        return PromptRecord(len(self.prompt_ids), self.memory_turns or 0, self.observation_truncated)


class PromptRecord(NamedTuple):
    """A row's prompt size: tokens, past turns kept, whether an observation was shortened."""

    num_tokens: int
    turns_kept: int
    truncated_observation: bool


@dataclass
class EpisodeStats:
    """Statistics of one finished episode."""

    episode_id: str
    slot: int
    ret: float
    length: int
    success: bool
    progression: float
    valid_action_ratio: float
    prompt_tokens: float
    response_tokens: float
    truncated: bool
    env_error: bool
    seed: int | None = None  # the env seed the episode was reset with (None: unseeded or restored from a state)
    task: str = ""  # the episode's task family in multi-task training, else ""


@dataclass
class TurnBatch:
    """The rows of one rollout and the episodes that finished during it.

    ``group_size`` is set for group rollouts (whole episodes per iteration, slots in groups of that size).
    ``timing`` is what the collector that built the batch measured while it did (:mod:`verlog.rollout.collectors`):
    ``timing_s/rollout_generate`` and ``timing_s/rollout_env`` (seconds of generation and of env steps), and for a
    pipelined rollout ``timing_s/rollout_overlap`` and ``rollout/pipelined``; the trainer logs them with
    :meth:`metrics`.
    """

    rows: list[TurnRow] = field(default_factory=list)
    episodes: list[EpisodeStats] = field(default_factory=list)
    generation_retries: int = 0
    group_size: int | None = None
    timing: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rows)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickling: a batch pickled before ``timing`` existed (rows collected ahead, in an older checkpoint) gets
        an empty one."""
        self.__dict__.update({"timing": {}, **state})

    def link_rows(self) -> None:
        """Set every row's ``next_row`` (:func:`link_turns`)."""
        links = link_turns(
            [r.episode_id for r in self.rows],
            [r.turn_index for r in self.rows],
            [r.terminated or r.truncated for r in self.rows],
        )
        for row, nxt in zip(self.rows, links):
            row.next_row = nxt

    def bootstrap_rows(self) -> list[int]:
        """Indices of rows that need a bootstrap value ``V(s_{t+1})``."""
        return [i for i, r in enumerate(self.rows) if r.bootstrap_prompt_ids is not None]

    def to_tensors(self, pad_token_id: int, max_prompt_tokens: int, max_response_tokens: int) -> dict[str, Any]:
        """Padded tensors of the rows, the layout verl's PPO workers expect.

        Returns a dict with:
            prompts ``[B, P]`` left-padded, responses ``[B, R]`` right-padded, response_mask ``[B, R]`` (1 = a token
            the model wrote; 0 on every token of an untrained row, which is still attended), input_ids
            ``[B, P+R]``, attention_mask ``[B, P+R]``, rollout_log_probs ``[B, R]`` (0 where unknown), rm_scores
            ``[B, R]`` (the reward on the last response token), terminated ``[B]`` bool, next_row ``[B]`` long,
            where ``P = max_prompt_tokens`` and ``R = max_response_tokens``.
        """
        b = len(self.rows)
        prompts = torch.full((b, max_prompt_tokens), pad_token_id, dtype=torch.long)
        prompt_mask = torch.zeros((b, max_prompt_tokens), dtype=torch.long)
        responses = torch.full((b, max_response_tokens), pad_token_id, dtype=torch.long)
        response_mask = torch.zeros((b, max_response_tokens), dtype=torch.long)
        response_attention = torch.zeros((b, max_response_tokens), dtype=torch.long)
        logprobs = torch.zeros((b, max_response_tokens), dtype=torch.float32)
        scores = torch.zeros((b, max_response_tokens), dtype=torch.float32)
        for i, row in enumerate(self.rows):
            p = row.prompt_ids[-max_prompt_tokens:]
            if len(row.prompt_ids) > max_prompt_tokens:
                raise ValueError(
                    f"row {i} has a prompt of {len(row.prompt_ids)} tokens, over max_prompt_tokens={max_prompt_tokens}"
                )
            r = row.response_ids[:max_response_tokens]
            if p:
                prompts[i, max_prompt_tokens - len(p) :] = torch.tensor(p, dtype=torch.long)
                prompt_mask[i, max_prompt_tokens - len(p) :] = 1
            if r:
                responses[i, : len(r)] = torch.tensor(r, dtype=torch.long)
                response_attention[i, : len(r)] = 1
                if not row.trained:  # attended, but outside the loss: no mask, no reward, no log-probs
                    continue
                response_mask[i, : len(r)] = 1
                if row.response_logprobs is not None:
                    lp = row.response_logprobs[: len(r)]
                    logprobs[i, : len(lp)] = torch.tensor(lp, dtype=torch.float32)
                scores[i, len(r) - 1] = float(row.reward)
        return {
            "prompts": prompts,
            "responses": responses,
            "response_mask": response_mask,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": torch.cat([prompt_mask, response_attention], dim=1),
            "rollout_log_probs": logprobs,
            "rm_scores": scores,
            "terminated": torch.tensor([r.terminated for r in self.rows], dtype=torch.bool),
            "next_row": torch.tensor([r.next_row for r in self.rows], dtype=torch.long),
        }

    def metrics(self) -> dict[str, float]:
        """Rollout and episode statistics, namespaced ``env/`` and ``rollout/``."""
        out: dict[str, float] = {}
        rows = [r for r in self.rows if not r.idle]
        if self.group_size is not None:
            out["rollout/idle_rows"] = float(len(self.rows) - len(rows))
            out["rollout/unfinished_rows"] = float(sum(not r.trained for r in rows))
        if rows:
            out["rollout/turns"] = float(len(rows))
            out["rollout/valid_action_ratio"] = sum(r.action_valid for r in rows) / len(rows)
            out["rollout/turn_reward_mean"] = sum(r.reward for r in rows) / len(rows)
            out.update(prompt_metrics([r.prompt_size for r in rows]))
            rlens = [len(r.response_ids) for r in rows]
            out["rollout/response_tokens_mean"] = sum(rlens) / len(rlens)
            out["rollout/response_tokens_max"] = float(max(rlens))
            out["rollout/env_errors"] = float(sum(r.env_error is not None for r in rows))
            out["rollout/generation_failures"] = float(sum(r.generation_failed for r in rows))
            out["rollout/generation_retries"] = float(self.generation_retries)
        eps = self.episodes
        out["env/episodes"] = float(len(eps))
        if eps:
            n = len(eps)
            out["env/return_mean"] = sum(e.ret for e in eps) / n
            out["env/length_mean"] = sum(e.length for e in eps) / n
            out["env/success_rate"] = sum(e.success for e in eps) / n
            out["env/progression_mean"] = sum(e.progression for e in eps) / n
            out["env/valid_action_ratio"] = sum(e.valid_action_ratio for e in eps) / n
            out["env/truncated_ratio"] = sum(e.truncated for e in eps) / n
            out["env/prompt_tokens_mean"] = sum(e.prompt_tokens for e in eps) / n
            out["env/response_tokens_mean"] = sum(e.response_tokens for e in eps) / n
        return out
