"""Classic bin-packing baselines: first fit, best fit (GFS-style), its placebo, and worst fit (Slurm's LLN).

Each picks one node per instance by free GPUs. Without restrictions the free-GPU
buckets answer in O(G); a partition restriction or a distinct-nodes job scans.
"""

from __future__ import annotations

from abc import abstractmethod

from .base import GreedyPolicy, register


class _ByFree(GreedyPolicy):
    """One node per instance ranked by ``_key`` (ties to the lowest index); where nothing restricts the job, the
    free-GPU buckets answer instead (``_bucket``), in O(G)."""

    def choose(self, gpus, taken, allowed, distinct):
        if allowed is None and not (distinct and taken):
            return self._bucket(gpus)
        return self.pick_by_free(gpus, taken, allowed, distinct, self._key)

    @abstractmethod
    def _bucket(self, gpus: int) -> int | None: ...

    @abstractmethod
    def _key(self, i: int) -> object: ...


@register
class FirstFit(_ByFree):
    name = "first-fit"
    summary = "lowest-index node with enough free GPUs"

    def _bucket(self, gpus):
        free = self.cluster.free
        mins = [m for k in range(gpus, free.max_key + 1) if (m := free.bucket(k).min()) is not None]
        return min(mins) if mins else None

    def _key(self, i):
        return i


@register
class BestFit(_ByFree):
    name = "best-fit"
    summary = "node with the fewest free GPUs that still fit (GFS-style)"

    def _bucket(self, gpus):
        hit = self.cluster.free.lowest_with_key_at_least(gpus)
        return None if hit is None else hit[1]

    def _key(self, i):
        return self.cluster.free_gpus(i)


@register
class BestFitRotate(BestFit):
    """Best fit that breaks ties in turn instead of by lowest index.

    Neither better nor worse than best-fit by design, it is the placebo of the results
    (docs/results/placebo): how far a policy moves from best-fit's figures when it decides
    otherwise only between equals.
    """

    name = "best-fit-rotate"
    summary = "best fit, ties to the first node after the last one placed on (a placebo)"

    def __init__(self, nodes, **config):
        super().__init__(nodes, **config)
        self._after = 0  # where the tie-break starts: the node after the last placement's

    def choose(self, gpus, taken, allowed, distinct):
        n, start = len(self.cluster), self._after
        return self.pick_by_free(gpus, taken, allowed, distinct,
                                 lambda i: (self.cluster.free_gpus(i), (i - start) % n))

    def _place(self, job, allowed, budget):
        decision = super()._place(job, allowed, budget)
        if decision is not None:
            self._after = (self._indexes(decision.nodes[-1:])[0] + 1) % len(self.cluster)
        return decision


@register
class WorstFit(_ByFree):
    name = "worst-fit"
    summary = "node with the most free GPUs (spread, like Slurm's LLN)"

    def _bucket(self, gpus):
        hit = self.cluster.free.highest_with_key_at_least(gpus)
        return None if hit is None else hit[1]

    def _key(self, i):
        return -self.cluster.free_gpus(i)
