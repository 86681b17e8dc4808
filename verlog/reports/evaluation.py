"""The evaluation loader every report uses: an evaluation folder's ``episodes.jsonl`` -> records and intervals."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from verlog.eval import EpisodeRecord, Interval, bootstrap_mean_ci, read_episode_records
from verlog.eval.report import EPISODES_FILE


@dataclass
class Evaluation:
    """One model's evaluation: its records (sorted by env id, seed, episode), success rate and mean return with 95%
    percentile-bootstrap intervals, valid actions per step and steps per episode."""

    name: str
    folder: Path
    records: list[EpisodeRecord]
    success: Interval
    ret: Interval
    valid_action_rate: float
    mean_steps: float

    @property
    def seeds(self) -> set[int]:
        return {r.seed for r in self.records}


def load_evaluation(folder: str | Path, name: str, *, n_resamples: int = 10_000, seed: int = 0) -> Evaluation | None:
    """The evaluation in ``folder`` (its ``episodes.jsonl``), or None when it has no episode yet."""
    folder = Path(folder)
    if not (folder / EPISODES_FILE).is_file():
        return None
    # episodes are appended as they finish, in an order that varies between runs: sort by (env id, seed) so that
    # the bootstrap (which depends on the order of the sample) gives the same interval for the same episodes
    records = sorted(read_episode_records(folder), key=lambda r: (r.env_id, r.seed, r.episode_index))
    if not records:
        return None
    kw = {"n_resamples": n_resamples, "seed": seed}
    steps = sum(r.num_steps for r in records)
    return Evaluation(
        name=name,
        folder=folder,
        records=records,
        success=bootstrap_mean_ci([float(r.success) for r in records], **kw),
        ret=bootstrap_mean_ci([r.episode_return for r in records], **kw),
        valid_action_rate=sum(r.valid_actions for r in records) / steps if steps else 0.0,
        mean_steps=steps / len(records),
    )
