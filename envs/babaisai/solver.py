"""A planner for BabaIsAI boards: weighted A* over whole board states.

States are the board tuples of :mod:`envs.babaisai.world` (hashable, so duplicates are detected exactly) and
successors come from the game's own step function, so a plan found here replays exactly in the env. The heuristic
is goal-directed and not admissible (plans are short, not always shortest):

- when some object is WIN: the distance from a YOU object to the nearest WIN object, plus a detour through the
  blocks of a ``wall is stop`` rule when the two stand on opposite sides of a STOP divider;
- otherwise: the cheapest way to push a noun block, whose objects are on the board, into the free slot before an
  ``is win`` pair, walk there, then reach one of that noun's objects.

States where nothing is YOU are dead ends (the env would start a new level) and are not expanded.
"""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING

from envs.babaisai.world import (
    ACTIONS,
    IS_CODE,
    STOP,
    TEXT,
    WALL,
    WIN,
    WORD_NOUN_KIND,
    YOU,
    Cells,
    Rules,
    advance,
    parse_rules,
    word,
    you_cells,
)

if TYPE_CHECKING:
    from envs.babaisai.env import BabaIsAIEnv

WIN_WORD = word("win")
STOP_WORD = word("stop")
DEFAULT_NODE_LIMIT = 200_000
DEAD = 500
"""Heuristic value of a state from which the heuristic sees no way to a win (kept, but explored last)."""


