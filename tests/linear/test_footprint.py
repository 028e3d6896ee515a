"""What a training process maps besides its data: nothing of the ``cryptography`` package
in one worker, nor in the ranks of a job whose links run on the compiled record layer (its
control channel on ``terascale._gcm``, its keys on the standard library's HMAC)."""

from __future__ import annotations

import os
import subprocess
import sys

_CHILD = r"""
import sys
from terascale.linear import train
from terascale.linear.synthetic import write_wide

path = write_wide(sys.argv[1], 200, seed=1)
train(path, bits=12, cache=False)
print(sorted(m for m in sys.modules if m.split(".")[0] == "cryptography"))
"""


def test_one_worker_does_not_load_the_links_crypto(tmp_path):
    env = {**os.environ, "TERASCALE_QUIET": "1"}
    for k in [k for k in env if k.startswith("TERASCALE_") and k != "TERASCALE_QUIET"]:
        del env[k]  # (not a launched worker)
    out = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "w.vw")], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout


_JOINED = r"""
import sys
import numpy as np
import terascale

comm = terascale.init()
x = np.full(1 << 16, comm.rank + 1.0)
comm.allreduce(x, out=x)
assert x[0] == 3.0
print("rank", comm.rank, "loaded", sorted(m for m in sys.modules
                                           if m.split(".")[0] == "cryptography"))
comm.close()
"""


def test_the_ranks_of_a_job_on_the_compiled_record_layer_do_not_load_cryptography():
    import pytest

    from terascale import _auth
    from terascale.transport import _secure

    mod = _secure._compiled()
    if mod is None or not mod.AEGIS_HARDWARE or _auth._compiled_gcm() is None:
        pytest.skip("links here would seal through cryptography (no compiled layer, or no "
                    "AES instructions for AEGISMAC-128X4)")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TERASCALE_") or k == "TERASCALE_QUIET"}
    out = subprocess.run([sys.executable, "-m", "terascale", "run", "-n", "2", "--timeout",
                          "60", "--no-prefix", sys.executable, "-c", _JOINED], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split("\n")[:2]) == ["rank 0 loaded []", "rank 1 loaded []"], \
        out.stdout


def test_a_caches_feature_list_is_mapped_and_writes_to_it_stay_private(tmp_path):
    # the list is the page cache's pages of features.npy, mapped copy on write: no fresh
    # memory to fault in, and an array like any other to the code that holds it
    import numpy as np

    from terascale.linear import ParseOptions
    from terascale.linear._io._cache import load_cached
    from terascale.linear.synthetic import write_wide

    path = write_wide(str(tmp_path / "w.vw"), 300, seed=2)
    opts = ParseOptions(bits=16)
    load_cached(path, opts, cache_dir=str(tmp_path / "c"))  # writes the cache
    blocks, hit = load_cached(path, opts, cache_dir=str(tmp_path / "c"))
    assert hit
    first = blocks.features()
    assert type(first) is np.ndarray and first.flags.writeable
    assert first.dtype == np.uint32 and np.all(np.diff(first.astype(np.int64)) > 0)
    with open("/proc/self/maps") as f:
        assert any(line.rstrip().endswith("features.npy") for line in f)
    want = first.copy()
    first[:] = 0
    assert np.array_equal(blocks.features(), want)  # the file is as it was
