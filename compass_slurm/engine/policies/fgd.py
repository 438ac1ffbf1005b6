"""Fragmentation Gradient Descent (Weng et al., USENIX ATC'23) for whole-GPU instances.

FGD places each task where it increases the cluster's *expected* fragmentation the
least, measured against a target workload. Our adaptation:

- Target workload: the instance-size mix of recent arrivals. The last ``window``
  arriving jobs are remembered; a job of w instances of g GPUs adds weight w to
  size g (FGD's tasks are our instances). Until the first arrival, and forever when
  ``window=0``, the mix is ``mix`` from the configuration, by default uniform over
  the sizes 1, 2, 4, 8 that fit the largest node.
- Fragmentation of a node with f free GPUs for a task type t of g_t GPUs: f if the
  node cannot host t (f < g_t), else 0. Only whole GPUs exist here, so FGD's partial
  GPU cases vanish. The measure depends on f alone, not on the node's capacity.
- Expected fragmentation F(n) = sum_t p_t * frag_t(n). An instance of g GPUs goes to
  the eligible node minimising F(after) - F(before), ties to the lowest index.
- An arrival is observed at its first placement attempt, whether or not it fits:
  a blocked job is exactly the demand the cluster should keep room for. The
  scheduler retries queued jobs after every event; a retry of a job still in the
  window is not counted again.

Because F depends only on the free count, the fast path evaluates each free-GPU
bucket once (its lowest-index node stands for all of it): O(G^2) per instance,
independent of N. Partition restrictions and distinct-node gangs scan.
Weights are kept unnormalised and exact (ints, or Fractions from the
configuration) so that equal scores tie exactly and go to the lowest index.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping, Sequence
from fractions import Fraction

from ..model import Decision, EngineError, Job, Node
from .base import GreedyPolicy, register

#: the default target mix before any arrival: uniform over the friendly sizes.
DEFAULT_SIZES = (1, 2, 4, 8)

Weight = int | Fraction


@register
class FGD(GreedyPolicy):
    name = "fgd"
    summary = "least increase of expected fragmentation against the recent job-size mix (FGD, ATC'23)"

    def __init__(
        self, nodes: Sequence[Node], window: int = 1000, mix: Mapping[object, object] | None = None, **config: object
    ) -> None:
        super().__init__(nodes, **config)
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise EngineError(f"policy fgd: window must be a whole number >= 0, got {window!r}")
        self.window = window
        top = self.cluster.max_gpus
        self._initial: dict[int, Weight] = (
            {g: 1 for g in DEFAULT_SIZES if g <= top} if mix is None else _parse_mix(mix, top)
        )
        self._recent: deque[tuple[str, int, int]] = deque()  # (job, gpus, instances), oldest first
        self._recent_ids: set[str] = set()
        self._counts: Counter[int] = Counter()
        self._table: list[Weight] | None = None

    # -- target workload -------------------------------------------------------------------

    def mix(self) -> dict[int, float]:
        """The current target mix: instance size -> probability."""
        weights = self._weights()
        total = sum(weights.values())
        return {g: float(w / total) for g, w in sorted(weights.items())}

    def fragmentation(self, node: str) -> float:
        """F(n): the node's expected fragmentation in GPUs under the current mix."""
        free = max(self.cluster.free_gpus(self._indexes([node])[0]), 0)
        weights = self._weights()
        return float(_frag(weights, free) / sum(weights.values()))

    def _weights(self) -> Mapping[int, Weight]:
        return self._counts or self._initial

    def _observe(self, job: Job) -> None:
        if self.window == 0 or job.id in self._recent_ids:
            return
        self._recent.append((job.id, job.gpus, job.instances))
        self._recent_ids.add(job.id)
        self._counts[job.gpus] += job.instances
        if len(self._recent) > self.window:
            old, gpus, instances = self._recent.popleft()
            self._recent_ids.discard(old)
            self._counts[gpus] -= instances
            if not self._counts[gpus]:
                del self._counts[gpus]
        self._table = None

    def _frag_table(self) -> list[Weight]:
        """Unnormalised F for every free count 0..largest node, rebuilt only when the mix changed."""
        if self._table is None:
            weights = self._weights()
            self._table = [_frag(weights, f) for f in range(self.cluster.max_gpus + 1)]
        return self._table

    # -- placement -------------------------------------------------------------------------

    def _place(self, job: Job, allowed: frozenset[int] | None, budget: int | None) -> Decision | None:
        self._observe(job)
        return super()._place(job, allowed, budget)

    def choose(self, gpus: int, taken: set[int], allowed: frozenset[int] | None, distinct: bool) -> int | None:
        table = self._frag_table()

        def rise(free: int) -> Weight:
            """F(after) - F(before) for a node with ``free`` GPUs taking this instance."""
            return table[free - gpus] - table[free]

        if allowed is None and not (distinct and taken):
            buckets = self.cluster.free
            best: tuple[Weight, int] | None = None
            for f in range(gpus, buckets.max_key + 1):
                i = buckets.bucket(f).min()
                if i is not None and (best is None or (rise(f), i) < best):
                    best = (rise(f), i)
            return None if best is None else best[1]
        free_gpus = self.cluster.free_gpus
        return self.pick_by_free(gpus, taken, allowed, distinct, lambda i: rise(free_gpus(i)))


def _frag(weights: Mapping[int, Weight], free: int) -> Weight:
    """Weighted GPUs stranded on a node with ``free`` GPUs: free for every size it cannot host."""
    return sum((w * free for g, w in weights.items() if free < g), 0)


def _parse_mix(mix: Mapping[object, object], top: int) -> dict[int, Weight]:
    if not isinstance(mix, Mapping) or not mix:
        raise EngineError(f"policy fgd: mix must be a non-empty mapping of GPUs per instance to weight, got {mix!r}")
    out: dict[int, Weight] = {}
    for size, weight in mix.items():
        try:
            g = int(str(size))
            w = Fraction(str(weight))
        except (ValueError, ZeroDivisionError):
            raise EngineError(f"policy fgd: mix entry {size!r}: {weight!r} is not a size and a number") from None
        if not 1 <= g <= top:
            raise EngineError(f"policy fgd: mix size {g} is outside 1..{top} GPUs (the largest node)")
        if w < 0:
            raise EngineError(f"policy fgd: mix weight for size {g} is negative ({weight!r})")
        out[g] = out.get(g, 0) + w
    if not sum(out.values()):
        raise EngineError("policy fgd: mix weights must not all be zero")
    return out
