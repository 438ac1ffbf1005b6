"""Several policies on one workload, in parallel processes, with progress reported back.

Each policy gets its own process (at most one per CPU): a simulation is pure
Python and CPU-bound, so threads would share one core.
"""

from __future__ import annotations

import os
import queue as queue_module
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, wait
from contextlib import ExitStack

from .loop import SimConfig, SimResult, simulate
from .workloads import SimJob

#: Called with (policy, events done so far).
Progress = Callable[[str, int], None]


def run_policies(
    jobs: Sequence[SimJob], configs: Sequence[SimConfig], on_progress: Progress | None = None
) -> list[SimResult]:
    """One result per config, in the order given."""
    workers = min(len(configs), os.cpu_count() or 1)
    if workers <= 1:
        return [simulate(jobs, c, _reporter(c.policy, on_progress)) for c in configs]
    import multiprocessing

    with ExitStack() as stack:
        # progress crosses processes through a manager's queue; without a listener, no manager
        channel = stack.enter_context(multiprocessing.Manager()).Queue() if on_progress else None
        pool = stack.enter_context(ProcessPoolExecutor(workers))
        futures = [pool.submit(_work, jobs, c, channel) for c in configs]
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=0.2)
            if channel is not None:
                _forward(channel, on_progress)
        if channel is not None:
            _forward(channel, on_progress)
        return [f.result() for f in futures]


def _work(jobs: Sequence[SimJob], config: SimConfig, channel) -> SimResult:
    report = None if channel is None else (lambda done: channel.put((config.policy, done)))
    return simulate(jobs, config, report)


def _reporter(policy: str, on_progress: Progress | None) -> Callable[[int], None] | None:
    return None if on_progress is None else (lambda done: on_progress(policy, done))


def _forward(channel, on_progress: Progress) -> None:
    while True:
        try:
            policy, done = channel.get_nowait()
        except queue_module.Empty:
            return
        on_progress(policy, done)
