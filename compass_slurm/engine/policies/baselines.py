"""Classic bin-packing baselines: first fit, best fit (GFS-style) and worst fit (Slurm's LLN).

Each picks one node per instance by free GPUs. Without restrictions the free-GPU
buckets answer in O(G); a partition restriction or a distinct-nodes job scans.
"""

from __future__ import annotations

from .base import GreedyPolicy, register


class _ByFree(GreedyPolicy):
    def _fast(self, gpus: int, taken: set[int], allowed: frozenset[int] | None, distinct: bool) -> bool:
        return allowed is None and not (distinct and taken)


@register
class FirstFit(_ByFree):
    name = "first-fit"
    summary = "lowest-index node with enough free GPUs"

    def choose(self, gpus, taken, allowed, distinct):
        if self._fast(gpus, taken, allowed, distinct):
            free = self.cluster.free
            mins = [m for k in range(gpus, free.max_key + 1) if (m := free.bucket(k).min()) is not None]
            return min(mins) if mins else None
        return next(iter(self.fitting(gpus, taken, allowed, distinct)), None)


@register
class BestFit(_ByFree):
    name = "best-fit"
    summary = "node with the fewest free GPUs that still fit (GFS-style)"

    def choose(self, gpus, taken, allowed, distinct):
        if self._fast(gpus, taken, allowed, distinct):
            hit = self.cluster.free.lowest_with_key_at_least(gpus)
            return None if hit is None else hit[1]
        return self.pick_by_free(gpus, taken, allowed, distinct, self.cluster.free_gpus)


@register
class WorstFit(_ByFree):
    name = "worst-fit"
    summary = "node with the most free GPUs (spread, like Slurm's LLN)"

    def choose(self, gpus, taken, allowed, distinct):
        if self._fast(gpus, taken, allowed, distinct):
            hit = self.cluster.free.highest_with_key_at_least(gpus)
            return None if hit is None else hit[1]
        return self.pick_by_free(gpus, taken, allowed, distinct, lambda i: -self.cluster.free_gpus(i))
