"""The demo's data in the shared temporary directory, as another user of the host sees it.

``terascale demo`` writes the NYC flights as VW text into ``TMPDIR/terascale-demo``, a name
anyone can create first. Its owner could then leave a symbolic link where the writer puts
its temporary file, and a writer that opened that name would write through the link into
any file the victim may write (root's, when root runs the demo); or leave data files of
their own, which the demo would train on. The writer therefore makes its temporary files
afresh (never through an existing name), and the demo refuses a directory that another user
could write, with a ``ConfigError`` naming it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from terascale._errors import ConfigError

OTHER = 65534  # nobody: the other user
pytest.importorskip("pandas")


def _theirs(d: Path) -> None:
    d.mkdir(parents=True)
    os.chown(d, OTHER, OTHER)
    os.chmod(d, 0o777)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a directory to another user")
def test_a_link_left_where_the_writer_puts_its_temporary_file_is_never_written_through(
        tmp_path: Path) -> None:
    from terascale.linear import write_flights

    precious = tmp_path / "precious"
    precious.write_text("the victim's file\n")
    out = tmp_path / "demo"
    _theirs(out)
    for name in ("flights-train.vw", "flights-test.vw"):
        os.symlink(precious, out / f"{name}.tmp")
        os.lchown(out / f"{name}.tmp", OTHER, OTHER)
    train, test = write_flights(str(out))
    assert precious.read_text() == "the victim's file\n"
    assert Path(train).stat().st_size > 1 << 20 and not Path(train).is_symlink()
    assert Path(test).read_text().startswith(("1 |m 11", "-1 |m 11"))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a directory to another user")
def test_nor_by_the_synthetic_data_writers(tmp_path: Path) -> None:
    from terascale.linear.synthetic import write_dense

    precious = tmp_path / "precious"
    precious.write_text("the victim's file\n")
    out = tmp_path / "bench"
    _theirs(out)
    for name in ("tr.vw", "te.vw"):
        os.symlink(precious, out / f"{name}.tmp")
    write_dense(str(out / "tr.vw"), str(out / "te.vw"), n_train=100, n_test=50)
    assert precious.read_text() == "the victim's file\n"
    assert len((out / "tr.vw").read_text().splitlines()) == 100


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a directory to another user")
def test_the_demo_refuses_a_data_directory_another_user_could_write(tmp_path: Path,
                                                                    monkeypatch) -> None:
    from terascale._demo import data_dir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert data_dir() == str(tmp_path / "terascale-demo")  # made here, private
    assert not (tmp_path / "terascale-demo").stat().st_mode & 0o077
    os.rmdir(tmp_path / "terascale-demo")
    _theirs(tmp_path / "terascale-demo")
    with pytest.raises(ConfigError, match=f"terascale-demo: the directory is owned by uid {OTHER}"):
        data_dir()
