"""The fragmentation report: what the daemon's samples say about a period, as text, Markdown, JSON or HTML.

Each sample stands for the time until the next one (the last for the median gap);
a gap longer than ``MAX_GAP_FACTOR`` median gaps (the daemon was down) counts only
one median gap, so an outage does not count as time above or below the bound.

Causes of time above 2/N come from the sample fields: WCC violated (no bound is
promised then), foreign placements (nodes outside ABS: jobs submitted around the
wrapper), orphaned fillers, and otherwise pinned instances or the migration rate
limit (Compact could have fixed it with migrations it was not allowed to make).
Samples record partial nodes but not their free GPUs, so stranded GPU-hours are
given as bounds: at least one and at most G-1 free GPUs per partial node, and
never more than all free GPUs.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from statistics import median
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the CLI imports FORMATS for --help without loading SQLAlchemy
    from .store import SampleRecord, Store

FORMATS = ("text", "md", "json", "html")
MAX_GAP_FACTOR = 3.0
_EPS = 1e-12


@dataclass(frozen=True)
class Report:
    """The log's records for [since, until]; the figures are computed from them on demand."""

    since: datetime
    until: datetime
    database: str
    samples: Sequence[SampleRecord]
    decisions: dict[str, int] = field(default_factory=dict)  # action -> count
    migrations: dict[str, int] = field(default_factory=dict)  # status -> count
    errors: dict[str, int] = field(default_factory=dict)  # kind -> count

    @property
    def message(self) -> str | None:
        """Why the report has little to say, or None."""
        if not self.samples:
            return (f"no samples between {_when(self.since)} and {_when(self.until)}: the daemon has not recorded "
                    "a cycle in this period (is it running? see `compass doctor`)")
        if len(self.samples) < 2:
            return "only one sample so far: time-based figures need at least two daemon cycles"
        return None

    def weights(self) -> list[float]:
        """Seconds each sample stands for."""
        times = [s.time.timestamp() for s in self.samples]  # type: ignore[union-attr]
        gaps = [b - a for a, b in zip(times, times[1:])]
        if not gaps:
            return [0.0] * len(times)
        typical = median(gaps)
        return [min(g, MAX_GAP_FACTOR * typical) for g in gaps] + [typical]

    def figures(self) -> dict[str, Any]:
        """Every number the report prints, JSON-ready; empty when there are no samples."""
        samples = self.samples
        if not samples:
            return {}
        w = self.weights()
        total = sum(w)
        hours = total / 3600

        def mean(values: Sequence[float]) -> float | None:
            return sum(v * x for v, x in zip(values, w)) / total if total else None

        def time_where(flags: Sequence[bool]) -> float:
            return sum(x for f, x in zip(flags, w) if f) / 3600

        above = [s.sif > s.sif_bound + _EPS for s in samples]
        free = [s.gpus - s.gpus_used for s in samples]
        node_size = [s.gpus / s.nodes for s in samples]
        stranded_low = [min(f, s.partial) for f, s in zip(free, samples)]
        stranded_high = [min(f, s.partial * (g - 1)) for f, s, g in zip(free, samples, node_size)]
        # Demand of at least a whole node waiting while enough GPUs were free: blocked by placement.
        blocked = [s.queue_len > 0 and g <= s.pending_gpus <= f for s, f, g in zip(samples, free, node_size)]
        above_time = time_where(above)
        causes = {
            "wcc_violated": time_where([a and not s.wcc for a, s in zip(above, samples)]),
            "foreign_placements": time_where([a and s.wcc and s.abs_violations > 0 for a, s in zip(above, samples)]),
            "orphaned_fillers": time_where([a and s.wcc and not s.abs_violations and s.orphans > 0
                                            for a, s in zip(above, samples)]),
            "pinned_or_rate_limit": time_where([a and s.wcc and not s.abs_violations and not s.orphans
                                                for a, s in zip(above, samples)]),
        }
        last = samples[-1]
        return {
            "samples": len(samples),
            "first_sample": _when(samples[0].time),
            "last_sample": _when(last.time),
            "hours_covered": hours,
            "nodes": last.nodes,
            "gpus": last.gpus,
            "sif": {"mean": mean([s.sif for s in samples]), "max": max(s.sif for s in samples), "last": last.sif,
                    "bound": last.sif_bound},
            "hours_above_bound": above_time,
            "share_above_bound": above_time / hours if hours else None,
            "partial": {"mean": mean([s.partial for s in samples]), "max": max(s.partial for s in samples),
                        "last": last.partial},
            "phi_star": {"mean": mean([s.phi_star for s in samples]), "max": max(s.phi_star for s in samples)},
            "gpu_utilisation": mean([s.gpus_used / s.gpus for s in samples]),
            "stranded_gpu_hours": {"low": sum(v * x for v, x in zip(stranded_low, w)) / 3600,
                                   "high": sum(v * x for v, x in zip(stranded_high, w)) / 3600},
            "large_jobs_blocked_hours": time_where(blocked),
            "queue": {"max_jobs": max(s.queue_len for s in samples),
                      "max_pending_gpus": max(s.pending_gpus for s in samples)},
            "hours_wcc_violated": time_where([not s.wcc for s in samples]),
            "causes_above_bound_hours": causes,
            "main_cause": max(causes, key=causes.__getitem__) if above_time else None,
            "cycle_seconds": {"mean": sum(s.duration for s in samples) / len(samples),
                              "max": max(s.duration for s in samples)},
        }

    def as_json(self) -> dict[str, Any]:
        return {"since": _when(self.since), "until": _when(self.until), "database": self.database,
                "message": self.message, **self.figures(),
                "decisions": self.decisions, "migrations": self.migrations, "errors": self.errors}


