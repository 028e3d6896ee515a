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

Failures: the job runner of ``terascale run`` (:mod:`terascale.launch.runner`) watches the
actors. When any actor dies (its process or node lost) or ``fn`` raises, the rank that
failed first is blamed (not a rank that only lost it), every actor of the attempt is
killed and a new group starts in the same placement group, up to ``max_restarts`` times --
the fail-fast, restart-everything model of ``terascale run --max-restarts`` (Rabit-style
in-place recovery proved fragile). A :class:`terascale.ConfigError` or
:class:`terascale.DataError` from ``fn`` is the input's fault and is raised at once. ``fn`` resumes from its
:class:`terascale.Checkpoint`; ``TERASCALE_RESTART`` tells it the attempt number. Because
the collectives are deterministic, the restarted run ends bitwise where a run without
failures would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._env import read_bind
from .._errors import ConfigError, DataError, RendezvousError
from ..launch.runner import Worker, run_job
from ..rendezvous import RendezvousServer
from ._common import check_workers, new_run_id, remove_stale_segments, run_rank

__all__ = ["run", "train_linear"]


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
            env: dict[str, str], run_id: str, job: str) -> Any:
        return run_rank(fn, args, kwargs, env, run_id, job, self._close)

    def _close(self) -> None:
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


class _ActorRun(Worker):
    """One rank's call on its actor, for the job runner."""

    def __init__(self, ray: Any, actor: Any, ref: Any, rank: int) -> None:
        self.ray, self.actor, self.ref, self.rank = ray, actor, ref, rank
        self._result: Any = None
        self._error: BaseException | None = None
        self._tail: list[bytes] = []

    def wait(self) -> int:
        ray = self.ray
        try:
            self._result = ray.get(self.ref)
            return 0
        except ray.exceptions.RayActorError as e:  # its process or node was lost
            self._error = e
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            self._tail = [f"WorkerLost: a worker died: the Ray actor of rank {self.rank} "
                          f"({first})\n".encode()]
            return 137
        except ray.exceptions.RayError as e:  # fn raised (RayTaskError), or Ray failed it
            cause = getattr(e, "cause", None)
            self._error = cause if isinstance(cause, (ConfigError, DataError)) else e
            self._tail = [ln.encode() + b"\n" for ln in str(e).rstrip().splitlines()]
            return 1

    def tail(self) -> list[bytes]:
        return self._tail

    def kill(self) -> None:
        self.ray.kill(self.actor, no_restart=True)

    def result(self) -> Any:
        return self._result

    def error(self) -> BaseException | None:
        return self._error


class _RayEngine:
    """Each attempt: one actor per bundle of the placement group; actor 0 serves."""

    def __init__(self, ray: Any, pg: Any, fn: Callable[..., Any],
                 args: Callable[[int], tuple[Any, ...]], kwargs: dict[str, Any], *,
                 num_cpus: float, resources: dict[str, float], timeout: float,
                 run_id: str) -> None:
        self.ray, self.pg, self.fn, self.args, self.kwargs = ray, pg, fn, args, kwargs
        self.num_cpus, self.resources, self.timeout = num_cpus, resources, timeout
        self.run_id = run_id
        self.actors: list[Any] = []
        self.job = ""
        self.attempt = -1

    def serve(self, job: str, secret: str, size: int) -> str:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        ray = self.ray
        actor_cls = ray.remote(_Worker)
        custom = {k: v for k, v in self.resources.items() if k != "GPU"}
        self.actors = [actor_cls.options(
            num_cpus=self.num_cpus, num_gpus=self.resources.get("GPU", 0),
            resources=custom or None, max_restarts=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=self.pg, placement_group_bundle_index=rank)).remote(rank, size)
            for rank in range(size)]
        self.job = job
        self.attempt += 1
        self.attempt_args = self.args(self.attempt)
        try:
            return str(ray.get(self.actors[0].serve.remote(job, secret,
                                                           _one_node(ray, self.pg)),
                               timeout=self.timeout))
        except ray.exceptions.GetTimeoutError:
            raise RendezvousError(
                f"Ray: the actor of rank 0, which serves the rendezvous, did not start "
                f"within {self.timeout:g} s (timeout=); a busy cluster starts actors slowly"
            ) from None

    def start(self, rank: int, env: dict[str, str]) -> Worker:
        ref = self.actors[rank].run.remote(self.fn, self.attempt_args, self.kwargs, env=env,
                                           run_id=self.run_id, job=self.job)
        return _ActorRun(self.ray, self.actors[rank], ref, rank)

    def cleanup(self) -> None:
        for a in self.actors:
            self.ray.kill(a, no_restart=True)
        self.actors = []
        remove_stale_segments(self.run_id)  # the driver's host


def run(fn: Callable[..., Any], *, num_workers: int, args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None, timeout: float = 60.0, max_restarts: int = 3,
        num_cpus: float = 1.0, strategy: str = "PACK",
        resources_per_worker: dict[str, float] | None = None) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` on ``num_workers`` Ray actors; returns results by rank.

    Connects to (or starts) a Ray cluster with ``ray.init()`` when none is connected.
    Raises :class:`terascale.launch.runner.JobFailed` naming the rank that failed first
    when every attempt failed.

    Parameters
    ----------
    fn
        The job: inside it, ``terascale.init()`` joins (rank = the actor's bundle index).
    num_workers
        Ranks, one actor each, placed together in one placement group.
    args, kwargs
        Passed to ``fn``.
    timeout
        Seconds: bounds the placement, the rendezvous and (as the default deadline) every
        collective.
    max_restarts
        How often the whole group is started again after an actor died or ``fn`` raised;
        ``fn`` resumes from its :class:`terascale.Checkpoint`.
    num_cpus
        CPUs per actor (a ``CPU`` entry of ``resources_per_worker`` replaces it).
    strategy
        Of the placement group: ``PACK``, ``SPREAD``, ``STRICT_PACK``, ``STRICT_SPREAD``.
    resources_per_worker
        What each actor reserves: ``{"GPU": 1}`` (as ``num_gpus``), custom resources.
    """
    return run_attempts(fn, num_workers=num_workers, args=lambda attempt: tuple(args),
                        kwargs=kwargs, timeout=timeout, max_restarts=max_restarts,
                        num_cpus=num_cpus, strategy=strategy,
                        resources_per_worker=resources_per_worker)


def run_attempts(fn: Callable[..., Any], *, num_workers: int,
                 args: Callable[[int], tuple[Any, ...]], kwargs: dict[str, Any] | None,
                 timeout: float, max_restarts: int, num_cpus: float, strategy: str,
                 resources_per_worker: dict[str, float] | None) -> list[Any]:
    """:func:`run` with ``args(attempt)`` made anew for every attempt (a Dataset's
    ``streaming_split`` cannot be read twice: a restart needs a new one)."""
    check_workers(num_workers, timeout)
    if not isinstance(max_restarts, int) or isinstance(max_restarts, bool) or max_restarts < 0:
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
        engine = _RayEngine(ray, pg, fn, args, dict(kwargs or {}), num_cpus=num_cpus,
                            resources=resources, timeout=float(timeout), run_id=run_id)
        return run_job(engine, size=num_workers, run_id=run_id, timeout=float(timeout),
                       max_restarts=max_restarts, name="Ray")
    finally:
        remove_placement_group(pg)


# the linear learner on Ray Data (it calls run: imported after it)
from ._ray_linear import train_linear  # noqa: E402
