"""What ``verlog train`` checks before anything starts (no Ray, no vLLM, no model weights), all problems at once.

:func:`preflight` types the composed config (:mod:`verlog.config.checks`), then looks outside it: the env (``env.id``
resolves, the env builds with ``env.kwargs`` and resets), the prompt budget (the env's instruction and first
observation fit ``rollout.max_prompt_tokens``), the model folder, the checkpoint to resume, the evaluation seeds.
:func:`check_output_dir` guards the output folder of a real launch (a fresh run never writes into another run's).

The prompt budget is counted with the model's own tokenizer when ``model.path`` is a local folder that holds one;
otherwise (a model built at launch, a Hugging Face id) with :class:`CharTokenEstimate`, four characters per token,
about what BPE tokenizers give on English text: a lower bound that only catches budgets clearly too small (the
rollout checks each real prompt and raises ``PromptTooLongError`` if one does not fit).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from verlog.config.checks import (
    Problem,
    check_evaluation,
    config_problems,
    raise_if,
    typed_config,
)
from verlog.config.schema import RESUME_MODES, TrainConfig
from verlog.run.folder import RUN_DATA as RUN_DATA
from verlog.run.folder import RUN_OUTPUTS as RUN_OUTPUTS
from verlog.run.folder import STEP_PREFIX, RunFolder
from verlog.run.output_folder import creation_problem

CHARS_PER_TOKEN = 4
"""The prompt-budget estimate without a tokenizer at hand (see the module docstring)."""


def preflight(cfg: DictConfig | TrainConfig, imports: Sequence[str] = (), overwrite: bool = False) -> TrainConfig:
    """Every check of a launch (see the module docstring); :class:`TrainConfigError` with all problems found.

    ``imports`` (``--import`` modules, already imported) are added to ``env.imports``, so the run's config.yaml
    records them and a resume from it imports them again. ``overwrite`` (``--overwrite``) lets a fresh run start in
    an ``output_dir`` that holds another run (:func:`output_dir_problems`).
    """
    typed, problems = (cfg, []) if isinstance(cfg, TrainConfig) else typed_config(cfg)
    problems += config_problems(typed, skip=[p.key for p in problems])
    bad = [p.key for p in problems]
    typed.env.imports = [*typed.env.imports, *(m for m in imports if m not in typed.env.imports)]
    problems += output_dir_problems(typed, overwrite)
    problems += check_verl_section(typed)
    problems += check_model(typed)
    problems += check_lora(typed)
    if typed.memory.max_image_history > 0 and "memory.max_image_history" not in bad:
        problems += check_images(typed)
    problems += check_resume(typed)
    if not any(p.key == "checkpoint.resume" for p in problems):
        problems += check_resume_state(typed)
    env_bad = [key for key in bad if key.startswith("env") and key != "env.kwargs.parse_mode"]
    if not env_bad:
        # a misspelt parse mode is reported already: build the env with the default one to check the rest
        drop = ("parse_mode",) if "env.kwargs.parse_mode" in bad else ()
        budget = not {"rollout.max_prompt_tokens", "memory.answer_format"} & set(bad)
        env_problems = check_env(typed, budget=budget, drop=drop)
        problems += env_problems
        if not env_problems and not drop and not any(k.startswith(("evaluation", "seed", "iterations")) for k in bad):
            problems += check_evaluation(typed)
    raise_if(problems)
    return typed


# ------------------------------------------------------------------------------------------------ env
def check_env(cfg: TrainConfig, budget: bool = True, drop: Sequence[str] = ()) -> list[Problem]:
    """``env.imports`` import, then each env the slots will play (``env.id``, or every family of ``env.tasks``)
    resolves, builds with ``env.kwargs`` (less the keys in ``drop``; a family's own kwargs over them) and resets;
    with ``budget``, its instruction and first observation fit the prompt budget (:func:`check_prompt_budget`)."""
    from envs.errors import EnvError, EnvImageError, EnvImportError
    from envs.registry import build_env, check_env_id, import_modules
    from verlog.algorithms.curriculum import CurriculumSettingsError, parse_task_families

    try:
        import_modules(cfg.env.imports)
    except EnvImportError as exc:
        return [Problem("env.imports", f"env.imports: {exc}")]
    shared = {k: v for k, v in cfg.env.kwargs.items() if k not in drop}
    if cfg.memory.max_image_history > 0:  # the rollout builds its envs with images (verlog/rollout/build.py)
        shared["images"] = True
    if cfg.env.tasks:  # multi-task: the families' envs (env.id is not built)
        try:
            families = parse_task_families(cfg.env.tasks)
        except CurriculumSettingsError:
            return []  # reported by check_curriculum
        targets = [
            (f"env.tasks.{f.name}", f"task family {f.name!r}: ", f.env_id, {**shared, **f.kwargs}) for f in families
        ]
    elif cfg.env.id:
        targets = [("env.id", "", cfg.env.id, shared)]
    else:
        return []  # reported by check_values
    problems: list[Problem] = []
    for key, label, env_id, kwargs in targets:
        try:
            check_env_id(env_id, key)
            env = build_env(env_id, kwargs, f"{key} (with env.kwargs)" if label else "env.kwargs", seed=cfg.seed)
        except EnvError as exc:
            if "images" in shared and (isinstance(exc, EnvImageError) or "EnvImageError" in str(exc)):
                problems.append(_no_images_problem(label, env_id))  # build_env names the env's refusal in its text
                continue
            problems.append(_env_build_problem(cfg, key, label, exc))
            continue
        try:
            if budget:
                problems += [Problem(p.key, label + p.message) for p in check_prompt_budget(cfg, env)]
            problems += _step_limit(cfg, env, env_id, key, kwargs, shared)
        finally:
            env.close()
    return problems


def _step_limit(
    cfg: TrainConfig, env: Any, env_id: str, key: str, kwargs: dict[str, Any], shared: dict[str, Any]
) -> list[Problem]:
    """The group estimators' step-limit rule (:func:`verlog.algorithms.estimators.step_limit_problem`) on the env's own
    limit, which the rollout reads when the slots start (a limit set in ``env.kwargs`` is checked with the sizes)."""
    from verlog.algorithms.estimators import Grouping, get_estimator, step_limit_problem

    try:
        grouped = get_estimator(cfg.algorithm.estimator).grouping is Grouping.GROUPS
    except ValueError:  # reported by check_values
        return []
    given = kwargs.get("max_steps")
    if not grouped or (given is not None and given == shared.get("max_steps")):
        return []
    source = f"{env_id}'s own step limit (max_steps)" if given is None else f"{key}.kwargs.max_steps"
    problem = step_limit_problem(cfg, getattr(env, "max_steps", None), source)
    return [] if problem is None else [problem]


def _no_images_problem(label: str, env_id: str) -> Problem:
    return Problem(
        "memory.max_image_history",
        f"memory.max_image_history: {label}env {env_id!r} draws no images (its provides_images is False): use an env "
        "with images (babyai, crafter, babaisai, toy/visual; docs/adding-an-env.md, Images) or set "
        "memory.max_image_history=0",
    )


def check_images(cfg: TrainConfig) -> list[Problem]:
    """``memory.max_image_history`` > 0: the model is a vision-language model whose processor loads."""
    from verlog.errors import ImageSetupError
    from verlog.models.vision import load_vision_processor, text_only_model_problem

    key = "memory.max_image_history"
    problem = text_only_model_problem(cfg.model.path, cfg.model.build_tiny)
    if problem is not None:
        return [Problem(key, f"{key}: {problem}")]
    try:
        load_vision_processor(cfg.model.path)
    except ImageSetupError as exc:
        return [Problem(key, f"{key}: {exc}")]
    return []


def _image_tokens(cfg: TrainConfig) -> Any:
    """Tokens per image (the model's processor), or None: text only, or a processor that cannot load (reported by
    :func:`check_images`)."""
    if cfg.memory.max_image_history <= 0:
        return None
    from verlog.errors import ImageSetupError
    from verlog.models.vision import image_token_count, is_vision_model, load_vision_processor

    if not is_vision_model(Path(cfg.model.path).expanduser()):
        return None
    try:
        return functools.partial(image_token_count, load_vision_processor(cfg.model.path))
    except ImageSetupError:
        return None


def _env_build_problem(cfg: TrainConfig, key: str, label: str, exc: Exception) -> Problem:
    """The problem of an env that did not build: for ``env.id``, a keyword argument the env does not take names the
    env config that set it and how to drop it."""
    bad = re.search(r"takes no keyword argument '(\w+)'", str(exc))
    if label:
        return Problem(key, str(exc))
    if bad is None:
        return Problem("env", str(exc))
    return Problem(
        "env.kwargs",
        f"{exc} The env config (env.name={cfg.env.name}) sets env.kwargs {sorted(cfg.env.kwargs)}: drop this "
        f"one with ~env.kwargs.{bad.group(1)}, or for an env of your own start from env=custom (no kwargs but "
        "the ones you add: +env.kwargs.NAME=VALUE) or an env config of your own (--config-dir DIR with "
        "DIR/env/NAME.yaml)",
    )


class CharTokenEstimate:
    """A stand-in tokenizer for the prompt-budget check: ChatML layout, :data:`CHARS_PER_TOKEN` characters a token."""

    def apply_chat_template(self, conversation: Any, *args: Any, **kwargs: Any) -> str:
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in conversation)
        return text + "<|im_start|>assistant\n"

    def encode(self, text: str, *args: Any, **kwargs: Any) -> list[int]:
        return [0] * math.ceil(len(text) / CHARS_PER_TOKEN)


def budget_tokenizer(cfg: TrainConfig) -> tuple[Any, str]:
    """The tokenizer the prompt budget is counted with, and how to name it in a message."""
    from verlog.models.folder import ModelFolderError, load_chat_tokenizer

    folder = Path(cfg.model.path).expanduser()
    if (folder / "tokenizer_config.json").is_file():
        try:
            return load_chat_tokenizer(folder), f"the tokenizer of {folder}"
        except ModelFolderError:  # reported by check_model
            pass
    return CharTokenEstimate(), f"an estimate of {CHARS_PER_TOKEN} characters per token"


def check_prompt_budget(cfg: TrainConfig, env: Any) -> list[Problem]:
    """The smallest prompt of the env's first turn (instruction + first observation + format instruction, no
    history) fits ``rollout.max_prompt_tokens`` (:func:`verlog.prompting.budget.budget_problem`)."""
    from verlog.prompting.budget import budget_problem

    tokenizer, counted = budget_tokenizer(cfg)
    option = "rollout.max_prompt_tokens"
    budget = cfg.rollout.max_prompt_tokens
    image_tokens = _image_tokens(cfg)
    memory = cfg.memory if image_tokens is not None else dataclasses.replace(cfg.memory, max_image_history=0)
    problem = budget_problem(env, str(cfg.env.id), tokenizer, memory, budget, option, counted, cfg.seed, image_tokens)
    return [] if problem is None else [Problem(option, problem)]


# ------------------------------------------------------------------------------------------------ model, resume
def looks_like_a_hub_id(path: str) -> bool:
    """``org/name`` or ``name``: not absolute, not ``./``, ``../`` or ``~``, at most one slash."""
    return not path.startswith(("/", ".", "~")) and path.count("/") <= 1


def check_model(cfg: TrainConfig) -> list[Problem]:
    """``model.path`` is a model folder, or a Hugging Face id, or is built at launch (``model.build_tiny``)."""
    path = cfg.model.path.strip()
    if not path:
        return []  # reported by check_values
    folder = Path(path).expanduser()
    if cfg.model.build_tiny:  # a model folder there already is used as it is
        built = (folder / "config.json").is_file()
        if built:
            return check_model_folder(cfg, folder)
        return _check_tiny_target(folder) + _check_tiny_sizes(cfg)
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            return [
                Problem(
                    "model.path",
                    f"{path!r} holds no config.json, so it is not a Hugging Face model folder: give the folder "
                    "that holds config.json (e.g. a `verlog sft` run's model/)",
                )
            ]
        return check_model_folder(cfg, folder)
    if looks_like_a_hub_id(path) and not folder.exists():
        return []  # a Hugging Face id, downloaded (or found in the cache) at launch
    return [
        Problem(
            "model.path",
            f"{path!r} does not exist: give a model folder (one with config.json), a Hugging Face id such as "
            "Qwen/Qwen2.5-3B-Instruct, or model.build_tiny=true to build a tiny random model there",
        )
    ]


def check_lora(cfg: TrainConfig) -> list[Problem]:
    """``model.lora``: a rank in [0, 512], a positive alpha, and target modules the model has (read from its
    config.json, or from the tiny model's sizes when ``model.build_tiny`` builds it at launch; a Hub id is checked
    when it is in the local cache)."""
    from verlog.models.folder import LORA_RANK_MAX, lora_target_problem, read_config

    lora = cfg.model.lora
    problems = []
    if not isinstance(lora.rank, int) or not 0 <= lora.rank <= LORA_RANK_MAX:
        problems.append(
            Problem(
                "model.lora.rank",
                f"{lora.rank!r} is not a LoRA rank: give an integer from 1 to {LORA_RANK_MAX} "
                "(e.g. model.lora.rank=16), or 0 to train every weight",
            )
        )
        return problems
    if lora.rank == 0:
        if lora.critic:
            problems.append(
                Problem(
                    "model.lora.critic", "model.lora.critic=true needs model.lora.rank > 0 (e.g. model.lora.rank=16)"
                )
            )
        return problems
    if lora.critic:  # verl 0.9.1 builds every LoRA model as a causal LM; its value model has no generation methods
        problems.append(
            Problem(
                "model.lora.critic",
                "model.lora.critic=true: verl 0.9.1 cannot train a LoRA critic (it wraps the value model as a causal "
                "LM and the critic fails to start): drop model.lora.critic, the critic then trains in full",
            )
        )
    if not isinstance(lora.alpha, (int, float)) or isinstance(lora.alpha, bool) or lora.alpha <= 0:
        problems.append(
            Problem("model.lora.alpha", f"{lora.alpha!r} must be a positive number, e.g. model.lora.alpha=32")
        )
    folder = Path(cfg.model.path.strip()).expanduser()
    if (folder / "config.json").is_file():
        try:
            config = read_config(folder)
        except Exception:  # reported by check_model
            return problems
    elif cfg.model.build_tiny:
        config = tiny_model_config(dict(cfg.model.tiny))
    else:
        return problems  # a Hub id: its layers are known once it is downloaded
    problem = lora_target_problem(config, lora.target_modules)
    if problem is not None:
        problems.append(Problem("model.lora.target_modules", problem))
    return problems


def tiny_model_config(sizes: dict[str, int]) -> dict[str, Any]:
    """The config.json content of the tiny Qwen2 ``model.build_tiny`` builds with ``sizes`` (model.tiny)."""
    from verlog.models.folder import TinyModelSpec

    spec = TinyModelSpec(**{k: v for k, v in sizes.items() if k in TinyModelSpec.__dataclass_fields__})
    return {"model_type": "qwen2", "vocab_size": spec.vocab_size, **spec.qwen2_sizes()}


def check_model_folder(cfg: TrainConfig, folder: Path) -> list[Problem]:
    """A local model folder loads as the launch loads it: config.json parses, weights are there, the tokenizer has a
    chat template, and the prompt budget plus the response fit the model's context (:mod:`verlog.models.folder`)."""
    from verlog.models.folder import ModelFolderError, context_problem, folder_problems, load_chat_tokenizer

    problems = [Problem("model.path", text) for text in folder_problems(folder)]
    if problems:
        return problems
    try:
        load_chat_tokenizer(folder)
    except ModelFolderError as exc:
        problems.append(Problem("model.path", str(exc)))
    ro = cfg.rollout
    fit = context_problem(
        folder, ro.max_prompt_tokens, ro.max_response_tokens, "rollout.max_prompt_tokens", "rollout.max_response_tokens"
    )
    if fit is not None:
        problems.append(Problem("rollout.max_prompt_tokens", fit))
    return problems


