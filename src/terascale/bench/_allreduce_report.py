"""The tables of ``terascale bench allreduce``: per size and system, targets, crossover.

Pure functions of a report (``{"sizes", "results": [{"system", "bytes", "median_s", "algbw",
"busbw"}, ...]}``), so that earlier JSON reports can be re-read and re-printed.
"""

from __future__ import annotations

from typing import Any

from .._units import format_size, format_time

__all__ = ["crossover", "format_encryption", "format_limits", "format_table", "format_targets",
           "systems_of"]

# our rows: as launched; over TCP unauthenticated, authenticated (GMAC or AEGISMAC-128X4),
# encrypted (--encrypt)
_OURS = ("ours:", "tcp:", "mac:", "aes:")


def systems_of(report: dict[str, Any]) -> list[str]:
    """The systems of a report, in the order they were run."""
    seen: dict[str, None] = {}
    for r in report["results"]:
        seen.setdefault(r["system"], None)
    return list(seen)


def format_table(report: dict[str, Any]) -> str:
    """A Markdown table: one row per (size, system), ratios to each peer measured.

    Parameters
    ----------
    report
        A report of :func:`run_bench` (or its ``--json`` file).
    """
    rows = report["results"]
    peers = [s for s in systems_of(report) if not s.startswith(_OURS)]
    by = {(r["system"], r["bytes"]): r for r in rows}
    head = ["size", "system", "median", "algbw GB/s", "busbw GB/s"] + [f"x {p}" for p in peers]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for size in report["sizes"]:
        for system in systems_of(report):
            r = by.get((system, size))
            if r is None:
                continue
            cells = [format_size(size), system, format_time(r["median_s"]),
                     f"{r['algbw'] / 1e9:.3f}", f"{r['busbw'] / 1e9:.3f}"]
            for p in peers:
                peer = by.get((p, size))
                if system == p or peer is None or not system.startswith("ours:"):
                    cells.append("")
                else:
                    cells.append(f"{peer['median_s'] / r['median_s']:.2f}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


_TCP = ("ours:tree", "ours:ring", "ours:halving_doubling")


def format_targets(report: dict[str, Any]) -> str:
    """The project's targets per size: busbw of ``auto`` over gloo and over Open MPI (shared
    memory), and of our best TCP-only algorithm over gloo (ratios of busbw, > 1: ours wins).

    Parameters
    ----------
    report
        A report of :func:`run_bench` (or its ``--json`` file).
    """
    by = {(r["system"], r["bytes"]): r for r in report["results"]}
    lines = ["| size | auto busbw GB/s | auto / gloo | auto / mpi-shm | best TCP (ours) | "
             "best TCP / gloo |", "|---|---|---|---|---|---|"]
    for size in report["sizes"]:
        auto = by.get(("ours:auto", size))
        if auto is None:
            continue
        gloo, mpi = by.get(("gloo", size)), by.get(("mpi-shm", size))
        tcp = [by[(t, size)] for t in _TCP if (t, size) in by]
        best = max(tcp, key=lambda r: r["busbw"]) if tcp else None
        cells = [format_size(size), f"{auto['busbw'] / 1e9:.3f}",
                 f"{auto['busbw'] / gloo['busbw']:.2f}" if gloo else "",
                 f"{auto['busbw'] / mpi['busbw']:.2f}" if mpi else "",
                 f"{best['system'][5:]} {best['busbw'] / 1e9:.3f}" if best else "",
                 f"{best['busbw'] / gloo['busbw']:.2f}" if best and gloo else ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def crossover(report: dict[str, Any], small: str = "ours:tree",
              large: str = "ours:ring") -> int | None:
    """The largest measured size up to which ``small`` is at least as fast as ``large`` at
    every size (the ``auto`` threshold); None if ``large`` already wins at the smallest.

    Parameters
    ----------
    report
        A report of :func:`run_bench` (or its ``--json`` file).
    small
        The system expected to win at small sizes (default ``"ours:tree"``).
    large
        The one expected to win at large sizes (default ``"ours:ring"``).
    """
    by = {(r["system"], r["bytes"]): r["median_s"] for r in report["results"]}
    best = None
    for size in sorted(report["sizes"]):
        a, b = by.get((small, size)), by.get((large, size))
        if a is None or b is None:
            continue
        if a > b:
            break
        best = size
    return best


def format_limits(limits: dict[str, float]) -> str:
    """One line: the machine's memcpy, np.add and TCP loopback ceilings in GB/s."""
    return ("machine limits: memcpy {memcpy:.2f} GB/s, np.add {add:.2f} GB/s, TCP loopback "
            "{tcp_one_way:.2f} GB/s one way, {tcp_both_ways:.2f} GB/s each way when both "
            "directions are busy".format(**{k: v / 1e9 for k, v in limits.items()}))


def format_encryption(report: dict[str, Any]) -> str:
    """Per size and algorithm: unauthenticated TCP, authenticated (``mac``: GMAC or
    AEGISMAC-128X4) and encrypted (``aes``: AEGIS-256X4 or AES-256-GCM) links, their median
    times and the ratios to unauthenticated TCP, then a line naming the MAC and cipher the
    links agreed on (where the report has them).

    The 4 KiB row is the latency cost (one record per message each way), the largest rows
    the throughput cost (the MAC, or the cipher, per byte, on one core per rank). Reports
    without ``mac:`` rows (before links were always authenticated) print their two columns
    alone.
    """
    by = {(r["system"], r["bytes"]): r for r in report["results"]}
    algos = [s[4:] for s in systems_of(report) if s.startswith("tcp:")]
    head = ["size", "algorithm", "tcp median", "mac median", "aes median", "tcp busbw GB/s",
            "mac / tcp time", "aes / tcp time"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def cell(row: dict[str, Any] | None, plain: dict[str, Any], ratio: bool) -> str:
        if row is None:
            return "-"
        return f"{row['median_s'] / plain['median_s']:.2f}" if ratio else \
            format_time(row["median_s"])

    for size in report["sizes"]:
        for algo in algos:
            plain = by.get((f"tcp:{algo}", size))
            mac, secure = by.get((f"mac:{algo}", size)), by.get((f"aes:{algo}", size))
            if plain is None or (mac is None and secure is None):
                continue
            lines.append("| " + " | ".join([
                format_size(size), algo, format_time(plain["median_s"]),
                cell(mac, plain, False), cell(secure, plain, False),
                f"{plain['busbw'] / 1e9:.3f}", cell(mac, plain, True),
                cell(secure, plain, True)]) + " |")
    agreed = {label: r["link"] for r in report["results"] if "link" in r
              for label in ("mac", "aes") if r["system"].startswith(f"{label}:")}
    if agreed:
        lines.append("\nlinks: " + "; ".join(f"{k} {v}" for k, v in sorted(agreed.items(),
                                                                         reverse=True)))
    return "\n".join(lines)