def build_report(store: Store, since: datetime, until: datetime | None = None) -> Report:
    from .store import ErrorRecord, MigrationRecord

    until = until or datetime.now(UTC)
    return Report(
        since=since,
        until=until,
        database=store.name,
        samples=[s for s in store.samples(since=since) if s.time <= until],  # type: ignore[operator]
        decisions=store.count_actions(since, until),  # per cycle: a day at 16,384 nodes is millions of decisions
        migrations=store.count(MigrationRecord, "status", since, until),
        errors=store.count(ErrorRecord, "kind", since, until),
    )


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


# -- rendering ----------------------------------------------------------------------------------


_CAUSES = {
    "wcc_violated": "WCC violated (too few 1-GPU jobs to fill the odd-sized ones: no bound is promised)",
    "foreign_placements": "foreign placements (jobs outside ABS, e.g. submitted without the wrapper)",
    "orphaned_fillers": "orphaned 1-GPU fillers waiting for a slot",
    "pinned_or_rate_limit": "pinned instances or the migration rate limit (Compact was not allowed to move them)",
}


def lines(report: Report) -> list[tuple[str, str]]:
    """(label, value) rows shared by the text, Markdown and HTML renderings."""
    f = report.figures()
    if not f:
        return []

    def num(value: float | None, digits: int = 3) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    rows = [
        ("period", f"{_when(report.since)} .. {_when(report.until)} ({f['samples']} samples, "
                   f"{f['hours_covered']:.1f} h covered)"),
        ("cluster", f"{f['nodes']} nodes, {f['gpus']} GPUs (latest sample)"),
        ("SIF", f"mean {num(f['sif']['mean'])}, max {num(f['sif']['max'])}, now {num(f['sif']['last'])} "
                f"(bound 2/N = {num(f['sif']['bound'])})"),
        ("time above 2/N", f"{f['hours_above_bound']:.2f} h ({100 * (f['share_above_bound'] or 0):.1f}%)"),
        ("partial nodes", f"mean {num(f['partial']['mean'], 1)}, max {f['partial']['max']}, now {f['partial']['last']}"
                          f" (Phi* mean {num(f['phi_star']['mean'], 1)})"),
        ("GPU utilisation", f"{100 * (f['gpu_utilisation'] or 0):.1f}%"),
        ("GPU-hours stranded on partial nodes",
         f"{f['stranded_gpu_hours']['low']:.1f} to {f['stranded_gpu_hours']['high']:.1f}"),
        ("large jobs blocked by placement", f"{f['large_jobs_blocked_hours']:.2f} h with a node's worth of GPUs "
                                            "pending while enough GPUs were free"),
        ("queue", f"up to {f['queue']['max_jobs']} GPU jobs / {f['queue']['max_pending_gpus']} GPUs pending"),
        ("WCC violated", f"{f['hours_wcc_violated']:.2f} h"),
    ]
    causes = f["causes_above_bound_hours"]
    if f["main_cause"]:
        ranked = sorted((c for c in causes if causes[c] > 0), key=causes.__getitem__, reverse=True)
        rows.append(("main causes above 2/N", "; ".join(f"{_CAUSES[c]}: {causes[c]:.2f} h" for c in ranked)))
    else:
        rows.append(("main causes above 2/N", "none: SIF stayed within the bound"))
    rows += [
        ("decisions", _counts(report.decisions)),
        ("migrations", _counts(report.migrations)),
        ("errors", _counts(report.errors)),
        ("daemon cycle", f"mean {f['cycle_seconds']['mean']:.3f} s, max {f['cycle_seconds']['max']:.3f} s"),
    ]
    return rows