def _check_tiny_sizes(cfg: TrainConfig) -> list[Problem]:
    """The tiny model ``model.build_tiny`` builds at launch can be built (``model.tiny``'s sizes) and holds the prompt
    budget plus the response (:func:`verlog.models.folder.tiny_model_problem`)."""
    from verlog.models.folder import tiny_model_problem

    ro = cfg.rollout
    problem = tiny_model_problem(dict(cfg.model.tiny), ro.max_prompt_tokens, ro.max_response_tokens)
    if problem is None:
        return []
    return [Problem("rollout.max_prompt_tokens" if problem.startswith("rollout.") else "model.tiny", problem)]


def _check_tiny_target(folder: Path) -> list[Problem]:
    """With ``model.build_tiny`` and no model there yet: the folder can be created (its nearest existing parent is a
    writable folder)."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        what = "a file" if not folder.is_dir() else "a folder without config.json that is not empty"
        return [
            Problem(
                "model.path",
                f"{str(folder)!r} is {what}, so model.build_tiny cannot build a model there: give a new folder or "
                "an existing model folder",
            )
        ]
    parent = folder
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        return [
            Problem(
                "model.path",
                f"{str(folder)!r} does not exist and model.build_tiny cannot create it ({parent} is not a writable "
                "folder): give a model folder, or a path under a folder you can write to",
            )
        ]
    return []


def check_resume(cfg: TrainConfig) -> list[Problem]:
    """``checkpoint.resume`` is auto, disable or an existing ``.../global_step_K`` folder (a misspelt mode is
    reported by :func:`verlog.config.checks.check_values`)."""
    resume = cfg.checkpoint.resume
    if resume in RESUME_MODES or ("/" not in resume and STEP_PREFIX not in resume):
        return []
    folder = Path(resume).expanduser()
    if not re.fullmatch(rf"{STEP_PREFIX}\d+", folder.name):
        return [
            Problem(
                "checkpoint.resume",
                f"{resume!r} is not a checkpoint folder: give .../checkpoints/global_step_K (K an iteration), or auto",
            )
        ]
    if not folder.is_dir():
        siblings = sorted(p.name for p in folder.parent.glob(f"{STEP_PREFIX}*")) if folder.parent.is_dir() else []
        found = f" ({folder.parent} holds {', '.join(siblings)})" if siblings else ""
        return [
            Problem(
                "checkpoint.resume",
                f"{resume!r} does not exist{found}: give an existing checkpoint folder, or checkpoint.resume=auto "
                "(the latest checkpoint under output_dir)",
            )
        ]
    return []


def resume_folder(cfg: TrainConfig) -> Path | None:
    """The checkpoint folder a launch will resume from: the given ``global_step_K``, the latest one under
    ``output_dir`` with ``auto``, or None (a fresh run)."""
    resume = cfg.checkpoint.resume
    if resume == "disable":
        return None
    if resume == "auto":
        run = RunFolder(Path(cfg.output_dir).expanduser())
        if not run.tracker.is_file():
            return None
        return run.checkpoints / f"{STEP_PREFIX}{run.tracker.read_text(encoding='utf-8').strip()}"
    return Path(resume).expanduser()


def check_resume_state(cfg: TrainConfig) -> list[Problem]:
    """The env slots saved in the checkpoint to resume (``verlog_rollout.pkl``) fit this run: the same number of
    slots, the same env id (or the same task families), before Ray or a model starts."""
    import pickle

    folder = resume_folder(cfg)
    path = None if folder is None else folder / "verlog_rollout.pkl"
    if path is None or not path.is_file():
        return []  # a fresh run, or a checkpoint without the file (the trainer names that one)
    try:
        with open(path, "rb") as f:
            state = pickle.load(f)
    except Exception as exc:  # a damaged file: unpickling can raise almost anything
        return [
            Problem(
                "checkpoint.resume",
                f"{path} cannot be read ({type(exc).__name__}: {exc}): resume from "
                "another checkpoint, or start a new run (checkpoint.resume=disable)",
            )
        ]
    if not isinstance(state, dict):
        return []
    fix = (
        "resume with the settings of the run that saved it, or start a new run (checkpoint.resume=disable, or a new "
        "output_dir)"
    )
    problems = []
    saved_slots = state.get("num_slots")
    if saved_slots is not None and saved_slots != cfg.rollout.num_slots:
        problems.append(
            Problem(
                "rollout.num_slots",
                f"the checkpoint {folder} has {saved_slots} env slots, this run "
                f"{cfg.rollout.num_slots}: set rollout.num_slots={saved_slots}, or {fix}",
            )
        )
    curriculum = state.get("curriculum")
    if (curriculum is not None) != bool(cfg.env.tasks):
        saved = "a multi-task run (env.tasks)" if curriculum is not None else "a single-task run"
        problems.append(
            Problem(
                "env.tasks",
                f"the checkpoint {folder} was saved by {saved} and this run is "
                f"{'multi-task' if cfg.env.tasks else 'single-task'}: {fix}",
            )
        )
    elif curriculum is not None:
        saved_families = list(curriculum.get("families", []))
        if saved_families != list(cfg.env.tasks):
            problems.append(
                Problem(
                    "env.tasks",
                    f"the checkpoint {folder} trains the task families {saved_families}, "
                    f"this run {list(cfg.env.tasks)}: {fix}",
                )
            )
    else:
        saved_ids = set(state.get("env_ids") or [])
        env_id = cfg.env.id or ""
        if saved_ids and ":" not in env_id and saved_ids != {env_id}:
            problems.append(
                Problem(
                    "env.id",
                    f"the checkpoint {folder} holds env slots of {sorted(saved_ids)}, this run env.id={env_id}: {fix}",
                )
            )
    return problems


# ------------------------------------------------------------------------------------------------ verl: section
VERL_KEYS_VERLOG_ADDS = (
    "actor_rollout_ref.rollout.agent.agent_loop_manager_class",
    "actor_rollout_ref.model.override_config.attn_implementation",
    "critic.model.override_config.attn_implementation",
    "actor_rollout_ref.actor.fsdp_config.mixed_precision",
    "actor_rollout_ref.ref.fsdp_config.mixed_precision",
    "critic.fsdp.mixed_precision",
    "actor_rollout_ref.rollout.enable_sleep_mode",
)
"""Keys verlog adds to verl's PPO config (Hydra's ``+key=...`` in verlog/trainer/config.py's ``verl_overrides``;
tests/verlog/config/test_verl_section.py keeps the two equal): a ``verl:`` key at or under one of them is taken."""
VERL_FIX = (
    "the verl: section takes only the keys of verl's own PPO config (verl/trainer/config/ppo_trainer.yaml in the verl "
    "package)"
)


@functools.lru_cache(maxsize=1)
def verl_ppo_config() -> dict[str, Any] | None:
    """verl's PPO config as composed from its own YAML files (verl/trainer/config/ppo_trainer.yaml and its
    defaults), as plain data, without importing verl (about 0.4 s); None when verl is not installed there."""
    import importlib.util

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    spec = importlib.util.find_spec("verl")  # finds the package without running it
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    folder = next(
        (Path(p) / "trainer" / "config" for p in locations if (Path(p) / "trainer" / "config").is_dir()), None
    )
    if folder is None or not (folder / "ppo_trainer.yaml").is_file():
        return None
    hydra_was = GlobalHydra.instance().is_initialized()
    if hydra_was:
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(folder), version_base=None):
            composed = compose(config_name="ppo_trainer")
        data = OmegaConf.to_container(composed, resolve=False)
    except Exception:  # verl's own files: the launch reports what is wrong with them
        return None
    finally:
        GlobalHydra.instance().clear()
    return data if isinstance(data, dict) else None


def _verl_leaves(node: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """The ``verl:`` section as (dotted key, value) pairs: nested sections and dotted names alike."""
    out: list[tuple[str, Any]] = []
    for key, value in dict(node).items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out += _verl_leaves(value, name + ".")
        else:
            out.append((name, value))
    return out


def _dotted_keys(node: Any, prefix: str = "") -> list[str]:
    out: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            name = f"{prefix}{key}"
            out.append(name)
            out += _dotted_keys(value, name + ".")
    return out


def check_verl_section(cfg: TrainConfig) -> list[Problem]:
    """Every key of the ``verl:`` section is a key of verl's PPO config (:func:`verl_ppo_config`, or one verlog adds:
    :data:`VERL_KEYS_VERLOG_ADDS`); a problem for each that is not, with the closest of verl's keys and the fix (the
    launch merges the section into verl's config, where an unknown key was OmegaConf's multi-line "not in struct"
    text, after a tiny model had been built). Only keys are checked: verl's YAML gives its values no types."""
    if not cfg.verl:
        return []
    base = verl_ppo_config()
    if base is None:
        return []
    problems: list[Problem] = []
    for path, value in _verl_leaves(cfg.verl):
        if any(path == key or path.startswith(key + ".") for key in VERL_KEYS_VERLOG_ADDS):
            continue
        parts, node = path.split("."), base
        for i, part in enumerate(parts):
            if not isinstance(node, dict):  # a value (a section may replace it), a list or null: verl decides
                break
            if part in node:
                node = node[part]
                continue
            problems.append(Problem(f"verl.{path}", _unknown_verl_key(base, parts, i, node, value)))
            break
    return problems


