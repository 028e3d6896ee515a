"""PNG plots of ``terascale simulate`` (matplotlib, Agg backend)."""

from __future__ import annotations

from typing import Any

__all__ = ["plot_scaling"]


def plot_scaling(data: dict[str, Any], compute_s: float, path: str, title: str) -> None:
    """Left: allreduce time vs nodes (model lines, simulated markers). Right: the speedup of a
    job with ``compute_s`` of single-node work per allreduce, ``compute / (compute/N + T(N))``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nodes = data["nodes"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 5), dpi=110)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, algo in enumerate(data["model"]):
        col = colors[i % len(colors)]
        ax1.plot(nodes, data["model"][algo], "--", color=col, linewidth=1)
        ax1.plot(nodes, data["sim"][algo], "o-", color=col, label=algo, markersize=4)
        speed = [compute_s / (compute_s / n + t) for n, t in zip(nodes, data["sim"][algo])]
        ax2.plot(nodes, speed, "o-", color=col, label=algo, markersize=4)
    ax2.plot(nodes, nodes, "k:", linewidth=0.8, label="linear")
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xlabel("nodes")
    ax1.set_ylabel("allreduce time [s]  (markers: simulated, dashed: model)")
    ax1.set_title("allreduce time vs nodes")
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.set_xlabel("nodes")
    ax2.set_ylabel(f"speedup  ({compute_s:g} s compute per allreduce on 1 node)")
    ax2.set_title("speedup vs nodes")
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
