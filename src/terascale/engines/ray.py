"""terascale on Ray: one actor per rank in a placement group; the group restarts as a whole.

``run(fn, num_workers=N)`` reserves N bundles in a Ray placement group (gang scheduling:
the job starts only when all N fit, ``strategy="PACK"`` or ``"SPREAD"`` over nodes),
starts one actor per bundle and calls ``fn`` in each; inside ``fn``, ``terascale.init()``
joins the job. Ray schedules and detects deaths; our own transports carry the data.

Rendezvous: actor 0 serves it. The driver asks actor 0 to start a
:class:`~terascale.rendezvous.RendezvousServer` (fresh job id and secret per attempt) and
hands its address to every actor together with ``fn``. It listens on loopback when the
placement group is on one node, else on actor 0's node address (``TERASCALE_BIND``
overrides it), never on every interface. We preferred this to a server in the
driver because a Ray driver is often outside the cluster (Ray Client, a laptop, a
notebook) while actor 0 is by construction inside it, and to a separate named rendezvous
actor because the driver already holds every actor handle -- one fewer process, and no
name to collide between concurrent jobs.

Failures: when any actor dies (its process or node lost) or ``fn`` raises, the driver
kills every actor of the attempt and starts a new group in the same placement group, up to
``max_restarts`` times -- the fail-fast, restart-everything model of ``terascale run
--max-restarts`` (Rabit-style in-place recovery proved fragile). ``fn`` resumes from its
:class:`terascale.Checkpoint`; ``TERASCALE_RESTART`` tells it the attempt number. Because
the collectives are deterministic, the restarted run ends bitwise where a run without
failures would.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any

from .._env import read_bind
from .._errors import ConfigError, TerascaleError
from ..rendezvous import RendezvousServer
from ._common import check_workers, job_env, new_run_id, remove_stale_segments

__all__ = ["run", "train_linear"]

log = logging.getLogger("terascale.ray")


class _Worker:
    """One rank; wrapped with ``ray.remote`` by :func:`run` (ray is imported lazily)."""

    def __init__(self, rank: int, size: int) -> None:
        self.rank = rank
        self.size = size
        self._server: RendezvousServer | None = None

    def serve(self, job: str, secret: str, one_node: bool) -> str:
        """Start this attempt's rendezvous (called on rank 0 only); returns HOST:PORT.

        It listens where the other actors reach it and nowhere else: loopback when every
        actor is on this node, else this node's address in the Ray cluster
        (TERASCALE_BIND in the actors' environment overrides it, e.g. ``0.0.0.0``).
        """
        import ray

        host = "127.0.0.1" if one_node else str(ray.util.get_node_ip_address())
        self._server = RendezvousServer(self.size, secret.encode(), host=read_bind() or host,
                                        job=job).start()
        return f"{host}:{self._server.address[1]}"

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], *,
            rendezvous: str, secret: str, job: str, run_id: str, timeout: float,
            restart: int) -> Any:
        remove_stale_segments(run_id, job)  # what killed actors of earlier attempts left here
        try:
            with job_env(rank=self.rank, size=self.size, rendezvous=rendezvous, secret=secret,
                         job=job, timeout=timeout, restart=restart):
                return fn(*args, **kwargs)
        finally:
            if self._server is not None:
                self._server.close()


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("terascale.ray needs ray: pip install 'terascale[ray]'") from None
    return ray


def _one_node(ray: Any, pg: Any) -> bool:
    """Whether every bundle of the placement group is on one node (then loopback serves)."""
    try:
        nodes = set(ray.util.placement_group_table(pg).get("bundles_to_node_id", {}).values())
    except Exception:  # an API detail changed: assume a real cluster (the node's address)
        return False
    return len(nodes) == 1


def _attempt(ray: Any, pg: Any, fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: dict[str, Any], *, num_workers: int, num_cpus: float, timeout: float,
             run_id: str, restart: int, resources: dict[str, float]) -> list[Any]:
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    actor_cls = ray.remote(_Worker)
    custom = {k: v for k, v in resources.items() if k != "GPU"}
    actors = [actor_cls.options(
        num_cpus=num_cpus, num_gpus=resources.get("GPU", 0), resources=custom or None,
        max_restarts=0,
        scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_bundle_index=rank)).remote(rank, num_workers)
        for rank in range(num_workers)]
    job = f"{run_id}-r{restart}"
    try:
        secret = secrets.token_hex(32)
        address = ray.get(actors[0].serve.remote(job, secret, _one_node(ray, pg)),
                          timeout=timeout)
        refs = [a.run.remote(fn, args, kwargs, rendezvous=address, secret=secret, job=job,
                             run_id=run_id, timeout=timeout, restart=restart) for a in actors]
        pending = list(refs)
        while pending:  # surface the FIRST failure at once (the others follow from it)
            done, pending = ray.wait(pending, num_returns=1)
            ray.get(done)
        return list(ray.get(refs))
    finally:
        for a in actors:
            ray.kill(a, no_restart=True)
        remove_stale_segments(run_id)  # the driver's host


def run(fn: Callable[..., Any], *, num_workers: int, args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None, timeout: float = 60.0, max_restarts: int = 3,
        num_cpus: float = 1.0, strategy: str = "PACK",
        resources_per_worker: dict[str, float] | None = None) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` on ``num_workers`` Ray actors; returns results by rank.

    ``timeout`` bounds the placement, the rendezvous and (as the default deadline) every
    collective. ``max_restarts``: how often the whole group is started again after an
    actor died or ``fn`` raised. ``num_cpus`` per actor; ``strategy`` of the placement
    group (``PACK``, ``SPREAD``, ``STRICT_PACK``, ``STRICT_SPREAD``). Connects to (or
    starts) a Ray cluster with ``ray.init()`` when none is connected.
    """
    check_workers(num_workers, timeout)
    if not isinstance(max_restarts, int) or max_restarts < 0:
        raise ConfigError(f"max_restarts={max_restarts!r} must be a non-negative integer")
    if strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
        raise ConfigError(f"strategy={strategy!r}: use PACK, SPREAD, STRICT_PACK or STRICT_SPREAD")
    resources = dict(resources_per_worker or {})
    for k, v in resources.items():
        if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (int, float)) \
                or v < 0:
            raise ConfigError(f"resources_per_worker: {k!r}: {v!r} must be a resource name "
                              f"and an amount >= 0")
    num_cpus = float(resources.pop("CPU", num_cpus))
    ray = _ray()
    from ray.util.placement_group import placement_group, remove_placement_group

    if not ray.is_initialized():
        ray.init()
    bundle = {"CPU": num_cpus, **{k: float(v) for k, v in resources.items() if v}}
    pg = placement_group([bundle] * num_workers, strategy=strategy)
    run_id = new_run_id()
    try:
        try:
            ray.get(pg.ready(), timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            have = ray.cluster_resources()
            raise ConfigError(f"Ray could not place num_workers={num_workers} actors of "
                              f"{bundle} ({strategy}) within {timeout:g} s; the cluster "
                              f"has " + ", ".join(f"{have.get(k, 0):g} {k}" for k in bundle)
                              ) from None
        last: BaseException | None = None
        for restart in range(max_restarts + 1):
            try:
                return _attempt(ray, pg, fn, tuple(args), dict(kwargs or {}),
                                num_workers=num_workers, num_cpus=num_cpus,
                                timeout=float(timeout), run_id=run_id, restart=restart,
                                resources=resources)
            except ray.exceptions.RayError as e:
                last = e
                if restart < max_restarts:
                    why = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
                    log.warning("terascale.ray: attempt %d failed (%s); restarting all %d "
                                "workers from their checkpoint", restart, why, num_workers)
        raise TerascaleError(f"terascale Ray job failed {max_restarts + 1} time(s); last "
                             f"error: {last}") from last
    finally:
        remove_placement_group(pg)



# the linear learner on Ray Data (it calls run: imported after it)
from ._ray_linear import train_linear  # noqa: E402
