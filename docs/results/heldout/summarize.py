#!/usr/bin/env python3
"""Issue 32's held-out tables from a finished sweep: three rows per slice, the price of moving, the targets.

    taskset -c 1 nice -n 10 compass simulate --sweep docs/results/heldout/sweep.toml
    python3 docs/results/heldout/summarize.py docs/results/heldout/results > docs/results/heldout/table.md

Reads the plan.json and results.json of each sweep named (several: their rows together, e.g. a burst
cap's runs beside the uncapped ones of the held-out sweep). Per (slice, migratable share, restart delay):

* the configurations, each the median [min-max] over the tie-break seeds (--perturb): the default
  (compass-easy, slack 0, EASY's rule), best-fit under EASY (slack 0), which is also best-fit with the
  default's queue rule, and compass-easy and best-fit at every other slack the sweep ran (the slack's
  trade-off curve, each point with its own best-fit at the same queue rule);
* the price of moving, per seed then its median: GPU-hours lost to restarts, GPU-hours gained (the AGU
  difference against best-fit under EASY x the cluster's GPUs x the time the default's queue was
  non-empty), migrations per whole-node job started;
* the targets against best-fit under EASY, each held when it holds for the median and for all but at
  most one seed (paired by seed): partial nodes and AGU no worse, whole-node wait and AJCT at most
  best-fit's (+10% in a backlog: best-fit's mean wait over 2 days), no class (1, 2-4, 5-7, whole-node)
  waiting over 10% longer where its best-fit wait is over 10 minutes.

Then, per slack, geometric means over the slices of compass-easy at that slack against best-fit under
EASY, split into the queue rule (best-fit with the slack against without) and the placement
(compass-easy against best-fit at the same slack). Standard library only.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tables import command, spread  # noqa: E402  (docs/results/tables.py, beside the sweeps)

#: the daemon's defaults (compass_slurm/engine/disciplines.py DEFAULT_SLACK): EASY's rule, so best-fit with the
#: default's queue rule is best-fit under EASY
DEFAULT = ("compass-easy", 0.0)
EASY = ("best-fit", 0.0)
CLASSES = ("1", "2-4", "5-7", "whole-node")
BACKLOG_S = 2 * 86400.0
CLASS_FLOOR_S = 600.0
HOUR = 3600.0
UNCAPPED = "unlimited"


def key(row: dict) -> tuple:
    return row["window"], row["migratable"], row["migration_delay_s"], row["migrations_burst_setting"]


def wait(row: dict, cls: str) -> float | None:
    return row["mean_wait_by_class_s"][cls]


def gained_gpu_h(ours: dict, easy: dict) -> float:
    return (ours["agu"] - easy["agu"]) * ours["cluster_gpus"] * ours["queued_s"] / HOUR


def targets(ours: dict, easy: dict) -> dict[str, bool]:
    """Each of issue 32's targets for one seed: the default's run against best-fit's under EASY."""
    slack = 1.10 if easy["mean_wait_s"] > BACKLOG_S else 1.0
    whole_ours, whole_easy = wait(ours, "whole-node"), wait(easy, "whole-node")
    classes = all(wait(ours, c) <= 1.10 * wait(easy, c) for c in CLASSES
                  if wait(easy, c) is not None and wait(easy, c) > CLASS_FLOOR_S)
    return {
        "partial": ours["mean_partial_nodes"] <= easy["mean_partial_nodes"] + 1e-9,
        "AGU": ours["agu"] >= easy["agu"] - 1e-9,
        "whole-node": whole_easy is None or whole_ours <= slack * whole_easy,
        "AJCT": ours["ajct_s"] <= slack * easy["ajct_s"],
        "classes": classes,
    }


#: the figures the noise and budget tables compare, as (row field or wait class, column name)
FIGURES = (("mean_partial_nodes", "partial nodes"), ("agu", "AGU"), ("ajct_s", "AJCT"), ("1", "1-GPU wait"),
           ("whole-node", "whole-node wait"))


def median(rows: list[dict], field: str) -> float | None:
    """The median over seeds of a row field or of a class's mean wait (None: the slice has no such job)."""
    if field in CLASSES:
        return None if wait(rows[0], field) is None else statistics.median(wait(r, field) for r in rows)
    return statistics.median(r[field] for r in rows)


def ratio(ours: list[dict], theirs: list[dict], field: str) -> float | None:
    """The ratio of the medians over seeds, None where either is unknown or the baseline's is 0."""
    a, b = median(ours, field), median(theirs, field)
    return None if a is None or b is None or b == 0 else a / b


def median_row(rows: list[dict]) -> dict:
    """A row of the medians over seeds (the fields the targets read)."""
    med = {name: median(rows, name) for name in ("mean_partial_nodes", "agu", "ajct_s", "mean_wait_s")}
    med["mean_wait_by_class_s"] = {c: median(rows, c) for c in CLASSES}
    return med


