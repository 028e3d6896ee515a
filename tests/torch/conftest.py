"""The torch tests' process set-up.

torch imports ``torch._dynamo`` lazily, at the first optimizer's construction, and that
import costs about as much as ``import torch`` itself. ``run_workers`` forks its workers
from this process: importing it here once lets every worker inherit it instead of each
importing it again (the suite runs a few dozen such workers).
"""

from __future__ import annotations

try:
    import torch._dynamo  # noqa: F401
except ImportError:  # no torch: the modules here skip themselves
    pass
