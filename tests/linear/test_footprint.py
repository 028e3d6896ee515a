"""What a one-worker training process maps besides its data: nothing of the secure links'
crypto library, which only a multi-worker job's links use."""

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
