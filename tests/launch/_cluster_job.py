"""A worker for the multi-node launcher tests (tests/launch/test_multinode.py).

Every rank allreduces its rank + 1 and prints the result; then, by ``JOB_MODE``:
``once`` ends; ``listen`` also prints the addresses listening on the workers' rendezvous
port and torch's MASTER_ADDR; ``die`` makes rank ``JOB_RANK`` exit 7 (on the first attempt only, so that a
restart succeeds); ``loop`` keeps allreducing (until a failure or a stop ends it), after
writing ``JOB_READY`` once every rank is in the loop (rank ``JOB_RANK`` exits 7 once the file
``JOB_KILL`` exists: a worker dying mid-job at a moment the test knows); ``ckpt`` runs 6 steps that checkpoint
to ``JOB_CKPT`` (rank ``JOB_RANK`` dies after step 3 of the first attempt; a restart resumes)
and prints the digest of the final state.
"""

from __future__ import annotations

import hashlib
import os
import time

import numpy as np

import terascale

mode, victim = os.environ.get("JOB_MODE", "once"), int(os.environ.get("JOB_RANK", "-1"))
with terascale.init() as comm:
    total = int(comm.allreduce(comm.rank + 1))
    print(f"rank {comm.rank}/{comm.size} local {comm.local_rank}/{comm.local_size} sum {total} "
          f"restart {os.environ.get('TERASCALE_RESTART')}", flush=True)
    if mode == "listen":
        from terascale.testing import listening

        rdv = int(os.environ["TERASCALE_RENDEZVOUS"].rpartition(":")[2])
        # node 0's launcher serves the rendezvous (this rank's parent on node 0): its
        # sockets only, not another test's server on the same port at another address
        server = int(os.environ.get("JOB_SERVER_PID", os.getppid()))
        print(f"rank {comm.rank} listen {','.join(listening(rdv, pid=server))} "
              f"master {os.environ['MASTER_ADDR']}", flush=True)
    if mode == "die" and comm.rank == victim and os.environ.get("TERASCALE_RESTART") == "0":
        raise SystemExit(7)
    if mode == "ckpt":
        ck = terascale.Checkpoint(os.environ["JOB_CKPT"], comm)
        got = ck.load()
        step, w = (got[0], got[1]["w"]) if got else (0, np.zeros(1000))
        print(f"rank {comm.rank} starts at step {step}", flush=True)
        for s in range(step, 6):
            g = np.random.default_rng(100 * s + comm.rank).uniform(-1, 1, 1000)
            w = 0.9 * w + comm.allreduce(g, algorithm="ring") / comm.size
            ck.save(s + 1, {"w": w})
            if comm.rank == victim and os.environ.get("TERASCALE_RESTART") == "0" and s == 2:
                raise SystemExit(7)
        print(f"rank {comm.rank} digest {hashlib.sha256(w.tobytes()).hexdigest()}", flush=True)
    if mode == "loop":
        comm.barrier()
        if comm.rank == 0:
            with open(os.environ["JOB_READY"], "w") as f:
                f.write("ready")
        kill = os.environ.get("JOB_KILL")
        while True:
            comm.allreduce(np.ones(1000))
            if kill and comm.rank == victim and os.path.exists(kill):
                os._exit(7)  # no goodbye to the peers: as a crash
            time.sleep(0.05)
    comm.barrier()
