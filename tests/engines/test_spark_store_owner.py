"""The Spark engine's partition cache (``TMPDIR/terascale-cache/spark`` by default) as
another user of the host sees it: a directory that user made first, or may write, would let
them plant the partitions a fit maps as its data. Such a directory is refused with a
``ConfigError`` naming it, before anything in it is read or built (no Spark needed)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from terascale._errors import ConfigError
from terascale.engines.spark._store import open_shard

OTHER = 65534  # nobody: the other user


def _never(writer: object) -> None:
    raise AssertionError("the partition was built in a directory another user may write")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a directory to another user")
@pytest.mark.parametrize("where", ["given", "default", "default-parent"])
def test_a_partition_cache_another_user_could_write_is_refused(tmp_path: Path, monkeypatch,
                                                               where: str) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    theirs = {"given": tmp_path / "shared", "default": tmp_path / "terascale-cache" / "spark",
              "default-parent": tmp_path / "terascale-cache"}[where]
    theirs.mkdir(parents=True)
    os.chown(theirs, OTHER, OTHER)
    os.chmod(theirs, 0o777)
    given = str(theirs) if where == "given" else None
    with pytest.raises(ConfigError, match=f"uid {OTHER} with mode 777, so another user"):
        open_shard("data", given, (0, 1), _never, describe="d", parse=None, bits=8,
                   sources=[])


def test_the_default_partition_cache_is_made_private(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(AssertionError, match="partition was built"):  # the check passed
        open_shard("data", None, (0, 1), _never, describe="d", parse=None, bits=8, sources=[])
    for d in (tmp_path / "terascale-cache", tmp_path / "terascale-cache" / "spark"):
        assert not d.stat().st_mode & 0o077, oct(d.stat().st_mode)
