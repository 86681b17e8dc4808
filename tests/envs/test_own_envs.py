"""Envs of one's own: ``envs.import_modules`` (``--import``), registering twice, spawned workers (issue 15)."""

from __future__ import annotations

import functools
import os
import sys
import textwrap
from pathlib import Path

import faulty_envs
import pytest

import envs
from envs.errors import EnvImportError, EnvRegistrationError
from envs.pool import EnvPool
from envs.registry import IMPORTS_ENV_VAR

HERE = Path(__file__).resolve().parent


@pytest.fixture
def user_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty folder of the user's, the current folder; sys.path and the recorded imports are restored after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv(IMPORTS_ENV_VAR, "")  # undone after the test
    return tmp_path


def _module(folder: Path, name: str, body: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(body))
    sys.modules.pop(name, None)


def test_a_module_in_the_current_folder_registers_ids_also_for_spawned_workers(user_folder: Path) -> None:
    # a lambda factory cannot be sent to a worker: the worker imports the module itself to find the id
    _module(
        user_folder,
        "my_corridors",
        f"""
        import sys
        sys.path.insert(0, {str(HERE)!r})
        import envs
        from faulty_envs import Corridor
        envs.register("mine/corridor", lambda **kwargs: Corridor(**kwargs))
        """,
    )
    (module,) = envs.import_modules(["my_corridors"])
    assert module.__name__ == "my_corridors" and os.environ[IMPORTS_ENV_VAR] == "my_corridors"
    assert str(user_folder) in sys.path and sys.path[-1] == str(user_folder)  # appended: installed packages first
    assert "mine/corridor" in envs.list_envs()
    with (
        EnvPool("mine/corridor", num_envs=2, num_workers=1) as pool,
        EnvPool(faulty_envs.Corridor, num_envs=2, in_process=True) as reference,
    ):
        assert [o.text for o, _ in pool.reset(seeds=4)] == [o.text for o, _ in reference.reset(seeds=4)]
        assert [r[0].text for r in pool.step(["right", "left"])] == [
            r[0].text for r in reference.step(["right", "left"])
        ]


def test_import_errors_name_the_module_and_the_fix(user_folder: Path) -> None:
    with pytest.raises(EnvImportError, match=r"no module named 'no_such_mod': there is no no_such_mod\.py in the "):
        envs.import_modules(["no_such_mod"])
    with pytest.raises(EnvImportError, match=r"'my_lake\.py' is not a module name.*--import my_lake"):
        envs.import_modules(["my_lake.py"])
    _module(user_folder, "broken_envs", "x = 1\nraise RuntimeError('boom')\n")
    with pytest.raises(EnvImportError, match=r"importing 'broken_envs' failed: RuntimeError: boom \(at .*broken_envs"):
        envs.import_modules(["broken_envs"])
    _module(user_folder, "needs_dep", "import not_installed_dependency_xyz\n")
    with pytest.raises(EnvImportError, match=r"it imports 'not_installed_dependency_xyz', which is not installed"):
        envs.import_modules(["needs_dep"])
    assert os.environ[IMPORTS_ENV_VAR] == ""  # nothing recorded for the workers


def _make_thing(**kwargs):
    return faulty_envs.Corridor(**kwargs)


def test_registering_the_same_factory_again_is_allowed_another_is_refused() -> None:
    """docs/adding-an-env.md: a module that registers itself as an entry point, then is imported by it, registers
    the same factory twice; that is fine. Another factory under a taken id is an error naming both."""
    name = f"{__name__}:_make_thing"
    envs.register("mine/twice", name)
    envs.register("mine/twice", _make_thing)  # the entry point's own function: the same definition
    envs.register("mine/twice", name)
    assert envs.registered_factory("mine/twice") is _make_thing
    envs.register("mine/partial", functools.partial(_make_thing, length=3))
    envs.register("mine/partial", functools.partial(_make_thing, length=3))
    with pytest.raises(EnvRegistrationError, match=r"already registered to .*_make_thing.*choose another id"):
        envs.register("mine/twice", faulty_envs.Corridor)
    with pytest.raises(EnvRegistrationError, match="already registered"):
        envs.register("mine/partial", functools.partial(_make_thing, length=4))
    envs.register("mine/twice", faulty_envs.Corridor, overwrite=True)
    assert envs.make("mine/twice").env_id == "mine/twice"  # envs.make records the id the env was built from


def test_a_builtin_id_is_taken_even_before_its_game_is_loaded(user_folder: Path) -> None:
    """The built-in games load lazily; registering one of their ids first used to be accepted and then silently
    replaced by the game (or the other way round): the user trained on another env than they thought."""
    with pytest.raises(EnvRegistrationError, match=r"'babyai/goto' is already registered to 'envs\.babyai\.env"):
        envs.register("babyai/goto", faulty_envs.Corridor)
    script = (
        "import sys; import envs\n"
        "assert 'envs.toy' not in sys.modules\n"
        "try:\n"
        "    envs.register('toy/delayed', dict)\n"
        "except envs.EnvRegistrationError as exc:\n"
        "    print(exc)\n"
    )
    import subprocess

    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert "env id 'toy/delayed' is already registered to 'envs.toy:DelayedRewardEnv'" in proc.stdout, proc.stderr
    envs.register("toy/delayed", envs.registered_factory("toy/delayed"))  # the same factory again is fine
