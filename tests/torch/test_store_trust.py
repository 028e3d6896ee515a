"""torch's TCPStore is not authenticated: whoever reaches it can write the keys the terascale
backend reads to join (the rendezvous address, and a secret when the user gave none). A rank
that holds the job secret the user gave must join with that secret and nothing the store
says, so a forged store entry can only stop it (``AuthError``), never put it in a
stranger's job and hand it a stranger's sums."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.distributed import PrefixStore, TCPStore  # noqa: E402

from terascale import TerascaleError  # noqa: E402
from terascale._init import connect  # noqa: E402
from terascale.rendezvous import RendezvousServer  # noqa: E402

_VICTIM = """
import sys, torch, torch.distributed as dist
import terascale.torch  # registers the backend
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False)
dist.init_process_group("terascale", store=store, rank=1, world_size=2)
t = torch.ones(1)
dist.all_reduce(t)
print("sum", float(t[0]), flush=True)
"""


def test_a_forged_store_entry_does_not_replace_the_users_secret() -> None:
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    # The attacker: a rendezvous and a rank 0 of its own, under a secret it chose,
    # advertised in the store in place of the real rank 0's entries.
    evil = RendezvousServer(2, b"attacker-chosen", host="127.0.0.1", port=0).start()
    # (the keys as the backend reads them: under the prefixes init_process_group adds)
    seen = PrefixStore("cpu/", PrefixStore("0/", store))
    seen.set("terascale/rendezvous", f"127.0.0.1:{evil.address[1]}")
    seen.set("terascale/secret", "attacker-chosen")
    joined: list[object] = []

    def attacker_rank_0() -> None:
        try:
            comm = connect(0, 2, evil.address, b"attacker-chosen", timeout=8.0)
            joined.append(comm.allreduce(np.full(1, 1000.0, np.float32)))
            comm.close()
        except TerascaleError as e:
            joined.append(e)

    t = threading.Thread(target=attacker_rank_0, daemon=True)
    t.start()
    env = {**os.environ, "TERASCALE_SECRET": os.urandom(16).hex(), "TERASCALE_TIMEOUT": "8"}
    p = subprocess.run([sys.executable, "-c", _VICTIM, str(store.port)], env=env,
                       capture_output=True, text=True, timeout=60)
    t.join(15)
    evil.close()
    assert "sum" not in p.stdout, (p.stdout, joined)  # never the stranger's 1001
    assert p.returncode != 0 and "AuthError" in p.stderr, p.stderr[-2000:]
    assert joined and isinstance(joined[0], TerascaleError), joined  # nor did the stranger
