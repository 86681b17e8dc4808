"""verlog.run.folder: the run folder's lock (real processes, real flock), checkpoints made latest only when complete,
and logs a kill cannot leave torn for the resume (the kill tests on the real path: trainer/test_kill_e2e.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verlog.run.files import append_jsonl, read_jsonl
from verlog.run.folder import (
    TRACKER,
    RunFolder,
    RunFolderError,
    RunLock,
    check_writable,
    commit_checkpoint,
    cut_logs,
    incoming_root,
    latest_step,
    lock_holder,
    recover_checkpoints,
    step_folder,
)

HOLD = textwrap.dedent(
    """
    import sys, time
    from verlog.run.folder import RunLock
    lock = RunLock(sys.argv[1])
    lock.acquire()
    print("held", flush=True)
    if sys.argv[2] == "release":
        lock.release()
        print("released", flush=True)
    time.sleep(600)
    """
)


def _holder(folder: Path, mode: str = "hold") -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), mode], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    if mode == "release":
        assert proc.stdout.readline().strip() == "released"
    return proc


def test_a_live_holder_is_named_and_never_taken_over(tmp_path):
    proc = _holder(tmp_path)
    try:
        holder = lock_holder(tmp_path)
        assert holder is not None and holder["pid"] == proc.pid
        with pytest.raises(RunFolderError, match=rf"in use by another run \(pid {proc.pid}, on "):
            RunLock(tmp_path).acquire()
        assert json.loads((tmp_path / "run.lock").read_text())["pid"] == proc.pid  # its record untouched
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_holders_lock_is_taken_over_and_said(tmp_path):
    proc = _holder(tmp_path)
    proc.kill()  # SIGKILL: no chance to release
    proc.wait()
    assert lock_holder(tmp_path) is None  # the kernel let the lock go with the process
    lock = RunLock(tmp_path)
    note = lock.acquire()
    assert note is not None and f"pid {proc.pid}" in note and "stopped without releasing it" in note
    assert json.loads((tmp_path / "run.lock").read_text())["pid"] == os.getpid()
    lock.release()
    assert json.loads((tmp_path / "run.lock").read_text())["released"] is True
    # a run that released its lock before it was killed leaves no note
    proc = _holder(tmp_path, "release")
    proc.kill()
    proc.wait()
    with RunLock(tmp_path) as again:
        assert again.acquire() is None


def test_a_cleanly_released_lock_gives_no_note(tmp_path):
    first = RunLock(tmp_path)
    assert first.acquire() is None
    first.release()
    second = RunLock(tmp_path)
    assert second.acquire() is None
    second.release()


def test_unwritable_folders_are_named(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(RunFolderError, match="is a file, not a folder"):
        check_writable(a_file / "run")
    if os.geteuid() != 0:  # root writes through permissions
        locked = tmp_path / "ro"
        locked.mkdir(mode=0o500)
        with pytest.raises(RunFolderError, match="permission denied"):
            check_writable(locked / "run")


def _complete(folder: Path) -> None:
    (folder / "actor").mkdir(parents=True)
    (folder / "data.pt").write_bytes(b"x")
    (folder / "verlog_rollout.pkl").write_bytes(b"x")


def test_a_checkpoint_becomes_latest_only_when_complete(tmp_path):
    ckpts = tmp_path / "checkpoints"
    _complete(step_folder(incoming_root(ckpts), 2))
    (incoming_root(ckpts) / TRACKER).write_text("2")  # verl writes its own tracker where it writes the checkpoint
    commit_checkpoint(ckpts, 2)
    assert latest_step(ckpts) == 2 and (ckpts / "global_step_2" / "data.pt").is_file()
    assert not incoming_root(ckpts).exists()
    # a torn one (verl wrote the actor, the kill came before the rest): refused, the latest stays
    torn = step_folder(incoming_root(ckpts), 4)
    (torn / "actor").mkdir(parents=True)
    (incoming_root(ckpts) / TRACKER).write_text("4")
    with pytest.raises(RunFolderError, match=r"not complete \(no data.pt, verlog_rollout.pkl\)"):
        commit_checkpoint(ckpts, 4)
    assert latest_step(ckpts) == 2
    # the next start removes it and says which checkpoint the run resumes from
    lines = recover_checkpoints(ckpts)
    assert len(lines) == 1 and "global_step_4 was being written" in lines[0] and "global_step_2" in lines[0]
    assert not incoming_root(ckpts).exists() and latest_step(ckpts) == 2
    assert recover_checkpoints(ckpts) == []


def test_an_incomplete_latest_checkpoint_falls_back_and_moves_aside(tmp_path):
    ckpts = tmp_path / "checkpoints"
    _complete(ckpts / "global_step_2")
    (ckpts / "global_step_4" / "actor").mkdir(parents=True)  # a checkpoint of an older verlog, torn in place
    (ckpts / TRACKER).write_text("4")
    (lines,) = recover_checkpoints(ckpts)
    assert "global_step_4 is incomplete (no data.pt, verlog_rollout.pkl" in lines
    assert "resuming from the last complete one, global_step_2" in lines
    assert latest_step(ckpts) == 2 and not (ckpts / "global_step_4").exists()
    assert [p.name.startswith("global_step_4-") for p in (tmp_path / "superseded").iterdir()] == [True]


def test_a_torn_last_line_is_skipped_and_cut_on_resume(tmp_path):
    path = tmp_path / "metrics.jsonl"
    append_jsonl(path, [{"step": 0, "eval/success": 0.1}, {"step": 1}, {"step": 2}, {"step": 3}])
    with open(path, "ab") as f:
        f.write(b'{"step": 4, "critic/vf_lo')  # the kill came in the middle of this write
    warnings: list[str] = []
    records = read_jsonl(path, warn=warnings.append)
    assert [r["step"] for r in records] == [0, 1, 2, 3] and "line 5 is torn" in warnings[0]
    tapes = tmp_path / "tapes" / "train.jsonl"
    append_jsonl(tapes, [{"iteration": i, "turn": 0} for i in (1, 2, 3)])
    lines = cut_logs(tmp_path, 2)
    assert [r["step"] for r in read_jsonl(path)] == [0, 1, 2]
    assert [r["iteration"] for r in read_jsonl(tapes)] == [1, 2]
    # nothing is lost: the cut records wait in superseded/
    aside = (tmp_path / "superseded" / "metrics.jsonl").read_bytes().split(b"\n")
    assert aside[0] == b'{"step": 3}' and aside[1].startswith(b'{"step": 4, "critic')
    assert len(lines) == 2 and lines[0].startswith("metrics.jsonl: 2 record(s)")
    assert cut_logs(tmp_path, 2) == []  # a second resume from 2 has nothing to cut


def test_the_run_folder_names_every_path_of_a_run(tmp_path):
    run = RunFolder(tmp_path)
    assert run.checkpoint(4) == tmp_path / "checkpoints" / "global_step_4" == step_folder(run.checkpoints, 4)
    assert run.tracker == tmp_path / "checkpoints" / TRACKER and run.incoming == incoming_root(run.checkpoints)
    assert [p.relative_to(tmp_path).as_posix() for p, _ in run.step_logs()] == [
        "metrics.jsonl",
        "rollout.jsonl",
        "tapes/train.jsonl",
        "tapes/eval.jsonl",
        "eval/episodes.jsonl",
    ]
    assert (run.lock.name, run.train_log.relative_to(tmp_path).as_posix()) == ("run.lock", "logs/train.log")
    assert run.latest_step() is None
    run.checkpoints.mkdir()
    run.tracker.write_text("6")
    assert run.latest_step() == 6 == latest_step(run.checkpoints)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints"]  # naming a path creates nothing


@pytest.mark.parametrize("dry_run", [True, False])
def test_verlog_train_into_a_folder_in_use_exits_2_naming_the_holder(tmp_path, dry_run):
    out = tmp_path / "run"
    proc = _holder(out)
    try:
        args = [
            sys.executable,
            "-m",
            "verlog.train",
            "env=toy_delayed",
            f"output_dir={out}",
            f"model.path={tmp_path}/m",
        ]
        result = subprocess.run([*args, *(["--dry-run"] if dry_run else [])], capture_output=True, text=True)
        assert result.returncode == 2, result.stderr[-2000:]
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("verlog train: error: output_dir=") and f"in use by another run (pid {proc.pid}" in line
        assert sorted(p.name for p in out.iterdir()) == ["run.lock"]  # nothing else written
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs (a disk that fills): needs root and mount, as this project's CI machine has."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def _fill(folder: Path) -> None:
    with open(folder / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass


def test_a_full_disk_keeps_the_last_complete_checkpoint(small_disk):
    from verlog.errors import RunFault

    ckpts = small_disk / "run" / "checkpoints"
    _complete(step_folder(incoming_root(ckpts), 2))
    commit_checkpoint(ckpts, 2)
    _complete(step_folder(incoming_root(ckpts), 4))
    _fill(small_disk)
    with pytest.raises(RunFault, match=r"iteration 4 could not be made the latest \(the disk is full\); the latest "):
        commit_checkpoint(ckpts, 4)
    assert latest_step(ckpts) == 2 and (ckpts / "global_step_2" / "data.pt").is_file()
    with pytest.raises(RunFolderError, match=r"cannot be written \(the disk is full\)"):
        check_writable(small_disk / "run")
