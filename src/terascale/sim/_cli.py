"""``terascale simulate``: predicted allreduce time per algorithm at any scale.

    terascale simulate --nodes 1000 --bytes 64MB --link 10Gbit
    terascale simulate --nodes 1000 --bytes 64MB --link 1Gbit --stragglers exp:5ms --plot t.png
    terascale simulate --nodes 32 --workers-per-host 8 --bytes 100MB --link 50Gbit
    terascale simulate --paper          # the Terascale run and Goyal et al. on paper
    terascale simulate --fit-links k4.json k2x2.json --check k6.json --link-cost-out c.json
"""

from __future__ import annotations

import argparse

__all__ = ["add_parser"]

def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "simulate", help="predicted allreduce time per algorithm at any scale (cost model + simulator)",
        description="Predict one allreduce over N nodes with the alpha-beta-gamma model and "
                    "the event simulator (stragglers, node failure, NIC sharing), per algorithm.")
    p.add_argument("--nodes", type=int, default=1000, help="hosts (default 1000)")
    p.add_argument("--workers-per-host", type=int, default=1, metavar="Q",
                   help="workers per host (default 1)")
    p.add_argument("--bytes", default="64MB", help="message size (default 64MB)")
    p.add_argument("--link", default="10Gbit", help="link bandwidth per host (default 10Gbit)")
    p.add_argument("--latency", default="25us", help="per-message latency alpha (default 25us)")
    p.add_argument("--reduce-rate", default="5GB/s", metavar="RATE",
                   help="bytes reduced per second (gamma = 1/rate; default 5GB/s)")
    p.add_argument("--stragglers", default="none", metavar="SPEC",
                   help="arrival delays: none, exp:MEAN, lognormal:MEDIAN:SIGMA, one:DELAY, "
                        "frac:F:DELAY (e.g. exp:5ms)")
    p.add_argument("--fail", default=None, metavar="RANK@TIME",
                   help="kill RANK at TIME (e.g. 17@10ms): shows every rank blocking")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="with --fail: collective deadline before the job restarts (default 60 s)")
    p.add_argument("--compute", default="1s", metavar="S",
                   help="single-node compute per allreduce for the speedup plot (default 1s)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the straggler draws (default 0): the same seed, the same table")
    p.add_argument("--plot", default=None, metavar="OUT.png",
                   help="time and speedup vs nodes per algorithm")
    p.add_argument("--paper", action="store_true",
                   help="the Terascale run and Goyal et al.'s ResNet-50 on paper")
    p.add_argument("--calibrate", action="store_true",
                   help="with --paper: time this machine's linear kernels instead of the "
                        "per-example costs recorded with the package (run it on a quiet machine)")
    p.add_argument("--example-cost", default=None, metavar="COST.json",
                   help="with --paper: per-example costs from this file (online_s, gradient_s, "
                        "features_per_example, source)")
    p.add_argument("--fit-links", nargs="+", default=None, metavar="REPORT.json",
                   help="fit the TCP link model (terascale.sim.links) to these "
                        "`terascale bench allreduce --cluster K --json` reports and print "
                        "measured vs predicted busbw")
    p.add_argument("--check", nargs="+", default=[], metavar="REPORT.json",
                   help="with --fit-links: reports predicted with the fitted constants but "
                        "not fitted on (a held-out test)")
    p.add_argument("--alpha", default=None, metavar="TIME",
                   help="with --fit-links: hold the per-round latency at TIME (\"180us\") and "
                        "fit only the efficiencies (reports of large messages cannot tell it)")
    p.add_argument("--link-cost-out", default=None, metavar="COST.json",
                   help="with --fit-links: write the fitted constants (for --link-cost)")
    p.add_argument("--json", default=None, metavar="OUT.json",
                   help="also write the results as JSON to OUT.json")
    p.set_defaults(func=_main)


def _fit_links(args: argparse.Namespace) -> dict:
    import json

    from .._errors import ConfigError
    from .._files import replace_durably
    from .links import fit, format_fit

    def load(paths: list[str], flag: str) -> list[dict]:
        out = []
        for path in paths:
            try:
                with open(path) as f:
                    rep = json.load(f)
                rep["hosts"], rep["per_host"], rep["link_bits"]  # noqa: B018
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise ConfigError(f"{flag} {path}: not a `terascale bench allreduce "
                                  f"--cluster --json` report ({e})") from None
            out.append(rep)
        return out

    alpha = None
    if args.alpha is not None:
        from .._units import parse_time

        alpha = parse_time(args.alpha, flag="--alpha")
    result = fit(load(args.fit_links, "--fit-links"), check=load(args.check, "--check"),
                 alpha=alpha)
    print(format_fit(result))
    if args.link_cost_out:
        data = json.dumps({**result["cost"], "source": (
            f"fitted by terascale simulate --fit-links on {len(args.fit_links)} cluster "
            f"benchmark reports ({result['cost']['source'].split(' on ')[-1]})")},
            indent=1).encode() + b"\n"
        replace_durably(args.link_cost_out, lambda f: f.write(data), prefix=".link_cost.",
                        what="--link-cost-out: ")
    return result


def _main(args: argparse.Namespace) -> int:
    import json

    from .report import paper_report, run_simulate

    if getattr(args, "plot", None):
        import matplotlib  # noqa: F401  (first: without it, say what to install before simulating)
    if args.fit_links:
        out = _fit_links(args)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
        return 0
    if (args.calibrate or args.example_cost) and not args.paper:
        from .._errors import ConfigError

        raise ConfigError("--calibrate and --example-cost go with --paper")
    if args.calibrate and args.example_cost:
        from .._errors import ConfigError

        raise ConfigError("--calibrate measures the costs; --example-cost reads them: pick one")
    if args.paper:
        out = paper_report(calibrate=args.calibrate, example_cost=args.example_cost)
    else:
        out = run_simulate(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0
