"""One rank of an elastic job: DDP on the "terascale" backend; on torchrun's first attempt
rank 1 kills itself (SIGKILL) at step 2, so the agent restarts the group
(``--max-restarts``), and the second attempt trains to the end. On the second attempt rank 0
starts a second late, so that rank 1 reads torch's store before rank 0 has written to it
(the store outlives the attempts).

``_elastic_worker.py OUT_DIR``: each rank of the attempt that finishes writes its final
weights to ``OUT_DIR/rank{R}.pt``.
"""

from __future__ import annotations

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import terascale.torch  # noqa: F401  (registers the backend)


def main() -> None:
    out = sys.argv[1]
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    torch.set_num_threads(1)
    if attempt == 1 and os.environ["RANK"] == "0":
        time.sleep(1.0)
    dist.init_process_group("terascale", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 4))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for step in range(5):
        if attempt == 0 and rank == 1 and step == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        net(torch.randn(16, 8, generator=g)).square().mean().backward()
        opt.step()
    os.makedirs(out, exist_ok=True)
    torch.save({k: v.clone() for k, v in net.module.state_dict().items()},
               os.path.join(out, f"rank{rank}.pt"))
    print(f"rank {rank} finished attempt {attempt}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