def _unknown_verl_key(base: dict[str, Any], parts: list[str], i: int, node: dict[str, Any], value: Any) -> str:
    """The message for ``verl.<parts>``, whose ``parts[i]`` is not a key of ``node`` (``parts[:i]`` in verl's
    config): the key, the closest of verl's keys, the fix."""
    path, where = ".".join(parts), ".".join(parts[:i])
    close = [
        ".".join([*parts[:i], c, *parts[i + 1 :]]) for c in difflib.get_close_matches(parts[i], list(node), 3, 0.75)
    ]
    known = _dotted_keys(base)
    if not close:  # the right name in another section (verl.actor_rollout_ref.ppo_mini_batch_size)
        close = [k for k in known if k.rsplit(".", 1)[-1] == parts[-1]][:3]
    if not close:  # ... misspelt as well
        names = {k.rsplit(".", 1)[-1] for k in known}
        near = set(difflib.get_close_matches(parts[-1], names, 3, 0.85))
        close = [k for k in known if k.rsplit(".", 1)[-1] in near][:3]
    section = f"under verl.{where}" if where else "at its top level"
    text = f"verl's PPO config has no key {parts[i]!r} {section}."
    if close:
        shown = str(value).lower() if isinstance(value, bool) else "null" if value is None else value
        text += f" Did you mean {', '.join(f'verl.{c}' for c in close)}? Write verl.{close[0]}={shown}, or drop it;"
    else:
        keys = ", ".join(sorted(node)[:12]) + (", ..." if len(node) > 12 else "")
        text += f" Keys {section}: {keys}. Drop it;"
    return f"verl.{path}: {text} {VERL_FIX}"