#: a target's verdicts: held and lost are claims (the median and all seeds but at most one agree), the others not
HELD, LOST, MEDIAN_ONLY, MISSED = "yes", "**lost**", "median only", "missed"


def held(ours: list[dict], easy: list[dict]) -> dict[str, str]:
    """Per target: held (the median and all seeds but at most one in five, and at most one of fewer), lost (missed
    at the median and on as many), else held at the median only or missed there, each with its seeds (k/n held)."""
    by_seed = {r["perturb"]: r for r in easy}
    pairs = [(r, by_seed[r["perturb"]]) for r in ours if r["perturb"] in by_seed]
    per_seed = [targets(a, b) for a, b in pairs]
    at_median = targets(median_row(ours), median_row(easy))
    out = {}
    for name, ok in at_median.items():
        count, n = sum(t[name] for t in per_seed), len(per_seed)
        agree = n - max(1, n // 5)
        if ok and count >= agree:
            out[name] = HELD
        elif not ok and n - count >= agree:
            out[name] = f"{LOST} ({count}/{n})"
        else:
            out[name] = f"{MEDIAN_ONLY if ok else MISSED} ({count}/{n})"
    return out


def tally(verdicts: list[dict[str, str]]) -> dict[str, Counter]:
    """Per verdict (HELD, LOST, MEDIAN_ONLY, MISSED), on how many of ``verdicts`` each target got it."""
    return {verdict: Counter(k for v in verdicts for k, ok in v.items() if ok.startswith(verdict))
            for verdict in (HELD, LOST, MEDIAN_ONLY, MISSED)}


def seeds(rows: list[dict], wanted: range, renumber: bool = False) -> list[dict]:
    """The rows of the seeds ``wanted``, renumbered 1.. when they stand in for the baseline's seeds."""
    got = sorted((r for r in rows if r["perturb"] in wanted), key=lambda r: r["perturb"])
    return [{**r, "perturb": wanted.index(r["perturb"]) + 1} if renumber else r for r in got]


def cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def missed(verdict: dict[str, str]) -> str:
    """The targets one slice misses at the median, with their verdicts, or "-"."""
    return "; ".join(f"{k}: {v}" for k, v in verdict.items() if not v.startswith((HELD, MEDIAN_ONLY))) or "-"


def counted(verdicts: list[dict[str, str]]) -> str:
    counts = tally(verdicts)
    names = list(verdicts[0])
    return ("missed at the median on " + ", ".join(f"{k} {counts[MISSED][k] + counts[LOST][k]}" for k in names)
            + "; lost on " + ", ".join(f"{k} {counts[LOST][k]}" for k in names))


def runs_of(results_dirs: list[str], configs: tuple[tuple[str, float], ...]) -> tuple[dict, list[str]]:
    """The rows of the (policy, slack) ``configs`` by (slice, policy), and the slices in the sweeps' order."""
    runs: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in (row for d in results_dirs for row in load(d)):
        if (row["policy"], float(row["slack"])) in configs:
            runs[(row["window"], row["policy"])].append(row)
    return runs, list(dict.fromkeys(w for w, _ in runs))


def set_up(title: str, row: dict) -> str:
    """A table's title line with the set-up its runs share (at slack 0)."""
    return (f"# {title}: --migratable {row['migratable']:g}, --migration-delay {row['migration_delay_s']:g}, "
            f"--migrations-burst {row['migrations_burst_setting']}, backfill, slack 0\n")


def fmt_wait(rows: list[dict], cls: str) -> str:
    values = [wait(r, cls) for r in rows]
    return "-" if None in values else spread(values, "{:,.0f}")


def configs(runs: dict, where: tuple) -> list[tuple[tuple, str]]:
    """A slice's rows: the default, best-fit under EASY, then compass-easy and best-fit at each other slack."""
    slacks = sorted({k[-1] for k in runs if k[:4] == where and k[-1] != DEFAULT[1]})
    return [(DEFAULT, "default (compass-easy, EASY)"), (EASY, "best-fit, EASY (= same queue rule)")] + [
        ((policy, slack), f"{policy}, slack {slack:g}") for slack in slacks for policy in (DEFAULT[0], EASY[0])]


def table(runs: dict, where: tuple) -> list[str]:
    lines = ["| config | mean partial nodes | AGU | AJCT (s) | wait 1 / 2-4 / 5-7 / whole-node (s) | migrations "
             "| restart GPU-h | gained GPU-h | migrations per whole-node job |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|"]
    easy = {r["perturb"]: r for r in runs.get((*where, *EASY), [])}
    for config, name in configs(runs, where):
        got = runs.get((*where, *config))
        if not got:
            continue
        gained = [gained_gpu_h(r, easy[r["perturb"]]) for r in got if r["perturb"] in easy]
        over = [r["migrations_per_whole_node_job"] for r in got]
        lines.append(
            f"| {name} | {spread([r['mean_partial_nodes'] for r in got], '{:.2f}')} | "
            f"{spread([r['agu'] for r in got], '{:.3f}')} | {spread([r['ajct_s'] for r in got], '{:,.0f}')} | "
            + " / ".join(fmt_wait(got, c) for c in CLASSES) + " | "
            f"{spread([r['migrations'] for r in got], '{:,.0f}')} | "
            f"{spread([r['restart_gpu_h'] for r in got], '{:,.1f}')} | "
            f"{spread(gained, '{:,.0f}') if gained and config != EASY else '-'} | "
            f"{'-' if None in over else spread(over, '{:.2f}')} |")
    first = runs[(*where, *DEFAULT)][0]
    lines.append(f"\n`{command(first['argv'], '--perturb')}` (S = the seed; best-fit: `--policy best-fit`; "
                 "the other rows: `--slack` as named)")
    return lines


def price(runs: dict, wheres: list[tuple]) -> list[str]:
    """The default's price of moving per slice, medians over the seeds: lost, gained, over-eviction."""
    lines = ["| slice | migratable | delay | burst | migrations | lost to restarts (GPU-h) "
             "| gained against best-fit EASY (GPU-h) | migrations per whole-node job |", "|---|---:|---:|---|---:|---:|---:|---:|"]
    for where in wheres:
        ours, easy = runs.get((*where, *DEFAULT)), {r["perturb"]: r for r in runs.get((*where, *EASY), [])}
        if not ours or not easy:
            continue
        gained = statistics.median(gained_gpu_h(r, easy[r["perturb"]]) for r in ours if r["perturb"] in easy)
        over = [r["migrations_per_whole_node_job"] for r in ours]
        window, share, delay, burst = where
        lines.append(f"| {window} | {share:g} | {delay:g} | {burst} | {statistics.median(r['migrations'] for r in ours):,.0f} "
                     f"| {statistics.median(r['restart_gpu_h'] for r in ours):,.1f} | {gained:,.0f} | "
                     f"{'-' if None in over else f'{statistics.median(over):.2f}'} |")
    return lines


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def split(runs: dict, slices: list[tuple], slacks: list[float]) -> list[str]:
    """compass-easy at each slack against best-fit under EASY, split into the queue rule and the placement."""
    def ratio(field: str, a: tuple, b: tuple) -> str:
        """The geometric mean over the slices where both medians are above 0 (and how many those are)."""
        pairs = [(statistics.median(r[field] for r in runs[(*s, *a)]),
                  statistics.median(r[field] for r in runs[(*s, *b)])) for s in slices]
        kept = [x / y for x, y in pairs if x > 0 and y > 0]
        return f"{geomean(kept):.3f}" + ("" if len(kept) == len(pairs) else f" ({len(kept)} slices)")
    lines = ["| ratio (geometric mean over slices of the seeds' medians) | AJCT | mean partial nodes "
             "| whole-node wait | AGU |", "|---|---:|---:|---:|---:|"]
    rows = [("default / best-fit EASY (the placement alone)", DEFAULT, EASY)]
    for slack in slacks:
        ours, theirs = (DEFAULT[0], slack), (EASY[0], slack)
        rows += [(f"compass-easy slack {slack:g} / best-fit EASY (all)", ours, EASY),
                 (f"best-fit slack {slack:g} / best-fit EASY (the queue rule)", theirs, EASY),
                 (f"compass-easy slack {slack:g} / best-fit slack {slack:g} (the placement)", ours, theirs)]
    for name, a, b in rows:
        lines.append(f"| {name} | {ratio('ajct_s', a, b)} | {ratio('mean_partial_nodes', a, b)} "
                     f"| {ratio('whole_node_wait_s', a, b)} | {ratio('agu', a, b)} |")
    return lines


def burst_cost(runs: dict, capped: list[tuple]) -> list[str]:
    """Per slice, the default with a burst cap against the same without one."""
    fields = (("mean_partial_nodes", "partial nodes"), ("agu", "AGU"), ("ajct_s", "AJCT"),
              ("whole-node", "whole-node wait"), ("migrations", "migrations"))
    lines = ["| slice | migratable | delay | burst | " + " | ".join(name for _, name in fields)
             + " | most in 5 min (unlimited) |", "|---|---:|---:|---|" + "---:|" * (len(fields) + 1)]
    for where in capped:
        ours, free = runs[(*where, *DEFAULT)], runs[(*where[:3], UNCAPPED, *DEFAULT)]

        def median(rows: list[dict], field: str) -> float:
            return statistics.median(wait(r, field) if field in CLASSES else r[field] for r in rows)
        cells = []
        for field, _ in fields:
            if field == "whole-node" and wait(free[0], field) is None:
                cells.append("-")
                continue
            a, b = median(ours, field), median(free, field)
            cells.append(f"{a / b:.3f}" if b else f"{a:g} / 0")
        window, share, delay, burst = where
        cells.append(spread([r["migrations_burst_max"] for r in free], "{:.0f}"))
        lines.append(f"| {window} | {share:g} | {delay:g} | {burst} | " + " | ".join(cells) + " |")
    return lines


def load(results_dir: str) -> list[dict]:
    """A finished sweep's rows, each with its task's command line (``argv``)."""
    base = Path(results_dir)
    argv = {t["index"]: t["argv"] for t in json.loads((base / "plan.json").read_text())["tasks"]}
    return [{**row, "argv": argv[row["task"]]} for row in json.loads((base / "results.json").read_text())]


def main(results_dirs: list[str]) -> None:
    rows = [row for d in results_dirs for row in load(d)]
    runs: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        row["whole_node_wait_s"] = wait(row, "whole-node") or 0.0
        runs[(*key(row), row["policy"], float(row["slack"]))].append(row)
    wheres = list(dict.fromkeys(key(r) for r in rows))
    verdicts = []
    for where in wheres:
        window, share, delay, burst = where
        nodes = runs[(*where, *DEFAULT)][0]["nodes"]
        print(f"\n### {window}: {nodes} nodes of 8 GPUs, --migratable {share:g}, --migration-delay {delay:g}, "
              f"--migrations-burst {burst}\n")
        print("\n".join(table(runs, where)))
        for config, name in configs(runs, where)[::2]:  # compass-easy at each slack
            if runs.get((*where, *EASY)) and runs.get((*where, *config)):
                verdicts.append((where, name, held(runs[(*where, *config)], runs[(*where, *EASY)])))
    print("\n### Targets against best-fit under EASY\n\nyes: held at the median and on all seeds but at most one; "
          "**lost**: missed at the median and on all seeds but at most one; otherwise no claim either way: held at "
          "the median only, or missed there (k/n: the seeds on which it held).\n")
    names = list(verdicts[0][2]) if verdicts else []
    print("| slice | migratable | delay | burst | config | " + " | ".join(names) + " |")
    print("|---|---:|---:|---|---|" + "---|" * len(names))
    for (window, share, delay, burst), name, verdict in verdicts:
        print(f"| {window} | {share:g} | {delay:g} | {burst} | {name} | " + " | ".join(verdict.values()) + " |")
    for share, delay, burst in dict.fromkeys(w[1:] for w in wheres):
        for name in dict.fromkeys(n for w, n, _ in verdicts if w[1:] == (share, delay, burst)):
            got = [v for w, n, v in verdicts if n == name and w[1:] == (share, delay, burst)]
            counts = tally(got)
            print(f"\n{name} at --migratable {share:g}, --migration-delay {delay:g}, --migrations-burst {burst}, "
                  f"of {len(got)} slices: held on " + ", ".join(f"{k} {counts[HELD][k]}" for k in names)
                  + "; at the median (held or median only) on " + ", ".join(
                      f"{k} {counts[HELD][k] + counts[MEDIAN_ONLY][k]}" for k in names)
                  + "; lost on " + ", ".join(f"{k} {counts[LOST][k]}" for k in names) + ".")
    for share, delay, burst in dict.fromkeys(w[1:] for w in wheres):
        slices = [w for w in wheres if w[1:] == (share, delay, burst) and runs.get((*w, *DEFAULT)) and runs.get((*w, *EASY))]
        slacks = sorted({k[-1] for k in runs if k[1:4] == (share, delay, burst) and k[-1] != DEFAULT[1]
                         and all(runs.get((*w, p, k[-1])) for w in slices for p in (DEFAULT[0], EASY[0]))})
        if slices:
            print(f"\n### Queue rule against placement (--migratable {share:g}, --migration-delay {delay:g}, "
                  f"--migrations-burst {burst}, {len(slices)} slices)\n")
            print("\n".join(split(runs, slices, slacks)))
    print("\n### The price of moving: the default (medians over seeds)\n")
    print("\n".join(price(runs, wheres)))
    caps = [w for w in wheres if w[3] != UNCAPPED and (*w[:3], UNCAPPED) in {x[:4] for x in wheres}]
    if caps:
        print("\n### What the burst cap costs the default (capped / unlimited, medians over seeds)\n")
        print("\n".join(burst_cost(runs, caps)))
    seeds = sorted({r["perturb"] for r in rows if r["perturb"] is not None})
    print(f"\nMedian [range] over tie-break seeds {', '.join(map(str, seeds))}; {len(rows)} runs.")


if __name__ == "__main__":
    main(sys.argv[1:] or [str(Path(__file__).resolve().parent / "results")])
