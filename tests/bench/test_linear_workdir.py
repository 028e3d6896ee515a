"""The linear benchmarks' default work directory, ``TMPDIR/terascale-bench-linear``, as
another user of the host sees it: a name anyone can create first, where VW and the
benchmark then write predictions and models by name (through any link left in their place).
It is made private, and one that another user could write is refused with a ``ConfigError``
naming it and ``--dir``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from terascale._errors import ConfigError
from terascale.bench._linear_children import work_dir

OTHER = 65534  # nobody: the other user


def test_the_default_work_directory_is_private_and_dir_is_taken_as_given(tmp_path: Path,
                                                                        monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert work_dir(None) == str(tmp_path / "terascale-bench-linear")
    assert not (tmp_path / "terascale-bench-linear").stat().st_mode & 0o077
    assert work_dir(str(tmp_path / "mine")) == str(tmp_path / "mine")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a directory to another user")
def test_a_default_work_directory_another_user_made_is_refused(tmp_path: Path,
                                                               monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    theirs = tmp_path / "terascale-bench-linear"
    theirs.mkdir()
    os.chown(theirs, OTHER, OTHER)
    os.chmod(theirs, 0o777)
    with pytest.raises(ConfigError, match=f"owned by uid {OTHER}.*give --dir DIR"):
        work_dir(None)
