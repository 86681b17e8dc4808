"""Composing ``verlog train``'s config: Hydra over configs/ (and a folder of one's own), with override checks.

:func:`load_config` composes ``configs/train.yaml`` and its groups (env/, model/, hardware/, algorithm/) with
the command line's overrides; a ``--config-dir`` without the root config adds its groups before verlog's. Hydra
rejects an override of a key the composed config does not have (``rollout.num_slot=4``) with "Could not override";
:func:`explain_unknown_keys` turns that into a :class:`ConfigKeyError` naming the closest valid key (:mod:`difflib`)
and the fix. :func:`prepare_overrides` lets ``verl.<any verl key>=...`` through without Hydra's ``+`` (the preflight
checks those keys against verl's own config: :func:`verlog.config.preflight.check_verl_section`).

The result is an untyped DictConfig; :func:`verlog.config.checks.typed_config` gives it its types.

verlog's configs are the repository's top-level configs/ folder; setup.py ships it inside the package as
verlog/configs/ (the package ``verlog.configs``). :data:`DEFAULT_CONFIG_DIR` is the first of the two that holds
``train.yaml`` (:func:`find_config_dir`). :func:`moved_config_path` maps a path under the old ``verlog/configs/``
to its new place, so that commands typed before the move still work. :func:`format_override` writes a value in
Hydra's override syntax (the trainer's overrides of verl's config, the sweep's trials).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from verlog.errors import VerlogError

_PACKAGE = Path(__file__).resolve().parent.parent
CONFIG_DIR_CANDIDATES = (_PACKAGE / "configs", _PACKAGE.parent / "configs")
"""Where verlog's configs are: inside an installed package (site-packages/verlog/configs), else the top-level
configs/ of a source checkout (an editable install, or the repository on the path)."""


def find_config_dir() -> Path:
    """The first of :data:`CONFIG_DIR_CANDIDATES` that holds ``train.yaml``; the installed location when none does
    (:func:`load_config` then says that both are missing)."""
    for folder in CONFIG_DIR_CANDIDATES:
        if (folder / "train.yaml").is_file():
            return folder
    return CONFIG_DIR_CANDIDATES[0]


DEFAULT_CONFIG_DIR = find_config_dir()
"""verlog's own configs (the repository's configs/, installed with the package as verlog/configs/)."""
OLD_CONFIG_PREFIX = ("verlog", "configs")
"""Where the configs were before they moved to the top-level configs/ (issue 25)."""
# the section of verlog's config merged into verl's PPO config: any verl key may be set under it
PASSTHROUGH_SECTION = "verl"
FREE_FORM = ("env.kwargs.", "env.tasks.", "model.tiny.", PASSTHROUGH_SECTION + ".")
"""The sections that take keys of one's own (``+env.kwargs.NAME=VALUE``); the schema types every other key."""
_MISSING = object()


class ConfigKeyError(VerlogError, ValueError):
    """An override names a key (or a config-group option) that verlog's config does not have."""


OPEN_MAPPINGS = ("env.ray.resources",)
"""Keys whose value is a mapping of names a user chooses (Ray resource names): ``KEY={name: 1}`` and
``KEY.name=1`` set them without Hydra's ``+`` (which a new name would otherwise need)."""


def prepare_overrides(overrides: Iterable[str]) -> list[str]:
    """``overrides`` with ``verl.KEY=VALUE`` rewritten to ``++verl.KEY=VALUE`` (set or add under ``verl:``), and the
    same for :data:`OPEN_MAPPINGS`."""
    out = []
    for item in overrides:
        key = item.partition("=")[0]
        open_mapping = any(key == k or key.startswith(k + ".") for k in OPEN_MAPPINGS)
        if "=" in item and (item.startswith(PASSTHROUGH_SECTION + ".") or open_mapping):
            item = "++" + item
        out.append(item)
    return out


def flat_keys(cfg: Any, prefix: str = "") -> list[str]:
    """Every dotted key of ``cfg`` (sections and leaves), e.g. ``["rollout", "rollout.num_slots", ...]``."""
    keys: list[str] = []
    if not isinstance(cfg, DictConfig):
        return keys
    for key in cfg.keys():
        name = f"{prefix}{key}"
        keys.append(name)
        child = cfg._get_node(key)
        if isinstance(child, DictConfig):
            keys += flat_keys(child, name + ".")
    return keys


def closest_key(key: str, valid: Sequence[str]) -> str | None:
    """The valid dotted key nearest to ``key``: by the whole path, else by the last part within the same section."""
    valid = [k for k in valid if not key.startswith(k + ".")]  # never the section the key is in
    match = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if match:
        return match[0]
    parent, _, leaf = key.rpartition(".")
    siblings = {k.rpartition(".")[2]: k for k in valid if k.rpartition(".")[0] == parent}
    match = difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=0.5)
    return siblings[match[0]] if match else None


