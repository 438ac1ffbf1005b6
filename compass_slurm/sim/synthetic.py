"""Seeded synthetic traces calibrated to published job-size mixes.

- ``venus`` and ``gfs``: the instance shares the paper reports (spec section 5):
  1-GPU / fragmentation-friendly (2, 4) / unfriendly (3, 5, 6, 7) / 8-GPU
  instances. FF and FUF sizes are split evenly; 8-GPU instances come as gangs
  of 1, 2, 4 or 8 (60/20/15/5 % of such jobs, our choice), so job shares are
  the instance shares divided by the mean gang width.
- ``philly``: the job-size histogram of the Philly trace (traces README):
  1 GPU 86.65 %, 2: 2.26, 4: 4.92, 8: 5.12, and the 1.04 % above 8 split as
  the trace does (16: 0.76, 32: 0.20, 64: 0.06, 128: 0.02).

Every mix shares the arrival and run-time model, since the papers publish no
more: Poisson arrivals sized so the mean offered load is ``load_gpus`` GPUs,
log-normal run times with Philly's median (1,321 s) and a heavy tail (sigma 1.8).
"""

from __future__ import annotations

import math

from .workloads import Trace, TraceRecord

MEDIAN_DURATION_S = 1321.0
DURATION_SIGMA = 1.8
WIDE_GANGS = {1: 0.60, 2: 0.20, 4: 0.15, 8: 0.05}
#: the most jobs a synthetic workload has (about 330 MB to generate; a simulation of them runs for hours)
MAX_JOBS = 1_000_000


def _paper_mix(ones: float, ff: float, fuf: float, eights: float) -> dict[tuple[int, int], float]:
    """Job shares over (instances, GPUs per instance) from the paper's instance shares (in %)."""
    mean_width = sum(w * p for w, p in WIDE_GANGS.items())
    mix = {(1, 1): ones}
    mix.update({(1, g): ff / 2 for g in (2, 4)})
    mix.update({(1, g): fuf / 4 for g in (3, 5, 6, 7)})
    mix.update({(w, 8): eights / mean_width * p for w, p in WIDE_GANGS.items()})
    return mix


#: name -> job share (any scale) per (instances, GPUs per instance).
MIXES: dict[str, dict[tuple[int, int], float]] = {
    "venus": _paper_mix(37.68, 9.44, 0.44, 52.44),
    "gfs": _paper_mix(64.16, 6.07, 0.05, 29.73),
    "philly": {
        (1, 1): 86.65,
        (1, 2): 2.26,
        (1, 4): 4.92,
        (1, 8): 5.12,
        (2, 8): 0.76,
        (4, 8): 0.20,
        (8, 8): 0.06,
        (16, 8): 0.02,
    },
}


def names() -> list[str]:
    return sorted(MIXES)


def generate(name: str, jobs: int, seed: int, load_gpus: float = 256.0) -> Trace:
    """``jobs`` jobs of mix ``name``; the same seed gives the same trace."""
    import numpy as np

    if name not in MIXES:
        raise ValueError(f"unknown synthetic workload {name!r}; choose from: {', '.join(names())}")
    if jobs < 1:
        raise ValueError("a synthetic workload needs at least one job")
    shapes = list(MIXES[name])
    weights = np.array([MIXES[name][s] for s in shapes])
    weights /= weights.sum()
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(shapes), size=jobs, p=weights)
    durations = np.rint(rng.lognormal(math.log(MEDIAN_DURATION_S), DURATION_SIGMA, size=jobs))
    mean_gpus = sum(w * g * p for (w, g), p in zip(shapes, weights))
    mean_duration = MEDIAN_DURATION_S * math.exp(DURATION_SIGMA**2 / 2)
    rate = load_gpus / (mean_gpus * mean_duration)  # Little's law: load = rate * E[gpus * duration]
    submits = np.rint(np.cumsum(rng.exponential(1 / rate, size=jobs)))
    records = []
    for k in range(jobs):
        w, g = shapes[picks[k]]
        records.append(TraceRecord(f"{name}-{k}", float(submits[k]), float(durations[k]), w * g, w, g))
    return Trace(tuple(records))
