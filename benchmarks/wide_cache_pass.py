"""Time one pass from the cache over the wide bench data in this process (wall, user and
system CPU of the process and of the learner's own thread, peak RSS, a hash of the
model), for comparing two checkouts in alternating fresh processes.

    terascale bench linear --wide --sizes 1M --recipes cache --repeat 1   # writes the data
    python benchmarks/wide_cache_pass.py CACHE_DIR warm                   # writes the cache
    for i in 1 2 3 4; do
        PYTHONPATH=OLD/src python benchmarks/wide_cache_pass.py OLD_CACHE
        PYTHONPATH=NEW/src python benchmarks/wide_cache_pass.py NEW_CACHE
    done

``BITS=28`` in the environment for ``-b 28`` (a cache directory of its own). The
learner's thread's CPU is the figure that a loaded host leaves readable: the process's
includes the threads beside it (the block reader, the page-fault thread of
``terascale._pages.prefaulting``).
"""

import hashlib
import os
import resource
import sys
import tempfile
import time

from terascale.linear import train

PATH = os.path.join(tempfile.gettempdir(), "terascale-bench-linear", "wide-1M-train.vw")

if __name__ == "__main__":
    kw = dict(bits=int(os.environ.get("BITS", "24")), loss="logistic", cache=True,
              cache_dir=sys.argv[1], passes=1)
    if sys.argv[2:] == ["warm"]:
        train(PATH, **kw)
        sys.exit()
    t = time.perf_counter()
    model = train(PATH, **kw)
    wall = time.perf_counter() - t
    r = resource.getrusage(resource.RUSAGE_SELF)
    me = resource.getrusage(resource.RUSAGE_THREAD)
    digest = hashlib.sha1(model.indices.tobytes() + model.weights.tobytes()).hexdigest()[:10]
    print(f"wall {wall:.2f} s  user {r.ru_utime:.2f} s  sys {r.ru_stime:.2f} s  "
          f"learner thread user {me.ru_utime:.2f} s  sys {me.ru_stime:.2f} s  "
          f"peak RSS {r.ru_maxrss // 1024} MB  model {digest}")