class _Heuristic:
    """Goal distance estimates for one board size."""

    def __init__(self, cells: Cells, width: int) -> None:
        self.width = width
        self.height = len(cells) // width
        self.xs = [i % width for i in range(len(cells))]
        self.ys = [i // width for i in range(len(cells))]
        walls = [self.xs[i] for i, s in enumerate(cells) if any(c < TEXT and c >> 3 == WALL for c in s)]
        self.divider = max(set(walls), key=walls.count) if walls else None

    def dist(self, a: int, b: int) -> int:
        return abs(self.xs[a] - self.xs[b]) + abs(self.ys[a] - self.ys[b])

    def _crossing(self, a: int, b: int, stop_blocks: list[int]) -> int:
        """Extra cost of going from a to b when a STOP divider stands between them."""
        div = self.divider
        if div is None or not stop_blocks or (self.xs[a] - div) * (self.xs[b] - div) >= 0:
            return 0
        return 2 * min(self.dist(a, s) for s in stop_blocks) + 4

    def __call__(self, cells: Cells, rules: Rules) -> int | None:
        masks = rules.masks
        you: list[int] = []
        wins: list[int] = []
        kinds_on_board: dict[int, list[int]] = {}
        nouns: list[int] = []
        is_cells: list[int] = []
        width = self.width
        for i, stack in enumerate(cells):
            if not stack:
                continue
            top = stack[-1]
            if len(stack) > 1:  # covered objects count as targets: pushing the cover away uncovers them
                for code in stack[:-1]:
                    if code < TEXT:
                        kinds_on_board.setdefault(code >> 3, []).append(i)
            if top < TEXT:
                m = masks[top]
                if m & YOU:
                    you.append(i)
                if m & WIN:
                    wins.append(i)
                kinds_on_board.setdefault(top >> 3, []).append(i)
            elif top in WORD_NOUN_KIND:
                nouns.append(i)
            elif top == IS_CODE:
                is_cells.append(i)
        if not you:
            return None
        walls_stop = bool(masks[WALL << 3] & STOP)
        slots: list[tuple[int, int]] = []  # (cell, extra cost of clearing it)
        stop_blocks: list[int] = []
        xs, ys, last_x, last_y = self.xs, self.ys, self.width - 2, self.height - 2
        for i in is_cells:
            for before, after, on_edge in (
                (i - 1, i + 1, ys[i] in (1, last_y)),
                (i - width, i + width, xs[i] in (1, last_x)),
            ):
                b = cells[after][-1] if cells[after] else -1
                a = cells[before][-1] if cells[before] else -1
                if b == WIN_WORD:
                    if a == -1 or a < TEXT:
                        slots.append((before, 0))
                    elif on_edge:
                        continue  # a block in a slot along the border can only be pushed into the rule: dead slot
                    elif a not in WORD_NOUN_KIND:
                        slots.append((before, 4))  # another block sits there: push it out sideways first
                    elif WORD_NOUN_KIND[a] not in kinds_on_board:
                        slots.append((before, 6))  # a noun without objects sits there: push it out first
                elif walls_stop and b == STOP_WORD and WORD_NOUN_KIND.get(a) == WALL:
                    stop_blocks.extend((before, i, after))
        if wins:
            return min(self.dist(y, w) + self._crossing(y, w, stop_blocks) for y in you for w in wins)
        best: int | None = None
        for s, clear in slots:
            for n in nouns:
                targets = kinds_on_board.get(WORD_NOUN_KIND[cells[n][-1]])
                if not targets or n == s:
                    continue
                # A block against the border can only slide along it (nothing can stand behind it to push it off),
                # and any block between it and the slot on that line would be pushed into the slot first.
                if xs[n] in (1, last_x) and (xs[s] != xs[n] or self._blocked(cells, n, s, width)):
                    continue
                if ys[n] in (1, last_y) and (ys[s] != ys[n] or self._blocked(cells, n, s, 1)):
                    continue
                push = self.dist(n, s)
                approach = min(self.dist(y, n) + self._crossing(y, n, stop_blocks) for y in you)
                finish = min(self.dist(s, o) + self._crossing(s, o, stop_blocks) for o in targets)
                turns = 2 if self.xs[n] != self.xs[s] and self.ys[n] != self.ys[s] else 0
                cost = approach + 2 * push + turns + finish + clear + self._crossing(n, s, stop_blocks)
                if best is None or cost < best:
                    best = cost
        return DEAD if best is None else best

    @staticmethod
    def _blocked(cells: Cells, n: int, s: int, stride: int) -> bool:
        """Whether a text block stands strictly between cells n and s on a line of the given stride."""
        step = stride if s > n else -stride
        return any(cells[j] and cells[j][-1] >= TEXT for j in range(n + step, s, step))


def _plan_to(state: Cells, parents: dict[Cells, tuple[Cells | None, int]]) -> list[int]:
    """The actions that lead from the search's start to ``state``, following the parent links back."""
    plan: list[int] = []
    key: Cells | None = state
    while key is not None:
        parent, move = parents[key]
        if parent is not None:
            plan.append(move)
        key = parent
    return plan[::-1]


def solve_board(
    cells: Cells,
    width: int,
    max_len: int,
    *,
    node_limit: int = DEFAULT_NODE_LIMIT,
    weight: float = 2.0,
) -> list[int] | None:
    """A winning list of action indices (1-4) of length <= ``max_len`` from ``cells``, or None.

    Args:
        cells: the board (see :mod:`envs.babaisai.world`).
        width: board width.
        max_len: longest plan accepted.
        node_limit: give up (None) after expanding this many states.
        weight: A* weight on the heuristic (1 is plain A*, larger is greedier and faster).
    """
    rules = parse_rules(cells, width)
    heuristic = _Heuristic(cells, width)
    h0 = heuristic(cells, rules)
    if h0 is None:
        return None
    counter = itertools.count()
    parents: dict[Cells, tuple[Cells | None, int]] = {cells: (None, 0)}
    best_g: dict[Cells, int] = {cells: 0}
    frontier: list[tuple[float, int, int, int, Cells, Rules]] = [(weight * h0, h0, next(counter), 0, cells, rules)]
    expanded = 0
    while frontier and expanded < node_limit:
        _, _, _, g, state, state_rules = heapq.heappop(frontier)
        if best_g.get(state, g) < g:
            continue
        expanded += 1
        if g >= max_len:
            continue
        for action in (1, 2, 3, 4):
            nxt, nxt_rules, won, lost = advance(state, state_rules, action, width)
            if won:
                return [*_plan_to(state, parents), action]
            if lost or nxt == state:
                continue
            if nxt in best_g and best_g[nxt] <= g + 1:
                continue
            h = heuristic(nxt, nxt_rules)
            if h is None:
                continue
            best_g[nxt] = g + 1
            parents[nxt] = (state, action)
            heapq.heappush(frontier, (g + 1 + weight * h, h, next(counter), g + 1, nxt, nxt_rules))
    return None


def solve(
    env: BabaIsAIEnv,
    max_steps: int | None = None,
    *,
    node_limit: int = DEFAULT_NODE_LIMIT,
) -> list[str] | None:
    """Action strings that win ``env`` from its current state within ``max_steps``, or None if none was found.

    Args:
        env: a reset BabaIsAIEnv (it is not modified).
        max_steps: longest plan accepted; defaults to the steps left in the episode.
        node_limit: give up after expanding this many states.
    """
    if env.level is None:
        raise RuntimeError("solve() needs a reset env: call env.reset(seed=...) first")
    limit = env.max_steps - env.episode_step if max_steps is None else max_steps
    plan = solve_board(env.cells, env.width, limit, node_limit=node_limit)
    return None if plan is None else [ACTIONS[a] for a in plan]


def shortest_plan(cells: Cells, width: int, max_len: int, *, node_limit: int = DEFAULT_NODE_LIMIT) -> list[int] | None:
    """A shortest winning list of action indices by breadth-first search (exact, but slow on the make_win families).

    Returns None when no win exists within ``max_len`` steps or ``node_limit`` states were expanded first.
    """
    rules = parse_rules(cells, width)
    parents: dict[Cells, tuple[Cells | None, int]] = {cells: (None, 0)}
    layer: list[tuple[Cells, Rules]] = [(cells, rules)]
    expanded = 0
    for _ in range(max_len):
        nxt_layer: list[tuple[Cells, Rules]] = []
        for state, state_rules in layer:
            expanded += 1
            if expanded > node_limit:
                return None
            for action in (1, 2, 3, 4):
                nxt, nxt_rules, won, lost = advance(state, state_rules, action, width)
                if won:
                    return [*_plan_to(state, parents), action]
                if lost or nxt in parents or not you_cells(nxt, nxt_rules):
                    continue
                parents[nxt] = (state, action)
                nxt_layer.append((nxt, nxt_rules))
        layer = nxt_layer
    return None
