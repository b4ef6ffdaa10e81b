"""Where a fleet's tasks run: in this process, in a local process pool, or as Ray tasks on a Ray cluster.

Each runner yields the tasks' outcomes as they complete and keeps at most a few tasks in flight per worker
(tasks are submitted as others finish), so memory and the work lost to a dead worker stay bounded whatever the
size of the fleet. A worker process that dies (killed for memory, a crash in a native library) fails only the
tasks it was running: they are tried once more on a fresh worker, then recorded as failed.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from traceinsight.errors import InputError
from traceinsight.fleet.task import Outcome, Task, run_task
from traceinsight.tuning import tune

ATTEMPTS = 2  # a task whose worker died is run again once
DIED = "its worker process died (killed for memory? try fewer --workers or a --memory-limit)"


@dataclass(frozen=True)
class RunnerSpec:
    """How to run: `workers` processes (1: in this process), or Ray at `ray` ('auto', 'local' or an address)."""

    workers: int = 1
    ray: str | None = None
    memory_limit: str | None = None  # DuckDB's limit in each worker (default: its share of the default, fitted)

    def describe(self) -> str:
        if self.ray:
            return f"Ray ({self.ray})"
        return "this process" if self.workers <= 1 else f"a local pool of {self.workers} processes"


@contextmanager
def runner(spec: RunnerSpec) -> Iterator[Callable[[Iterable[Task]], Iterator[Outcome]]]:
    """`run(tasks)`: the outcomes of `tasks` as they complete, run as `spec` says. Entering connects to Ray (or
    starts it) first, so a cluster that cannot be reached is an InputError before anything is written; leaving
    stops the Ray instance this started."""
    if not spec.ray:
        yield _serial if spec.workers <= 1 else partial(_pool, spec=spec)
        return
    try:
        import ray
    except ImportError:
        raise InputError("--ray needs Ray: pip install 'traceinsight-attention[fleet]'") from None
    started = not ray.is_initialized()
    if started:
        _ray_init(ray, spec)
    try:
        yield lambda tasks: _ray(ray, tasks, spec)
    finally:
        if started:
            ray.shutdown()


def _serial(tasks: Iterable[Task]) -> Iterator[Outcome]:
    return (run_task(t) for t in tasks)


def user_memory_limit(spec: RunnerSpec) -> str | None:
    """DuckDB's limit the user set for each worker: --memory-limit / $TRACEINSIGHT_MEMORY_LIMIT, else None."""
    from traceinsight.ingest.store import MEMORY_LIMIT_ENV

    return spec.memory_limit or os.environ.get(MEMORY_LIMIT_ENV)


def _init_worker(memory_limit: str | None, workers: int) -> None:
    """A pool worker's memory: the limit the user set, else its share of DuckDB's default budget (80 % of the
    machine's or container's memory, divided among the workers), fitted to what the worker holds as a lone
    analysis's is (`TraceDB.fit_memory`). A fixed 80 % of the machine's RAM / workers counted neither a
    container's limit nor the analysis's Python objects, which on a long trace hold as much as DuckDB."""
    from traceinsight.ingest.store import MEMORY_LIMIT_ENV, MEMORY_SHARE_ENV

    tune()  # a worker is the command's own process: tuned as its entry tunes the command's (traceinsight.tuning)
    if memory_limit:
        os.environ[MEMORY_LIMIT_ENV] = memory_limit
    else:
        os.environ[MEMORY_SHARE_ENV] = str(max(workers, 1))


def _pool(tasks: Iterable[Task], spec: RunnerSpec) -> Iterator[Outcome]:
    limit = user_memory_limit(spec)
    # forkserver: workers start from a clean process, not a fork of one that holds DuckDB's threads.
    ctx = multiprocessing.get_context("forkserver")
    queue: deque[tuple[Task, int]] = deque((t, 1) for t in tasks)
    while queue:
        with ProcessPoolExecutor(spec.workers, mp_context=ctx, initializer=_init_worker,
                                 initargs=(limit, spec.workers)) as pool:
            running: dict[Future[Outcome], tuple[Task, int]] = {}
            broken = False
            while (queue or running) and not broken:
                while queue and len(running) < 2 * spec.workers:
                    task, attempt = queue.popleft()
                    running[pool.submit(run_task, task)] = (task, attempt)
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    task, attempt = running.pop(fut)
                    try:
                        yield fut.result()
                    except BrokenProcessPool:
                        broken = True
                        yield from _retry_or_fail(queue, task, attempt)
            if broken:  # every task still running on the broken pool: again on a new one, or failed
                for fut, (task, attempt) in running.items():
                    fut.cancel()
                    yield from _retry_or_fail(queue, task, attempt)
                pool.shutdown(wait=False, cancel_futures=True)


