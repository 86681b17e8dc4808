"""Our version of BALROG's BabyAI-MixedTrainLocal level, one task kind per level object.

docs/text-envs.md, "The levels". BALROG builds the fork's ``BabyAI-MixedTrainLocal-v0`` repeatedly until the kind drawn
at construction is the one it wants; here the kind is a constructor argument. ``reset(seed=s)`` then builds the same
layout and mission as the fork for seed ``s``: :meth:`MixedLocalLevel.gen_mission` makes its random draws in the
fork's order and otherwise calls upstream minigrid's own helpers (``place_agent``, ``add_distractors``,
``add_object``, ``add_door``, ``connect_all``, ``check_objs_reachable``).
"""

from __future__ import annotations

from typing import Any

from minigrid.core.grid import Grid
from minigrid.core.world_object import WorldObj
from minigrid.envs.babyai.core.roomgrid_level import RejectSampling, RoomGridLevel
from minigrid.envs.babyai.core.verifier import (
    AfterInstr,
    BeforeInstr,
    GoToInstr,
    Instr,
    ObjDesc,
    OpenInstr,
    PickupInstr,
    PutNextInstr,
)

TASK_KINDS: tuple[str, ...] = ("goto", "pickup", "open", "putnext", "pick_up_seq_go_to")
"""The five kinds, as BALROG's task ids spell them (the fork's ``"pick up seq go to"`` with underscores)."""

HELD_OUT: tuple[str, ...] = (
    "yellow box",
    "red key",
    "red door",
    "green ball",
    "grey door",
)
"""A mission containing any of these is rejected (they are MixedTestLocal's)."""

LOCKED_DOOR_COLORS: tuple[str, ...] = ("yellow", "green", "blue", "purple")
ROOM_SIZE = 8


def canonical_kind(kind: str) -> str:
    """``"pick up seq go to"`` -> ``"pick_up_seq_go_to"``; raises ValueError for an unknown kind."""
    name = kind.strip().replace(" ", "_")
    if name not in TASK_KINDS:
        raise ValueError(f"unknown BabyAI task kind {kind!r}; choose one of {', '.join(TASK_KINDS)}")
    return name


