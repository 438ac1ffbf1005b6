"""One PNG comparing the policies over time: SIF (with the 2/N bound), GPU utilisation, queue length."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .loop import SimResult

#: Points per curve; longer timelines are thinned by striding (the CSVs keep every sample).
MAX_POINTS = 4000


def plot_comparison(results: Sequence[SimResult], nodes: int, gpus: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a display
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax_sif, ax_gpu, ax_queue) = plt.subplots(3, 1, sharex=True, figsize=(11, 9))
    for r in results:
        tl = r.timeline
        if tl is None or not len(tl):
            continue
        stride = max(1, len(tl) // MAX_POINTS)
        days = (np.asarray(tl.time[::stride]) - tl.time[0]) / 86400
        sif = (np.asarray(tl.partial[::stride]) - np.asarray(tl.phi_star[::stride])) / nodes
        ax_sif.step(days, sif, where="post", label=r.policy, linewidth=0.8)
        ax_gpu.step(days, np.asarray(tl.gpus_used[::stride]) / gpus, where="post", linewidth=0.8)
        ax_queue.step(days, tl.queued[::stride], where="post", linewidth=0.8)
    ax_sif.axhline(2 / nodes, color="black", linestyle="--", linewidth=0.8, label="2/N")
    ax_sif.set_ylabel("SIF")
    ax_sif.legend(loc="upper right", fontsize="small", ncol=2)
    ax_gpu.set_ylabel("GPU utilisation")
    ax_queue.set_ylabel("jobs waiting")
    ax_queue.set_xlabel("days since first submit")
    fig.suptitle(f"{nodes} nodes, {gpus} GPUs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