MOVED_KEYS = {"sampling.max_tokens": "rollout.max_response_tokens"}
"""Keys that the schema holds but training sets under another name (the old or shared spelling -> the one to write):
``sampling`` is the generators' own settings class (verlog/prompting/sampling.py), whose ``max_tokens`` training fills
in from ``rollout.max_response_tokens``."""


def unknown_key_message(key: str, override: str, cfg: DictConfig) -> str:
    """The error text for an override of ``key`` that ``cfg`` lacks: the closest key, the section's keys, the fix."""
    valid = [k for k in flat_keys(cfg) if not k.startswith(PASSTHROUGH_SECTION + ".")]
    guess = MOVED_KEYS.get(key.lstrip("+")) or closest_key(key, valid)
    parent = key.rpartition(".")[0]
    section = OmegaConf.select(cfg, parent, default=None) if parent else cfg
    lines = [f"unknown config key {key!r} in override {override!r}."]
    if guess is not None:
        value = override.split("=", 1)[1] if "=" in override else "..."
        lines.append(f"Did you mean {guess!r}? Write {guess}={value}")
    if isinstance(section, DictConfig):
        lines.append(f"Keys under {parent or 'the top level'}: {', '.join(str(k) for k in section.keys())}")
    if key.startswith(FREE_FORM):
        lines.append(
            f"To add a key the configs do not define on purpose, prefix it with '+' (+{override.lstrip('+')}); "
            "docs/configuration.md lists every key."
        )
    else:
        lines.append(
            "docs/configuration.md lists every key (only env.kwargs, env.tasks, model.tiny and verl take new ones)."
        )
    return "\n".join(lines)


def group_options(config_dir: Path | Sequence[Path], group: str) -> list[str]:
    """The options of config group ``group``: the ``*.yaml`` files in ``config_dir/group`` (of every folder, when
    ``config_dir`` is a list of folders: one's own configs and verlog's)."""
    folders = [config_dir] if isinstance(config_dir, Path) else list(config_dir)
    return sorted({p.stem for f in folders if (f / group).is_dir() for p in (f / group).glob("*.yaml")})


def explain_unknown_keys(
    overrides: Sequence[str], base: DictConfig, config_dir: Path | Sequence[Path]
) -> ConfigKeyError | None:
    """The first override in ``overrides`` that ``base`` (the config composed with the group choices only) cannot
    take, as a :class:`ConfigKeyError`; None when every key and group option exists."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group
        if override.is_add() or override.is_force_add() or override.package is not None or key.startswith("hydra."):
            continue
        options = group_options(config_dir, key)
        if options:
            value = str(override.value()) if not override.is_delete() else ""
            if value and value not in options:
                close = difflib.get_close_matches(value, options, n=1, cutoff=0.5)
                hint = f" Did you mean {key}={close[0]}?" if close else ""
                folders = [config_dir] if isinstance(config_dir, Path) else list(config_dir)
                where = " or ".join(str(f / key) for f in folders)
                return ConfigKeyError(f"no {key} config {value!r} in {where}.{hint} Options: {', '.join(options)}")
            continue
        if OmegaConf.select(base, key, default=_MISSING) is _MISSING:
            return ConfigKeyError(unknown_key_message(key, override.input_line, base))
    return None


def moved_config_path(path: str | os.PathLike) -> Path | None:
    """Where a missing ``path`` under the old ``verlog/configs/`` is now: ``X/verlog/configs/REST`` ->
    ``X/configs/REST`` when that exists, else (a relative path from any folder) verlog's own
    ``DEFAULT_CONFIG_DIR/REST``; None when ``path`` exists, is not under ``verlog/configs/``, or has no new place."""
    given = Path(path)
    if given.exists():
        return None
    parts = given.parts
    starts = [i for i in range(len(parts) - 1) if parts[i : i + 2] == OLD_CONFIG_PREFIX]
    if not starts:
        return None
    i = starts[-1]
    rest = parts[i + 2 :]
    candidates = [Path(*parts[:i], "configs", *rest)]
    if i == 0:
        candidates.append(DEFAULT_CONFIG_DIR.joinpath(*rest))
    return next((c for c in candidates if c.exists()), None)


def moved_config_note(old: str | os.PathLike, new: Path) -> str:
    """The one line a command prints when it reads ``new`` for the old path ``old``."""
    return f"note: verlog's configs moved from verlog/configs/ to configs/: {str(old)!r} is now {str(new)!r}"


def explain_unparsable(overrides: Sequence[str]) -> ConfigKeyError | None:
    """The first override in ``overrides`` that Hydra's override grammar cannot read, as a :class:`ConfigKeyError`
    that says how to quote its value (a non-ASCII character or a ``=`` in it needs quotes that reach Hydra); None when
    each parses on its own."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_overrides([override])
        except HydraException as exc:
            key, sep, value = override.partition("=")
            reason = " ".join(str(exc).split()).split(" See https://")[0]
            if not sep:
                return ConfigKeyError(f"override {override!r} cannot be read ({reason}): write key=value")
            odd = sorted({c for c in value if not c.isascii() or c in "=()'\"" or c.isspace()})
            what = f"its value holds {', '.join(repr(c) for c in odd)}" if odd else f"Hydra says: {reason}"
            inner, outer = ("'", '"') if "'" not in value else ('"', "'")
            quoted = f"{key}={inner}{value}{inner}"
            return ConfigKeyError(
                f"override {override!r} cannot be read by Hydra's override parser ({what}): quote the value, with "
                f"quotes that reach Hydra: {quoted} (in a shell: {outer}{quoted}{outer})"
            )
    return None


