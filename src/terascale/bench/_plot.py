"""PNG plots of the benchmarks (matplotlib with the Agg backend: no display needed)."""

from __future__ import annotations

from typing import Any

__all__ = ["plot_busbw", "plot_calibration"]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _size_ticks(ax: Any, sizes: list[int]) -> None:
    from .._units import format_size

    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([format_size(s).replace(" ", "") for s in sizes], rotation=45)
    ax.minorticks_off()


def plot_busbw(report: dict[str, Any], path: str) -> None:
    """busbw vs message size, one line per system, the TCP and memory ceilings dashed."""
    from ._allreduce_report import systems_of

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=110)
    for system in systems_of(report):
        rows = sorted((r for r in report["results"] if r["system"] == system),
                      key=lambda r: r["bytes"])
        style = "-o" if system.startswith("ours:") else "--s"
        ax.plot([r["bytes"] for r in rows], [r["busbw"] / 1e9 for r in rows], style,
                label=system, markersize=4, linewidth=1.6 if system.startswith("ours:") else 1.2)
    lim = report.get("limits")
    if lim:
        ax.axhline(lim["tcp_both_ways"] / 1e9, color="grey", linestyle=":", linewidth=1)
        ax.text(report["sizes"][0], lim["tcp_both_ways"] / 1e9, " TCP both ways",
                va="bottom", fontsize=8, color="grey")
    _size_ticks(ax, report["sizes"])
    ax.set_yscale("log")
    ax.set_xlabel("message size (float32 sum)")
    ax.set_ylabel("busbw  [GB/s]  = bytes/time * 2(n-1)/n")
    ax.set_title(f"allreduce, n = {report['n']} ranks, one host "
                 f"(load {report.get('load') or 0:.1f})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_calibration(cal: dict[str, Any], path: str) -> None:
    """Measured vs predicted time per (algorithm, n), log-log, with the y = x line."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 6), dpi=110)
    pts = cal["points"]
    groups: dict[str, list[dict[str, Any]]] = {}
    for p in pts:
        groups.setdefault(f"{p['algorithm']} n={p['n']}", []).append(p)
    lo = min(min(p["measured_s"], p["predicted_s"]) for p in pts)
    hi = max(max(p["measured_s"], p["predicted_s"]) for p in pts)
    for label, g in sorted(groups.items()):
        ax.loglog([p["measured_s"] for p in g], [p["predicted_s"] for p in g], "o",
                  label=label, markersize=5)
    ax.plot([lo, hi], [lo, hi], "k-", linewidth=0.8, label="predicted = measured")
    ax.fill_between([lo, hi], [lo * 0.75, hi * 0.75], [lo * 1.25, hi * 1.25], color="grey",
                    alpha=0.15, label="+-25%")
    ax.set_xlabel("measured median time [s]")
    ax.set_ylabel("alpha-beta-gamma prediction [s]")
    ax.set_title("cost model vs measurement (this machine)")
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
