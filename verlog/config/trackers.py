"""Experiment trackers (``logger=[console,tensorboard,wandb]``): verl's tracking backends, writing inside the run.

verl's ``Tracking`` class writes every iteration's metrics to each backend listed in ``trainer.logger``; verlog's
trainer merges its own metrics (env/, rollout/, adv/, eval/, check/, prefix/, ...) into those records
(verlog/trainer/ppo.py), so every tracker gets verl's and verlog's together. Here: where the file-writing backends
write (inside the run folder, never the current directory), wandb's mode (offline unless the user is logged in or
asks otherwise), and the check that each named backend's package is installed, before anything starts.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from verlog.run.folder import WANDB_DIR, RunFolder

TRACKER_PACKAGES: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow"),
    "swanlab": ("swanlab", "swanlab"),
    "vemlp_wandb": ("volcengine_ml_platform", "volcengine-ml-platform"),
    "clearml": ("clearml", "clearml"),
    "trackio": ("trackio", "trackio"),
    "rl_insight": ("rl_insight", "rl-insight"),
}
"""Backend -> (the module verl imports for it, the pip package that provides it)."""


def missing_tracker_packages(loggers: list[str]) -> list[str]:
    """One line per backend of ``loggers`` whose package is not installed (verl would fail on it only after Ray and
    the workers started), naming the pip install that fixes it."""
    problems = []
    for name in loggers:
        module, package = TRACKER_PACKAGES.get(str(name), (None, None))
        if module is not None and importlib.util.find_spec(module) is None:
            problems.append(
                f"logger {name}: its package is not installed: pip install {package}, or drop {name} from logger"
            )
    return problems


def wandb_logged_in() -> bool:
    """Whether wandb can reach its server as this user: an API key in the environment or in ~/.netrc."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return "api.wandb.ai" in netrc.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def tracker_environment(loggers: list[str], output_dir: str | os.PathLike[str]) -> tuple[dict[str, str], list[str]]:
    """The environment variables that put the trackers' files inside ``output_dir`` and the lines to tell the user.

    tensorboard writes to ``OUTPUT_DIR/tensorboard`` (verl reads ``TENSORBOARD_DIR``); wandb to
    ``OUTPUT_DIR/wandb/`` (``WANDB_DIR``), offline when ``WANDB_MODE`` is unset and no API key is known (``wandb sync``
    uploads it later). Variables the user set are kept.
    """
    run = RunFolder(output_dir)
    env: dict[str, str] = {}
    lines: list[str] = []
    if "tensorboard" in loggers:
        env["TENSORBOARD_DIR"] = os.environ.get("TENSORBOARD_DIR") or str(run.tensorboard)
        lines.append(f"tensorboard: {env['TENSORBOARD_DIR']} (tensorboard --logdir {env['TENSORBOARD_DIR']})")
    if "wandb" in loggers:
        env["WANDB_DIR"] = os.environ.get("WANDB_DIR") or str(run.root)
        env["WANDB_CONSOLE"] = os.environ.get("WANDB_CONSOLE") or "off"  # no capture of the console (verlog.console)
        Path(env["WANDB_DIR"]).mkdir(parents=True, exist_ok=True)
        mode = os.environ.get("WANDB_MODE")
        if mode is None and not wandb_logged_in():
            mode = env["WANDB_MODE"] = "offline"
        where = Path(env["WANDB_DIR"]) / WANDB_DIR
        if mode == "offline":
            lines.append(
                f"wandb: offline, in {where} (no API key; upload later with: wandb sync {where}/offline-run-*)"
            )
        else:
            lines.append(f"wandb: {mode or 'online'}, local files in {where}")
    return env, lines