def _retry_or_fail(queue: deque[tuple[Task, int]], task: Task, attempt: int) -> Iterator[Outcome]:
    if attempt < ATTEMPTS:
        queue.append((task, attempt + 1))
    else:
        yield Outcome(task.key, "error", 0.0, "", error=DIED)


def _run_tuned(task: Task) -> Outcome:
    """`run_task` in a Ray worker, the process tuned as the command's is (traceinsight.tuning)."""
    tune()
    return run_task(task)


def _ray(ray: Any, tasks: Iterable[Task], spec: RunnerSpec) -> Iterator[Outcome]:
    from traceinsight.ingest.store import MEMORY_LIMIT_ENV

    limit = user_memory_limit(spec)
    env = {MEMORY_LIMIT_ENV: limit} if limit else {}
    remote = ray.remote(_run_tuned).options(num_cpus=1, max_retries=ATTEMPTS - 1, retry_exceptions=False,
                                          runtime_env={"env_vars": env} if env else None)
    width = max(1, int(ray.cluster_resources().get("CPU", 1))) * 2
    queue = deque(tasks)
    running: dict[Any, Task] = {}
    while queue or running:
        while queue and len(running) < width:
            task = queue.popleft()
            running[remote.remote(task)] = task
        ready, _ = ray.wait(list(running), num_returns=1)
        for ref in ready:
            task = running.pop(ref)
            try:
                yield ray.get(ref)
            except ray.exceptions.RayError as exc:
                yield Outcome(task.key, "error", 0.0, "", error=f"Ray task failed: {type(exc).__name__}: "
                              + (str(exc).strip().splitlines() or [""])[-1][:300])


# How long a Ray cluster's address may take to accept a connection before `--ray` gives up on it (s).
RAY_CONNECT_TIMEOUT_S = 10.0


def _ray_init(ray: Any, spec: RunnerSpec) -> None:
    kwargs: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    if spec.ray == "local":  # a private instance for this run, stopped at its end
        kwargs.update(include_dashboard=False, num_cpus=spec.workers if spec.workers > 1 else None)
    else:
        kwargs["address"] = spec.ray
        address = _ray_address(spec.ray) if spec.ray else None
        if address is not None and not _answers(address, RAY_CONNECT_TIMEOUT_S):
            raise InputError(f"--ray {spec.ray}: cannot connect (nothing answers at {address} within "
                             f"{RAY_CONNECT_TIMEOUT_S:g} s)")
    try:
        ray.init(**kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise InputError(f"--ray {spec.ray}: cannot connect ({(str(exc).splitlines() or [''])[0]})") from None


def _ray_address(given: str) -> str | None:
    """The host:port `ray.init` would connect to for `--ray given` ('auto': the cluster Ray finds on this machine, as
    it finds it), or None when there is none to check (Ray then says why it cannot connect)."""
    if given == "auto":
        try:
            from ray._private.services import get_ray_address_from_environment
        except ImportError:
            return None
        try:
            given = get_ray_address_from_environment("auto", None)
        except Exception:  # no cluster found (ConnectionError), or Ray's internals changed: ray.init says
            return None
    host, _, port = given.removeprefix("ray://").rpartition(":")
    return f"{host}:{port}" if host and port.isdigit() else None


def _answers(address: str, timeout_s: float) -> bool:
    """Whether something accepts a TCP connection at host:port within `timeout_s`. Ray's own connect retries an
    address where nothing answers for minutes (5 min and more, with only its warnings), and a stale
    /tmp/ray/ray_current_cluster or a cluster in another network namespace makes 'auto' such an address."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False