class MixedLocalLevel(RoomGridLevel):
    """One room (two side by side for ``open``) of size 8 with ``num_dists`` extra objects (BALROG uses 0).

    Args:
        kind: one of :data:`TASK_KINDS`.
        num_dists: extra distractor objects (the fork's class default is 8; BALROG and Verlog pass 0).
        **kwargs: passed to ``RoomGridLevel`` (e.g. ``render_mode``).
    """

    def __init__(self, kind: str, num_dists: int = 0, **kwargs: Any) -> None:
        if num_dists < 0:
            raise ValueError(f"num_dists must be >= 0, got {num_dists}")
        self.kind = canonical_kind(kind)
        self.num_dists = int(num_dists)
        self.locked_room = None
        super().__init__(
            room_size=ROOM_SIZE,
            num_rows=1,
            num_cols=2 if self.kind == "open" else 1,
            **kwargs,
        )

    # ------------------------------------------------------------------ generation
    def _gen_grid(self, width: int, height: int) -> None:
        # Upstream's retry loop without its "Sampling rejected" prints.
        while True:
            try:
                super(RoomGridLevel, self)._gen_grid(width, height)  # RoomGrid: walls, door positions, agent
                self.gen_mission()
                self.validate_instrs(self.instrs)
            except (RejectSampling, RecursionError):
                continue
            break
        self.surface = self.instrs.surface(self)
        self.mission = self.surface

    def gen_mission(self) -> None:
        """Draw layouts until the mission is reachable and names no held-out object (docs/text-envs.md)."""
        while True:
            self._fresh_layout()
            instrs = self._gen_open() if self.kind == "open" else self._gen_single_room()
            if instrs is None:  # an object cannot be reached
                continue
            if any(banned in instrs.surface(self) for banned in HELD_OUT):
                continue
            self.instrs = instrs
            return

    def _fresh_layout(self) -> None:
        """Empty grid, walls, new inter-room door positions, agent in the middle facing east."""
        self.grid = Grid(self.width, self.height)
        for row in self.room_grid:
            for room in row:
                room.doors = [None] * 4
                room.door_pos = [None] * 4
                room.neighbors = [None] * 4
                room.locked = False
                room.objs = []
                self.grid.wall_rect(*room.top, *room.size)
        for j, row in enumerate(self.room_grid):
            for i, room in enumerate(row):
                x_lo, y_lo = room.top[0] + 1, room.top[1] + 1
                x_hi, y_hi = (
                    room.top[0] + room.size[0] - 1,
                    room.top[1] + room.size[1] - 1,
                )
                if i < self.num_cols - 1:
                    room.neighbors[0] = self.room_grid[j][i + 1]
                    room.door_pos[0] = (x_hi, self._rand_int(y_lo, y_hi))
                if j < self.num_rows - 1:
                    room.neighbors[1] = self.room_grid[j + 1][i]
                    room.door_pos[1] = (self._rand_int(x_lo, x_hi), y_hi)
                if i > 0:
                    room.neighbors[2] = self.room_grid[j][i - 1]
                    room.door_pos[2] = room.neighbors[2].door_pos[0]
                if j > 0:
                    room.neighbors[3] = self.room_grid[j - 1][i]
                    room.door_pos[3] = room.neighbors[3].door_pos[1]
        half = self.room_size // 2
        self.agent_pos = (
            (self.num_cols // 2) * (self.room_size - 1) + half,
            (self.num_rows // 2) * (self.room_size - 1) + half,
        )
        self.agent_dir = 0
        self.locked_room = None

    def _gen_open(self) -> Instr | None:
        color = self._rand_elem(LOCKED_DOOR_COLORS)
        self._add_locked_room(color)
        self.connect_all()
        for j in range(self.num_rows):
            for i in range(self.num_cols):
                if self.get_room(i, j) is not self.locked_room:
                    self.add_distractors(i, j, num_distractors=self.num_dists, all_unique=False)
        while True:
            self.place_agent()
            if self.room_from_pos(*self.agent_pos) is not self.locked_room:
                break
        if not self.check_objs_reachable(raise_exc=False):
            return None
        return OpenInstr(ObjDesc("door", self._rand_elem([None, color])))

    def _add_locked_room(self, color: str) -> None:
        """A locked door of ``color`` on a random inner wall, and its key in another room."""
        while True:
            i, j = self._rand_int(0, self.num_cols), self._rand_int(0, self.num_rows)
            side = self._rand_int(0, 4)
            room = self.get_room(i, j)
            if room.neighbors[side] is None:
                continue
            self.add_door(i, j, side, color=color, locked=True)
            self.locked_room = room
            break
        while True:
            i, j = self._rand_int(0, self.num_cols), self._rand_int(0, self.num_rows)
            if self.get_room(i, j) is self.locked_room:
                continue
            self.add_object(i, j, "key", color)
            break

    def _gen_single_room(self) -> Instr | None:
        self.place_agent()
        extra = 1 if self.kind in ("goto", "pickup") else 2
        objs = self.add_distractors(num_distractors=self.num_dists + extra, all_unique=False)
        if not self.check_objs_reachable(raise_exc=False):
            return None
        first = self._draw_not_door(objs)
        if self.kind == "goto":
            return GoToInstr(_desc(first))
        if self.kind == "pickup":
            return PickupInstr(_desc(first))
        second = self._rand_elem(objs)
        n_like_first = sum(1 for o in objs if (o.type, o.color) == (first.type, first.color))
        while (second.type, second.color) == (
            first.type,
            first.color,
        ) and n_like_first < 2:
            second = self._rand_elem(objs)
        if self.kind == "putnext":
            return PutNextInstr(_desc(first), _desc(second))
        pick, go = PickupInstr(_desc(first)), GoToInstr(_desc(second))
        if self._rand_elem(["Before", "After"]) == "Before":
            return BeforeInstr(pick, go)
        return AfterInstr(go, pick)

    def _draw_not_door(self, objs: list[WorldObj]) -> WorldObj:
        obj = self._rand_elem(objs)
        while obj.type == "door":
            obj = self._rand_elem(objs)
        return obj


def _desc(obj: WorldObj) -> ObjDesc:
    return ObjDesc(obj.type, obj.color)