# ------------------------------------------------------------------------------------------------ output_dir
def output_dir_problems(cfg: TrainConfig, overwrite: bool = False) -> list[Problem]:
    """Why a launch cannot write into ``output_dir``: a file, or a path under a file; a fresh run into a folder that
    holds another run's outputs (unless ``overwrite``, which then deletes them: :func:`check_output_dir`);
    ``overwrite`` with a resume path.

    A run is fresh with ``checkpoint.resume=disable``, or ``auto`` when ``output_dir`` has no checkpoint to resume.
    """
    out = Path(cfg.output_dir)
    resume = cfg.checkpoint.resume
    if out.exists() and not out.is_dir():
        return [Problem("output_dir", f"output_dir={out} is a file, not a folder: give a folder for the run's outputs")]
    where = creation_problem(out)
    if where is not None:
        return [
            Problem(
                "output_dir",
                f"output_dir={out} cannot be created: {where}: give a folder under one you can write to",
            )
        ]
    if resume not in RESUME_MODES:
        if overwrite:
            return [
                Problem(
                    "--overwrite",
                    "--overwrite starts a fresh run and deletes output_dir's checkpoints; it does not go with "
                    f"checkpoint.resume={resume}: drop one of them",
                )
            ]
        return []
    latest = RunFolder(out).tracker
    found = [out / name for name in RUN_DATA if (out / name).exists()]
    if not found or overwrite or (resume == "auto" and latest.is_file()):
        return []
    names = ", ".join(p.name for p in found)
    if resume == "disable":
        why = "checkpoint.resume=disable starts a fresh run, which would mix its outputs into that run's"
        if latest.is_file():
            why += (
                f"; to continue that run (its checkpoints reach iteration {latest.read_text().strip()}), use "
                "checkpoint.resume=auto"
            )
    else:
        why = "it has no checkpoint for checkpoint.resume=auto to continue, so a fresh run would mix its outputs in"
    return [
        Problem(
            "output_dir",
            f"output_dir={out} holds another run ({names}); {why}. To start clean: a new output_dir=..., or "
            "--overwrite (deletes that run's outputs first). Nothing was started.",
        )
    ]


def check_output_dir(cfg: TrainConfig, overwrite: bool = False) -> list[Path]:
    """Refuse what :func:`output_dir_problems` refuses; with ``overwrite``, delete the outputs of the run in
    ``output_dir`` (:data:`RUN_OUTPUTS`, only those) for a fresh run. Returns what was deleted.

    Raises:
        TrainConfigError: the problems of :func:`output_dir_problems`.
    """
    raise_if(output_dir_problems(cfg, overwrite))
    out = Path(cfg.output_dir)
    if not overwrite or not any((out / name).exists() for name in RUN_DATA):
        return []
    found = [out / name for name in RUN_OUTPUTS if (out / name).exists()]
    for path in found:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return found
