#!/usr/bin/env python3
"""The mixed-cluster tables (docs/results/mixed/table.md) from a finished sweep: median and range over the seeds.

    nice compass simulate --sweep docs/results/mixed/sweep.toml
    python3 docs/results/mixed/summarize.py docs/results/mixed/results > docs/results/mixed/table.md

Reads the sweep's plan.json (each task's command line) and results.json (its rows), and
prints one Markdown table per layout: a row per (window, queue, policy, slack) with the
median [min-max] over the seeds of the mean partial nodes (in total and per node group),
AGU, AJCT and the mean wait of whole-node jobs, and the command that makes the row
(``--seed S`` for S in the sweep's seeds). Standard library only.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tables import command, spread  # noqa: E402  (docs/results/tables.py, beside the sweeps)

#: the configurations compared, in order: (policy, slack); the default first (slack 0, EASY's rule)
CONFIGS = (("compass-easy", 0.0), ("best-fit", 0.0), ("compass-easy", 0.5), ("best-fit", 0.5))


def main(results_dir: str) -> None:
    base = Path(results_dir)
    plan = json.loads((base / "plan.json").read_text())
    rows = json.loads((base / "results.json").read_text())
    argv = {t["index"]: t["argv"] for t in plan["tasks"]}
    runs: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        runs[(row["window"], row["queue"], row["policy"], float(row["slack"]))].append(row)
    layouts: dict[str, list[str]] = defaultdict(list)
    for window in dict.fromkeys(r["window"] for r in rows):
        layouts[next(r["layout"] for r in rows if r["window"] == window)].append(window)
    for layout, windows in layouts.items():
        print(f"\n**{Path(layout).name}**\n")
        print("| window | queue | policy | slack | nodes | mean partial nodes | partial per group | AGU | AJCT (s) "
              "| whole-node wait (s) | migrations | command |")
        print("|---|---|---|---:|---|---:|---|---:|---:|---:|---:|---|")
        for window in windows:
            for queue in ("backfill", "fifo"):
                for policy, slack in CONFIGS:
                    got = runs.get((window, queue, policy, slack))
                    if not got:
                        continue
                    first = got[0]
                    groups = ", ".join(f"{label} {n}" for label, n in first["groups"].items())
                    per_group = ", ".join(
                        f"{label} {spread([r['mean_partial_by_group'][label] for r in got], '{:.2f}')}"
                        for label in first["groups"])
                    whole = [r["mean_wait_by_class_s"]["whole-node"] for r in got]
                    print(f"| {window} | {queue} | {policy} | {slack:g} | {groups} | "
                          f"{spread([r['mean_partial_nodes'] for r in got], '{:.2f}')} | {per_group} | "
                          f"{spread([r['agu'] for r in got], '{:.3f}')} | "
                          f"{spread([r['ajct_s'] for r in got], '{:,.0f}')} | "
                          f"{spread(whole, '{:,.0f}') if None not in whole else '-'} | "
                          f"{spread([r['migrations'] for r in got], '{:,.0f}')} | "
                          f"`{command(argv[first['task']])}` |")
    seeds = sorted({r["seed"] for r in rows if r["seed"] is not None})
    print(f"\nMedian [range] over seeds S = {', '.join(map(str, seeds))}; {len(rows)} runs.")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parent / "results"))
