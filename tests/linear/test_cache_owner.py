"""The parsed-data cache as another user of the host sees it.

The default cache lives in the shared temporary directory (``TMPDIR/terascale-cache``),
under a name anyone can guess, and an entry's name follows from the data file's path, size
and modification time, which anyone who can list the file's directory can read. A user who
creates that directory first (or any cache directory another user may write) can plant an
entry for someone else's data, or swap one after their first run: training would then read
the planted examples as that data, and return a model of them without a word. A cache
directory that another user could write is therefore refused with a ``ConfigError`` naming
it, before anything in it is read.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from _linear_data import vw_lines

import terascale.linear as tl
from terascale._errors import ConfigError

OTHER = 65534  # nobody: the other user


def _planted(tmp_path: Path, data: Path, root: Path) -> None:
    """``root`` as another user leaves it: theirs, writable by all, holding an entry under
    the name ``data``'s entry will have, made from other examples."""
    other = tmp_path / "other" / data.name
    other.parent.mkdir()
    other.write_text("\n".join(vw_lines(400, seed=99)) + "\n")
    os.utime(other, ns=(data.stat().st_atime_ns, data.stat().st_mtime_ns))
    staging = tmp_path / "staging"
    for d in (data, other):  # the attacker's own runs, to learn the two entries' names
        tl.train(str(d), bits=16, passes=2, cache_dir=str(staging / d.parent.name))
    (mine,) = os.listdir(staging / data.parent.name)
    (theirs,) = os.listdir(staging / "other")
    assert mine != theirs  # the key names the path: the attacker moves theirs under mine
    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(staging / "other" / theirs, root / mine)
    for d, _, files in os.walk(root):
        os.chown(d, OTHER, OTHER)
        for f in files:
            os.chown(os.path.join(d, f), OTHER, OTHER)
    os.chmod(root, 0o777)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a directory to another user")
@pytest.mark.parametrize("where", ["given", "default"])
def test_a_cache_directory_another_user_could_write_is_never_read(tmp_path: Path,
                                                                 monkeypatch, where: str) -> None:
    data = tmp_path / "mine" / "d.vw"
    data.parent.mkdir()
    data.write_text("\n".join(vw_lines(400, seed=7)) + "\n")
    clean = tl.train(str(data), bits=16, passes=2, cache_dir=str(tmp_path / "private"))
    if where == "given":
        root, given = tmp_path / "shared", {"cache_dir": str(tmp_path / "shared")}
    else:  # the default: TMPDIR/terascale-cache
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
        root, given = tmp_path / "tmp" / "terascale-cache", {}
    _planted(tmp_path, data, root)
    try:
        model = tl.train(str(data), bits=16, passes=2, **given)
    except ConfigError as e:
        assert str(root) in str(e) and f"uid {OTHER}" in str(e), e
        assert "another user" in str(e), e
    else:
        assert np.array_equal(model.dense(), clean.dense()), \
            "trained on the planted entry: the model is another data set's"
        pytest.fail("a cache directory another user may write was used")


def test_the_default_cache_directory_is_made_private(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    data = tmp_path / "d.vw"
    data.write_text("\n".join(vw_lines(200, seed=3)) + "\n")
    tl.train(str(data), bits=16, passes=2)
    mode = (tmp_path / "terascale-cache").stat().st_mode & 0o777
    assert not mode & 0o022, oct(mode)
    again = tl.train(str(data), bits=16, passes=2)  # and read back on the next run
    assert "first_pass_s" not in again.info
