"""Checkpoints never lose the last good state: full disks, corrupt files, killed saves,
fallbacks, pruning by write order, fsync of file and directory."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import terascale
from terascale import Checkpoint, ConfigError, StorageError


def _steps(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".ckpt"))


def _full_disk(monkeypatch: pytest.MonkeyPatch, after: int = 0) -> None:
    real, calls = os.write, [0]

    def write(fd: int, data) -> int:
        calls[0] += 1
        if calls[0] > after:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


def test_full_disk_is_a_storage_error_naming_the_path_and_keeps_the_last_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ck = Checkpoint(tmp_path)
    ck.save(1, {"w": np.arange(3)})
    with monkeypatch.context() as m:
        _full_disk(m)
        with pytest.raises(StorageError) as info:
            ck.save(2, {"w": np.arange(10_000)})
    assert str(tmp_path / "step-000000000002.ckpt") in str(info.value)
    assert "No space left on device" in str(info.value) and info.value.errno == errno.ENOSPC
    assert isinstance(info.value, OSError) and isinstance(info.value, terascale.TerascaleError)
    assert sorted(os.listdir(tmp_path)) == ["LATEST", "step-000000000001.ckpt"]  # no temp left
    step, state = ck.load()
    assert step == 1 and state["w"].tolist() == [0, 1, 2]


def test_full_disk_under_the_launcher_fails_every_rank_with_the_path(tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(f"""
        import errno, os, terascale
        comm = terascale.init()
        ck = terascale.Checkpoint({str(tmp_path / "ck")!r}, comm)
        if comm.rank == 0:
            def write(fd, data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            os.write = write
        try:
            ck.save(3, {{"x": 1}})
        except terascale.StorageError as e:
            print("StorageError", e, flush=True)
            raise SystemExit(2)
    """))
    res = subprocess.run([sys.executable, "-m", "terascale", "run", "-n", "3", "--timeout", "20",
                          sys.executable, str(job)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    for rank in range(3):
        line = next(ln for ln in res.stdout.splitlines() if ln.startswith(f"[{rank}] Storage"))
        assert "step-000000000003.ckpt" in line and "No space left" in line, line


def test_unwritable_directory_is_a_storage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StorageError, match=str(blocker / "ck")):
        Checkpoint(blocker / "ck")


def test_fallback_warns_naming_the_bad_file(tmp_path: Path, caplog) -> None:
    ck = Checkpoint(tmp_path)
    ck.save(1, {"w": 1})
    ck.save(2, {"w": 2})
    bad = tmp_path / "step-000000000002.ckpt"
    raw = bytearray(bad.read_bytes())
    raw[-1] ^= 1
    bad.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING, logger="terascale.checkpoint"):
        step, state = ck.load()
    assert (step, state) == (1, {"w": 1})
    assert any(str(bad) in r.getMessage() for r in caplog.records), caplog.text


def test_no_fallback_warning_when_the_newest_is_good(tmp_path: Path, caplog) -> None:
    ck = Checkpoint(tmp_path)
    ck.save(1, {"w": 1})
    with caplog.at_level(logging.WARNING, logger="terascale.checkpoint"):
        assert ck.load() == (1, {"w": 1})
    assert not caplog.records


def test_stale_temp_files_of_killed_saves_are_removed(tmp_path: Path) -> None:
    # A save killed between creating its temporary file and renaming it leaves the file.
    script = textwrap.dedent(f"""
        import os, terascale
        real = os.replace
        def replace(src, dst):
            if str(dst).endswith(".ckpt"):
                os.kill(os.getpid(), 9)
            real(src, dst)
        ck = terascale.Checkpoint({str(tmp_path)!r})
        os.replace = replace
        ck.save(int(os.environ["STEP"]), {{"pad": b"x" * 100_000}})
    """)
    for step in range(3):
        res = subprocess.run([sys.executable, "-c", script], env={**os.environ,
                             "STEP": str(step)}, timeout=60)
        assert res.returncode == -9
    stale = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert len(stale) == 1, stale  # each killed save removed its predecessor's
    assert Checkpoint(tmp_path).load() is None
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    for n in (*stale, ".LATEST.abc123.tmp"):  # and on save
        (tmp_path / n).write_bytes(b"x")
    (tmp_path / "notes.tmp").write_bytes(b"mine")  # not ours: kept
    Checkpoint(tmp_path).save(7, {"w": 7})
    assert sorted(os.listdir(tmp_path)) == ["LATEST", "notes.tmp", "step-000000000007.ckpt"]


def test_pruning_keeps_what_this_run_wrote_after_a_fallback(tmp_path: Path) -> None:
    ck = Checkpoint(tmp_path, keep=2)
    for step in (5, 10):
        ck.save(step, {"step": step})
    bad = tmp_path / "step-000000000010.ckpt"
    bad.write_bytes(bad.read_bytes()[:-3])  # torn
    run2 = Checkpoint(tmp_path, keep=2)
    step, state = run2.load()
    assert step == 5
    run2.save(6, {"step": 6})
    assert "step-000000000006.ckpt" in _steps(tmp_path)
    run2.save(7, {"step": 7})
    assert _steps(tmp_path) == ["step-000000000006.ckpt", "step-000000000007.ckpt"]
    assert run2.load() == (7, {"step": 7}) and run2.latest_step == 7


def test_a_fresh_run_is_not_pruned_by_an_older_runs_higher_steps(tmp_path: Path) -> None:
    Checkpoint(tmp_path, keep=2).save(100, {"step": 100})
    fresh = Checkpoint(tmp_path, keep=1)
    fresh.save(1, {"step": 1})
    assert _steps(tmp_path) == ["step-000000000001.ckpt"]
    assert fresh.load() == (1, {"step": 1})


def test_saves_fsync_the_file_and_the_directory(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    Checkpoint(tmp_path).save(1, {"w": 1})
    assert any(p.startswith(str(tmp_path / ".step-000000000001.ckpt.")) for p in synced), synced
    assert synced.count(str(tmp_path)) >= 2  # after the checkpoint's and LATEST's renames
    synced.clear()
    from terascale.linear import LinearModel
    model = _tiny_model(tmp_path)
    model.save(str(tmp_path / "m.npz"))
    assert any(p.startswith(str(tmp_path / ".tmp-model-")) for p in synced), synced
    assert str(tmp_path) in synced
    assert isinstance(LinearModel.load(str(tmp_path / "m.npz")), LinearModel)


def _tiny_model(tmp_path: Path):
    from terascale.linear import train
    data = tmp_path / "d.vw"
    data.write_text("".join(f"{1 if i % 2 else -1} | a:{i % 5} b{i % 3}\n" for i in range(50)))
    return train(str(data), passes=1)


def test_model_save_whose_fsync_fails_names_the_path(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    model = _tiny_model(tmp_path)

    def fsync(fd: int) -> None:  # what a full NFS or thin-provisioned disk reports
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(StorageError, match=str(tmp_path / "m.npz")):
        model.save(str(tmp_path / "m.npz"))
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-model-")]
    assert not (tmp_path / "m.npz").exists()


@pytest.fixture
def tiny_disk(tmp_path: Path):
    """A 256 KiB tmpfs: a real full disk (needs root and mount; skipped elsewhere)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs",
                                            str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_really_full_disk_keeps_the_last_checkpoint_and_model(tiny_disk: Path,
                                                                tmp_path: Path) -> None:
    ck = Checkpoint(tiny_disk / "ck", keep=3)
    ck.save(1, {"w": b"x" * 50_000})
    with pytest.raises(StorageError, match="step-000000000002.ckpt.*No space left"):
        ck.save(2, {"w": b"y" * 400_000})
    assert ck.load() == (1, {"w": b"x" * 50_000})
    assert _steps(tiny_disk / "ck") == ["step-000000000001.ckpt"]
    model = _tiny_model(tmp_path)
    (tiny_disk / "fill").write_bytes(b"z" * (os.statvfs(tiny_disk).f_bavail *
                                             os.statvfs(tiny_disk).f_frsize))
    with pytest.raises(StorageError, match=str(tiny_disk / "m.npz")):
        model.save(str(tiny_disk / "m.npz"))


def test_a_checkpoint_another_user_could_write_is_never_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "code-ran"

    class Evil:
        def __reduce__(self):  # what unpickling it would run
            return (os.system, (f"touch {marker}",))

    ck = Checkpoint(tmp_path / "ck")
    ck.save(1, {"w": Evil()})  # (the writer's own code: a pickle may run anything)
    marker.unlink(missing_ok=True)
    path = next((tmp_path / "ck").glob("step-*.ckpt"))
    path.chmod(0o666)
    with pytest.raises(ConfigError, match="another user could have written it"):
        ck.load()
    assert not marker.exists()
    path.chmod(0o644)
    ck.load()
    assert marker.exists()  # the same file, owned and private again: loaded


def test_a_checkpoint_directory_another_user_could_write_is_refused(tmp_path: Path) -> None:
    """Whoever may rename entries there could hand back an older state under a newer step's
    name: refused on load and on save, naming the directory."""
    ck = Checkpoint(tmp_path / "ck")
    assert (tmp_path / "ck").stat().st_mode & 0o777 == 0o700  # created private
    ck.save(1, {"w": 1})
    (tmp_path / "ck").chmod(0o777)
    with pytest.raises(ConfigError, match=r"ck is owned by uid \d+ with mode 777.*"
                                          "could have written the checkpoint directory"):
        ck.load()
    with pytest.raises(ConfigError, match="checkpoint save: .*mode 777"):
        ck.save(2, {"w": 2})
    (tmp_path / "ck").chmod(0o755)
    assert ck.load() == (1, {"w": 1})


def test_a_fifo_in_the_checkpoint_directory_is_skipped_not_waited_on(tmp_path: Path,
                                                                     caplog) -> None:
    ck = Checkpoint(tmp_path / "ck")
    ck.save(1, {"w": 1})
    os.mkfifo(tmp_path / "ck" / "step-000000000009.ckpt")  # opening it to read would block
    with caplog.at_level(logging.WARNING, logger="terascale.checkpoint"):
        assert ck.load() == (1, {"w": 1})
    assert "step-000000000009.ckpt is not a regular file" in caplog.text
    ck.save(2, {"w": 2})
    assert ck.load() == (2, {"w": 2})


def test_a_refused_directory_is_a_config_error_on_every_rank_at_once(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    ck.mkdir(mode=0o700)
    ck.chmod(0o777)  # another user could rename entries there
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(f"""
        import terascale
        comm = terascale.init()
        try:
            terascale.Checkpoint({str(ck)!r}, comm).load()
        except terascale.ConfigError as e:
            print("ConfigError", e, flush=True)
            raise SystemExit(3)
    """))
    res = subprocess.run([sys.executable, "-m", "terascale", "run", "-n", "2", "--timeout", "20",
                          sys.executable, str(job)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 3, res.stderr
    for rank in range(2):
        line = next(ln for ln in res.stdout.splitlines() if ln.startswith(f"[{rank}] Config"))
        assert "mode 777" in line and "checkpoint directory" in line, line
