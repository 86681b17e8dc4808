"""An expert for BabyAI-Text: minigrid's BabyAI bot, answering with our text action names."""

from __future__ import annotations

from minigrid.utils.baby_ai_bot import BabyAIBot

from envs.babyai.describe import ACTIONS
from envs.babyai.env import BabyAITextEnv
from envs.errors import EnvStateError


class BabyAIExpert:
    """Suggests the next text action for a :class:`BabyAITextEnv` episode.

    Build it right after ``env.reset()``; then alternate ``action = expert.next_action()`` and ``env.step(action)``.
    The bot assumes its suggestion was taken; pass what was actually executed to ``next_action(taken=...)`` when
    another policy acts (as in DAgger).

    Args:
        env: a BabyAITextEnv that has just been reset.
    """

    def __init__(self, env: BabyAITextEnv) -> None:
        if not isinstance(env, BabyAITextEnv):
            raise TypeError(f"BabyAIExpert needs a BabyAITextEnv, got {type(env).__name__}")
        if not env.level_ready:
            raise EnvStateError("build BabyAIExpert after env.reset(): the bot reads the episode's instructions")
        self.env = env
        self._bot = BabyAIBot(env.level)

    def next_action(self, taken: str | None = None) -> str:
        """The bot's next action as a text action (``env.default_action`` if the bot thinks it is done).

        Args:
            taken: the text action executed since the previous call, if it was not the bot's suggestion.
        """
        index = self._bot.replan(None if taken is None else ACTIONS.index(taken))
        index = int(index)
        return ACTIONS[index] if index < len(ACTIONS) else self.env.default_action
