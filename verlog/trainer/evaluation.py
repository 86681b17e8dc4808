"""Evaluation inside training: BALROG's protocol on fixed held-out seeds every ``evaluation.every`` iterations.

The trainer (:meth:`verlog.trainer.ppo.VerlogPPOTrainer._validate`, called by verl's ``fit()`` every
``trainer.test_freq`` iterations, at the last one and, with ``val_before_train``, before a fresh run's first) hands
this module a generator on verl's vLLM servers; the episodes run through :func:`verlog.eval.runner.run_episodes`, the
runner of ``verlog eval``, which steps them with training's own loop (:mod:`verlog.rollout.stepper`): a fresh episode
and memory per seed, ``env.id`` built with training's ``env.kwargs`` in an env pool like training's (``env.backend``,
``env.num_workers``), training's memory settings, answer format, prompt budget, response length and generation
retries. Nothing here imports verl.

Seeds: episode ``i`` gets ``evaluation.seed_start + i`` at every evaluation (the same layouts each time, so the
curve is paired by seed), disjoint from every seed training's slots start with or draw: the protocol and that check
(run before anything starts) are :mod:`verlog.eval.training`'s.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from verlog.console import say
from verlog.eval.protocol import EvalProtocol
from verlog.eval.runner import EpisodeRecord
from verlog.eval.training import RESERVED_SEED_START as RESERVED_SEED_START  # its old home: tests import it here
from verlog.eval.training import eval_protocol
from verlog.prompting.memory import MemoryConfig
from verlog.prompting.sampling import SamplingConfig
from verlog.rollout.generator import Generator
from verlog.run.files import append_jsonl
from verlog.run.folder import EVAL_EPISODES, RunFolder
from verlog.tapes.recorders import TapesConfig

if TYPE_CHECKING:
    from verlog.config.schema import TrainConfig

EVAL_PREFIX = "eval/"
EPISODES_FILE = EVAL_EPISODES
"""Every evaluation episode, one JSON line each with its ``iteration`` (relative to ``output_dir``)."""

# per-episode quantities reported as eval/<name> (mean) and eval/<name>_se (BALROG's standard error)
_MEASURES = {
    "success": lambda r: float(r.success),
    "progression": lambda r: float(r.progression),
    "return": lambda r: float(r.episode_return),
    "valid_action_rate": lambda r: float(r.valid_action_rate),
}


def pool_kwargs(cfg: DictConfig) -> dict[str, Any]:
    """``run_episodes``' env pool and generation retry keywords from training's ``env`` and ``rollout`` sections
    (evaluation steps its envs as training does, and a failed generation is retried as many times)."""
    workers = OmegaConf.select(cfg, "env.num_workers", default=None)
    backend = str(OmegaConf.select(cfg, "env.backend", default="subprocess"))
    if OmegaConf.select(cfg, "env.in_process", default=False) and backend == "subprocess":
        backend = "in_process"  # the old key (verlog.config.env_backend)
    ray = OmegaConf.select(cfg, "env.ray", default=None)
    ray_options = None
    if backend == "ray":  # training's Ray env workers' requests: the envs may need a node only some have
        ray_options = {
            "num_cpus": float(OmegaConf.select(cfg, "env.ray.num_cpus_per_worker", default=1.0)),
            "resources": dict(OmegaConf.to_container(ray.resources, resolve=True) or {}) if ray is not None else {},
        }
    return {
        # the envs where training's are: in this process, in subprocess workers or in Ray actors
        "backend": backend,
        "ray_options": ray_options,
        "in_process": backend == "in_process",
        "num_workers": None if workers is None else int(workers),
        "generation_retries": int(OmegaConf.select(cfg, "rollout.generation_retries", default=1)),
    }


def family_protocols(cfg: DictConfig) -> tuple[tuple[str, EvalProtocol], ...]:
    """Multi-task training (``env.tasks``): one protocol per task family, its env id with ``env.kwargs`` and its own
    kwargs, on the same seeds; empty for a single-task run."""
    import dataclasses

    from verlog.algorithms.curriculum import parse_task_families

    tasks = OmegaConf.select(cfg, "env.tasks", default=None)
    if not tasks:
        return ()
    base = eval_protocol(cfg)
    families = parse_task_families(OmegaConf.to_container(tasks, resolve=True))
    return tuple(
        (f.name, dataclasses.replace(base, tasks=(f.env_id,), env_kwargs={**base.env_kwargs, **f.kwargs}))
        for f in families
    )


def family_metrics(name: str, records: Sequence[EpisodeRecord]) -> dict[str, float]:
    """``eval/<family>/success``, ``/return``, ``/valid_action_rate`` (means, read as :data:`_MEASURES` reads them)
    and ``/episodes`` of one family."""
    count = max(len(records), 1)
    prefix = f"{EVAL_PREFIX}{name}/"
    out = {
        prefix + measure: sum(_MEASURES[measure](r) for r in records) / count
        for measure in ("success", "return", "valid_action_rate")
    }
    out[prefix + "episodes"] = float(len(records))
    return out


def steps_per_slot(cfg: DictConfig) -> int:
    """Most env steps one training slot takes in the run (iterations, plus the critic warm-up's larger rollout):
    :attr:`verlog.config.schema.TrainConfig.max_turns_per_slot`, the one definition."""
    from verlog.config.checks import typed_config

    typed, _ = typed_config(cfg)
    return typed.max_turns_per_slot


def eval_metrics(records: Sequence[EpisodeRecord]) -> dict[str, float]:
    """``eval/<measure>`` means and ``eval/<measure>_se`` standard errors (BALROG's: population sd / sqrt(N)) of
    success, progression, return and valid-action rate, plus ``eval/episodes`` and ``eval/length``."""
    from verlog.eval.stats import balrog_mean_se

    out: dict[str, float] = {}
    for name, measure in _MEASURES.items():
        stat = balrog_mean_se([measure(r) for r in records])
        out[f"{EVAL_PREFIX}{name}"] = stat.mean
        out[f"{EVAL_PREFIX}{name}_se"] = stat.se
    out[f"{EVAL_PREFIX}episodes"] = float(len(records))
    out[f"{EVAL_PREFIX}length"] = float(sum(r.num_steps for r in records) / len(records))
    out[f"{EVAL_PREFIX}generation_failures"] = float(sum(r.generation_failures for r in records))
    return out


def summary_line(iteration: int, metrics: dict[str, float]) -> str:
    """The one-line progress report printed after each evaluation."""
    prefix = EVAL_PREFIX
    return (
        f"[verlog] eval at iteration {iteration}: success {100 * metrics[prefix + 'success']:.1f}% "
        f"± {100 * metrics[prefix + 'success_se']:.1f} over {int(metrics[prefix + 'episodes'])} episodes "
        f"(progression {metrics[prefix + 'progression']:.3f}, return {metrics[prefix + 'return']:.3f}, "
        f"valid actions {100 * metrics[prefix + 'valid_action_rate']:.1f}%, {metrics[prefix + 'time_s']:.0f} s)"
    )


@dataclass
class TrainingEvaluator:
    """Runs one evaluation per call (see the module docstring); built from verlog's config by the trainer."""

    protocol: EvalProtocol
    sampling: SamplingConfig
    memory: MemoryConfig  # training's memory section: the prompts are laid out as the rollout's
    max_prompt_tokens: int
    output_dir: str
    tapes: TapesConfig | None = None  # the first tapes.eval_episodes episodes go to tapes/eval.jsonl
    pool: dict[str, Any] | None = None  # run_episodes' env pool and retry keywords (training's env and rollout)
    families: tuple[tuple[str, EvalProtocol], ...] = ()  # multi-task: (family, its protocol), evaluated in turn

    @classmethod
    def from_config(cls, cfg: DictConfig, typed: TrainConfig | None = None) -> TrainingEvaluator:
        """From verlog's config (``typed``: the same config typed, as the trainer holds it; typed here if None): its
        typed ``memory``, ``tapes`` and sampling sections go to the runner as they are."""
        import dataclasses

        from envs.registry import register_entry_point
        from verlog.config.checks import typed_config
        from verlog.tapes.recorders import frame_env_kwargs

        if typed is None:
            typed, _ = typed_config(cfg)
        register_entry_point(str(cfg.env.id))  # an entry-point env.id: envs.make (the runner's) builds it too
        tapes = typed.tapes
        tapes.check()
        protocol = eval_protocol(cfg)
        if tapes.frames and tapes.eval_episodes:
            protocol = dataclasses.replace(protocol, env_kwargs=frame_env_kwargs(str(cfg.env.id), protocol.env_kwargs))
        return cls(
            protocol=protocol,
            sampling=typed.eval_sampling,
            memory=typed.memory,
            max_prompt_tokens=typed.rollout.max_prompt_tokens,
            output_dir=str(cfg.output_dir),
            tapes=tapes,
            pool=pool_kwargs(cfg),
            families=family_protocols(cfg),
        )

    def run(
        self, generator: Generator, tokenizer: Any, iteration: int, image_tokens: Callable[[Any], int] | None = None
    ) -> dict[str, float]:
        """Play the protocol's episodes with ``generator`` (the current policy); returns the ``eval/*`` metrics.
        ``image_tokens``: the VLM's tokens per image, with ``memory.max_image_history`` > 0 (prompts with images,
        as the rollout's).

        A failure (an env that raises, a lost server) does not stop training: it is printed with its traceback and
        reported as ``eval/failed`` = 1.
        """
        from verlog.eval.runner import run_episodes
        from verlog.tapes.recorders import EvalTapeWriter

        start = time.perf_counter()
        runs = self.families or (("", self.protocol),)
        specs = runs[0][1].episodes()  # tapes: the first family's first episodes
        taped = int(getattr(self.tapes, "eval_episodes", 0) or 0)
        tape = (
            EvalTapeWriter(self.output_dir, iteration, [s.episode_id for s in specs if s.episode_index < taped])
            if taped
            else None
        )
        per_family: dict[str, list[EpisodeRecord]] = {}
        try:
            for i, (family, protocol) in enumerate(runs):
                per_family[family] = run_episodes(
                    protocol.episodes(),
                    generator,
                    tokenizer,
                    self.sampling,
                    max_prompt_tokens=self.max_prompt_tokens,
                    env_kwargs=protocol.env_kwargs,
                    max_steps=protocol.max_steps,
                    turn_log=tape if i == 0 else None,
                    memory=self.memory,
                    image_tokens=image_tokens,
                    **(self.pool or {}),
                )
        except Exception as exc:  # an evaluation must not end a training run
            traceback.print_exc()
            say(f"[verlog] warning: eval at iteration {iteration} failed ({type(exc).__name__}: {exc})", err=True)
            return {f"{EVAL_PREFIX}failed": 1.0}
        finally:
            if tape is not None:
                tape.close()
        records = [r for family_records in per_family.values() for r in family_records]
        metrics = eval_metrics(records)
        for family, family_records in per_family.items():
            if family:
                metrics.update(family_metrics(family, family_records))
        metrics[f"{EVAL_PREFIX}time_s"] = time.perf_counter() - start
        for family, family_records in per_family.items():
            self._write_episodes(family_records, iteration, family)
        say(summary_line(iteration, metrics))
        return metrics

    def _write_episodes(self, records: Sequence[EpisodeRecord], iteration: int, family: str = "") -> None:
        path = RunFolder(self.output_dir).eval_episodes
        extra = {"family": family} if family else {}
        append_jsonl(path, [{"iteration": iteration, **extra, **rec.to_dict()} for rec in records])
