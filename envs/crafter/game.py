"""crafter 1.8.3's ``Env`` made reproducible across processes, restorable, and optionally image-free.

Three changes, none of which alters the game for a given world seed within one process:

1. **Despawn order.** When crafter despawns a creature it picks one by index from a set of objects, whose order
   follows memory addresses, so the same seed can diverge in another process (docs/stack.md). Here the candidates
   are sorted by position first (one object per cell, so the order is total). The random draws are unchanged.
2. **Images are optional.** crafter renders a 256x256 image every step, and the render is part of the dynamics: at
   night the lighting noise draws from the world's RNG. With ``render=False`` the image is skipped but exactly the
   same draws are made, so the world evolves identically (a test checks this) at a fraction of the cost.
3. **State.** :meth:`CrafterGame.get_state` / :meth:`CrafterGame.set_state` copy the world, the player and the
   counters (not the textures), so an episode continues exactly in a fresh process.
"""

from __future__ import annotations

from typing import Any

import crafter
import numpy as np

BALROG_SIZE = (256, 256)
"""BALROG's render size. It matters even without images: the night noise draws one number per local-view pixel."""


class CrafterGame(crafter.Env):
    """``crafter.Env`` with deterministic despawns, optional rendering and pickle-able state.

    Args:
        seed: the crafter seed (world seed of episode k is ``hash((seed, k)) % (2**31 - 1)``).
        render: produce the RGB observation each step; False returns None and only consumes the render's draws.
        area, view, size, length: as ``crafter.Env`` (BALROG's values are the defaults).
    """

    def __init__(
        self,
        seed: int,
        *,
        render: bool = False,
        area: tuple[int, int] = (64, 64),
        view: tuple[int, int] = (9, 9),
        size: tuple[int, int] = BALROG_SIZE,
        length: int | None = 10000,
    ) -> None:
        if not isinstance(seed, (int, np.integer)):
            raise TypeError(f"crafter needs an explicit integer seed, got {seed!r}")
        super().__init__(area=area, view=view, size=size, reward=True, length=length, seed=int(seed))
        self.render_images = render
        unit = self._size // self._view
        # Shape of the local-view canvas whose night noise the render draws (crafter engine.LocalView._noise).
        self._noise_shape = tuple(int(v) for v in self._local_view._grid * unit)

    @property
    def player(self) -> Any:
        return self._player

    @property
    def world(self) -> Any:
        return self._world

    def reseed(self, seed: int) -> None:
        """Make the next ``reset()`` build episode 1 of ``seed`` (what a fresh ``crafter.Env(seed=seed)`` builds)."""
        self._seed = int(seed)
        self._episode = 0

    def _obs(self) -> np.ndarray | None:
        if self.render_images:
            return self.render()
        if self._world.daylight < 0.5:  # the render's only random draws: LocalView._light -> _noise
            self._world.random.uniform(32, 127, self._noise_shape)
        return None

    def _balance_object(
        self,
        chunk,
        objs,
        cls,
        material,
        span_dist,
        despan_dist,
        spawn_prob,
        despawn_prob,
        ctor,
        target_fn,
    ) -> None:
        # crafter's rule, with the creatures in position order instead of set order.
        xmin, xmax, ymin, ymax = chunk
        random = self._world.random
        creatures = sorted(
            (o for o in objs if isinstance(o, cls)),
            key=lambda o: (int(o.pos[0]), int(o.pos[1])),
        )
        mask = self._world.mask(*chunk, material)
        target_min, target_max = target_fn(len(creatures), mask.sum())
        if len(creatures) < int(target_min) and random.uniform() < spawn_prob:
            xs = np.tile(np.arange(xmin, xmax)[:, None], [1, ymax - ymin])[mask]
            ys = np.tile(np.arange(ymin, ymax)[None, :], [xmax - xmin, 1])[mask]
            i = random.randint(0, len(xs))
            pos = np.array((xs[i], ys[i]))
            if self._world[pos][1] is None and self._player.distance(pos) >= span_dist:
                self._world.add(ctor(pos))
        elif len(creatures) > int(target_max) and random.uniform() < despawn_prob:
            obj = creatures[random.randint(0, len(creatures))]
            if self._player.distance(obj.pos) >= despan_dist:
                self._world.remove(obj)

    def get_state(self) -> dict[str, Any]:
        """Everything that evolves in an episode (world with its RNG and objects, player, counters)."""
        return {
            "world": self._world,
            "player": self._player,
            "step": self._step,
            "episode": self._episode,
            "seed": self._seed,
            "last_health": self._last_health,
            "unlocked": set(self._unlocked) if self._unlocked is not None else None,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state`'s dict (after pickling it, objects keep pointing at the restored world)."""
        self._world = state["world"]
        self._local_view._world = self._world
        self._sem_view._world = self._world
        self._player = state["player"]
        self._step = state["step"]
        self._episode = state["episode"]
        self._seed = state["seed"]
        self._last_health = state["last_health"]
        self._unlocked = state["unlocked"]