def yaml_error_message(exc: Exception) -> str:
    """One line for a config file that PyYAML cannot parse: the file, the line and column, what is wrong there."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "a config file"
    problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
    return f"{where} is not valid YAML ({problem}): fix that file (a tab, an unclosed [ or {{, a stray quote, ...)"


def group_choices(overrides: Sequence[str], config_dir: Path | Sequence[Path]) -> list[str]:
    """The overrides in ``overrides`` that pick an existing config-group option (``env=babyai``)."""
    picked = []
    for item in overrides:
        key, _, value = item.partition("=")
        if value and value in group_options(config_dir, key):
            picked.append(item)
    return picked


def load_config(
    overrides: Sequence[str] = (), config_dir: str | os.PathLike | None = None, config_name: str = "train"
) -> DictConfig:
    """Compose verlog's training config from ``config_dir`` (default: configs/) with ``overrides``.

    A ``config_dir`` without ``{config_name}.yaml`` is a folder of configs of one's own, searched before verlog's
    configs (e.g. ``config_dir/env/my_env.yaml`` is the option ``env=my_env``); one with it replaces them.

    Raises:
        ConfigKeyError: ``config_dir`` is not a folder, the root config is missing, verlog's own configs are missing,
            or an override names a key or group option that does not exist (with the closest one).
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import ConfigCompositionException, HydraException, MissingConfigException

    folder, extra = DEFAULT_CONFIG_DIR, None
    if config_dir is not None:
        given = Path(config_dir)
        if not given.is_dir():
            moved = moved_config_path(given)
            hint = f" ({moved_config_note(config_dir, moved)})" if moved is not None else ""
            raise ConfigKeyError(f"--config-dir {str(config_dir)!r} is not a folder{hint}")
        if (given / f"{config_name}.yaml").exists():
            folder = given
        else:
            extra = given.resolve()
    if folder is DEFAULT_CONFIG_DIR and not (DEFAULT_CONFIG_DIR / "train.yaml").is_file():
        where = " nor ".join(str(c) for c in CONFIG_DIR_CANDIDATES)
        raise ConfigKeyError(
            f"verlog's configs are missing: neither {where} holds train.yaml (an installed package has them in "
            "verlog/configs/, a source checkout in configs/); reinstall verlog, or restore configs/ in the checkout"
        )
    if not (folder / f"{config_name}.yaml").exists():
        raise ConfigKeyError(
            f"no {config_name}.yaml in {folder}: give --config-name of a root config there (e.g. a run's "
            "--config-name config), or leave --config-name out"
        )
    given_overrides = list(overrides)
    overrides = prepare_overrides(given_overrides)
    folders = [folder] if extra is None else [extra, folder]
    search = [] if extra is None else [f"hydra.searchpath=[file://{extra}]"]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(folder.resolve()), version_base=None):
            try:
                return compose(config_name=config_name, overrides=search + list(overrides))
            except (ConfigCompositionException, MissingConfigException) as exc:
                # name the closest valid key / option (Hydra only says "Could not override")
                base = compose(config_name=config_name, overrides=search + group_choices(overrides, folders))
                error = explain_unknown_keys(overrides, base, folders)
                if error is None:
                    raise ConfigKeyError(f"{exc}: check the overrides (docs/configuration.md)") from exc
                raise error from exc
    except HydraException as exc:  # e.g. an override Hydra cannot parse (seed=[, run_name=café)
        unreadable = explain_unparsable(given_overrides)  # as the user wrote them
        if unreadable is not None:
            raise unreadable from None
        text = " ".join(str(exc).split())
        raise ConfigKeyError(f"{text} (the override syntax: key=value, key=[a,b], +new.key=value)") from exc
    except yaml.YAMLError as exc:  # a config file that is not YAML (Hydra lets PyYAML's error through)
        raise ConfigKeyError(yaml_error_message(exc)) from None
    finally:
        GlobalHydra.instance().clear()


_PLAIN_STRING = re.compile(r"^[A-Za-z_./:@+-][\w./:@+-]*$")


def format_value(value: Any) -> str:
    """``value`` in Hydra's override syntax, so that it parses back to the same value and type (a string that would
    read as a number, a boolean or null is quoted)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{format_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if _PLAIN_STRING.match(text) and text.lower() not in ("true", "false", "null") and not _is_number(text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def format_override(key: str, value: Any) -> str:
    """``key=value`` for verlog train's command line."""
    return f"{key}={format_value(value)}"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
