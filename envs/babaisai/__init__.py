"""BabaIsAI: the rule-rewriting gridworld and its 40 BALROG tasks, registered as ``babaisai/<task>``.

- :class:`BabaIsAIEnv` plays one task with BALROG's text interface; ``envs.make("babaisai/goto_win")`` builds one.
- :func:`solve` plans a winning action list from an env's current state (for tests and demonstrations).
- :data:`TASKS` lists the 40 task ids in BALROG's order.
"""

from __future__ import annotations

import functools

from envs.babaisai.env import BabaIsAIEnv
from envs.babaisai.levels import TASKS, Level, generate
from envs.babaisai.solver import solve, solve_board
from envs.registry import register

__all__ = ["TASKS", "BabaIsAIEnv", "Level", "generate", "solve", "solve_board"]

for _task in TASKS:
    register(f"babaisai/{_task}", functools.partial(BabaIsAIEnv, _task))