def _counts(counts: dict[str, int]) -> str:
    if not counts:
        return "none"
    return f"{sum(counts.values())} (" + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")"


def render(report: Report, fmt: str, *, schema_version: int) -> str:
    """The report in ``fmt``; ``schema_version`` heads the JSON, as in every JSON document of the CLI's."""
    if fmt == "json":
        import json

        return json.dumps({"schema_version": schema_version, **report.as_json()}, indent=1, default=str) + "\n"
    title = f"compass fragmentation report: {_when(report.since)} .. {_when(report.until)}"
    rows = lines(report)
    note = report.message
    if fmt == "text":
        width = max((len(label) for label, _ in rows), default=0)
        body = [f"{label:<{width}}  {value}" for label, value in rows]
        return "\n".join([title, "", *([note, ""] if note else []), *body]) + "\n"
    if fmt == "md":
        body = ["| figure | value |", "|---|---|", *(f"| {label} | {_md(value)} |" for label, value in rows)]
        return "\n".join([f"# {title}", "", *([f"> {note}", ""] if note else []), *(body if rows else [])]) + "\n"
    if fmt == "html":
        return _html(report, title, rows, note)
    raise ValueError(f"unknown report format {fmt!r}; choose from {', '.join(FORMATS)}")


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def _html(report: Report, title: str, rows: list[tuple[str, str]], note: str | None) -> str:
    esc = html.escape
    table = "".join(f"<tr><th>{esc(label)}</th><td>{esc(value)}</td></tr>" for label, value in rows)
    images = "".join(
        f'<figure><img alt="{esc(name)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        f"<figcaption>{esc(name)}</figcaption></figure>"
        for name, png in plots(report).items()
    )
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{esc(title)}</title><style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}"
        "th{text-align:left;padding-right:1em;vertical-align:top}img{max-width:100%}"
        ".note{background:#fff3cd;padding:.5em}</style></head><body>"
        f"<h1>{esc(title)}</h1>"
        + (f'<p class="note">{esc(note)}</p>' if note else "")
        + (f"<table>{table}</table>" if rows else "")
        + images
        + f"<p><small>from {esc(report.database)}</small></p></body></html>\n"
    )


def plots(report: Report) -> dict[str, bytes]:
    """PNG charts of the samples by title: SIF against 2/N, partial nodes against Phi*, GPU use and queue."""
    if len(report.samples) < 2:
        return {}
    import matplotlib

    matplotlib.use("Agg")  # no display on a controller or in cron
    import matplotlib.pyplot as plt

    samples = report.samples
    times = [s.time for s in samples]
    charts = {
        "SIF against the 2/N bound": [("SIF", [s.sif for s in samples]), ("2/N", [s.sif_bound for s in samples])],
        "partial nodes against Phi*": [("partial nodes", [s.partial for s in samples]),
                                       ("Phi*", [s.phi_star for s in samples])],
        "GPU utilisation and pending GPUs": [("GPUs used %", [100 * s.gpus_used / s.gpus for s in samples]),
                                             ("pending GPUs", [s.pending_gpus for s in samples])],
    }
    out = {}
    for title, series in charts.items():
        fig, ax = plt.subplots(figsize=(9, 3.2), dpi=100)
        for label, values in series:
            ax.step(times, values, where="post", label=label, linestyle="--" if label == "2/N" else "-")
        ax.set_title(title)
        ax.set_xlabel("time (UTC)")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left")
        fig.autofmt_xdate()
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        plt.close(fig)
        out[title] = buffer.getvalue()
    return out
