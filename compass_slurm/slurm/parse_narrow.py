"""The narrow job read: one ``squeue --Format`` line per job, used to tell which jobs changed.

``squeue --json`` prints every field of every job (390 MB at 100,000 jobs); the
narrow read prints, per job, only the fields ``SlurmJob`` is made of, a few
percent of those bytes, and far less work for slurmctld. A line equal to one of
the last read stands for the job parsed then; only the jobs whose line is new are
read again with ``squeue --json --jobs=...`` and the JSON parser, so each job is
still built from JSON, field for field. ``--array`` prints one line per array
element (without it squeue folds an array's pending tasks into one line, also those
split off and changed, which squeue --json prints as records of their own): an
array is re-read whole when any of its elements' lines changed. Widths are ``:|`` (no limit, ``|`` after
the field: squeue truncates to the width otherwise). The fields that may hold a ``|`` come last,
each followed by the id again: the constraint and ``--prefer`` (``a100|v100``), and the comment,
which a user writes freely. A line ends with ``|<its id>|``, so a ``|`` in them cannot shift a
fixed field, nor turn one of them into another unseen (``a|b`` and ``c`` is ``a|b|7|c|7|``,
``a`` and ``b|c`` is ``a|7|b|c|7|``); a comment
holding a line break shows as a record over several lines, whose lines could
pose as other jobs (so could a repeated id): then the read is not trusted
(``None``) and the caller reads all of ``squeue --json`` that once; so it does
while a heterogeneous job is queued (squeue prints ``7+1``, its JSON the
component's own id). Only new lines
are split and checked: an unchanged one costs a dict lookup.

A job may change between its line and its JSON read: then the record does not stand
for the line, and is not kept under it (``agrees``), so that the next read asks for it
again even if its line has gone back to that text.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter, is_

from .errors import SlurmParseError
from .hostlist import expand
from .state import SlurmJob
from .values import duration_s

#: fields (24.11 names) whose change a job's line must show; LATER's and FREE's follow them
FIELDS = ("JobArrayID", "State", "UserName", "UserID", "Partition", "NodeList", "NumNodes", "NumCPUs", "NumTasks",
          "tres-per-node", "tres-per-job", "tres-per-task", "MinMemory", "mem-per-tres", "OverSubscribe",
          "ReqNodes", "ExcNodes", "Reason", "Reservation", "PriorityLong", "TimeLimit", "StartTime",
          "SubmitTime", "EligibleTime", "ArrayJobID", "ArrayTaskID", "Contiguous", "ReqSwitch")
#: 26.05's squeue --json no longer says which jobs are --exclusive: its line does
EXCLUSIVE_FIELD = "Exclusive"
#: fields of later releases' lines, with the first release that prints each (--segment: 25.05)
LATER = (("SegmentSize", (25, 5)), (EXCLUSIVE_FIELD, (26, 5)))
#: the fields that may hold a '|', each followed by the id (the comment last)
FREE = ("Feature", "JobArrayID", "Prefer", "JobArrayID", "Comment", "JobArrayID")
_PRIORITY_AT = FIELDS.index("PriorityLong")
_JOB_ID = attrgetter("id")
_ID = re.compile(r"\d+(?:_(?:\d+|\[[\d,\-%]+\])|\+\d+)?")


def fixed(release: tuple[int, int]) -> tuple[str, ...]:
    """The fields of a line on ``release`` (major, minor) that hold no '|', in order."""
    return (*FIELDS, *(name for name, since in LATER if release >= since))


def fields(release: tuple[int, int]) -> tuple[str, ...]:
    """The fields of a line, in order, the comment and the id last."""
    return (*fixed(release), *FREE)


def argv(release: tuple[int, int]) -> list[str]:
    return ["squeue", "--noheader", "--array", "--Format=" + ",".join(f"{name}:|" for name in fields(release))]


def array_or_id(job_id: str) -> str:
    """The array job id of an array element's line (``7_3`` -> ``7``), else the job id."""
    return job_id.split("_")[0]


def field(line: str, name: str, release: tuple[int, int]) -> str:
    """One field of a line that holds no '|'."""
    names = fixed(release)
    return line.split("|", len(names))[names.index(name)]


class Kept:
    """The lines of the last read that stand for their jobs (``jobs``), and the latest such line of each job id
    (``line``: some may be gone; pruned now and then)."""

    def __init__(self) -> None:
        self.jobs: dict[str, SlurmJob] = {}
        self.line: dict[str, str] = {}

    def keep(self, line: str, job: SlurmJob) -> None:
        self.jobs[line] = job
        self.line[job.id] = line

    def renew(self, jobs: dict[str, SlurmJob]) -> None:
        """Stand for this read: its lines' ``jobs``."""
        self.jobs = jobs
        if len(self.line) > 2 * len(jobs) + 1024:
            self.line = {job.id: line for line, job in jobs.items()}


@dataclass(frozen=True, slots=True)
class Lines:
    """A narrow read's lines in squeue's order (blank ones left out), the job each stood for in the last
    read (None: new), the (row, job id) of the new ones, and the lines not new with their jobs."""

    rows: list[str]
    known: list[SlurmJob | None]
    new: list[tuple[int, str]]
    kept: dict[str, SlurmJob]


def lines(output: str, release: tuple[int, int], known: Kept) -> Lines | None:
    """The read's lines, each looked up in ``known``; None when a comment holds a line break or an id repeats
    (the lines cannot be trusted). A line in ``known`` was checked when it was new: only new lines are split
    (an unchanged one costs a lookup, in C); a known line's id repeats only where the line does, or where a
    new line has it (then that job's latest kept line is in this read).

    Raises SlurmParseError naming the line when a new line is not one of ours.
    """
    command = " ".join(argv(release))
    separators = len(fields(release))
    rows = output.split("\n")
    found = list(map(known.jobs.get, rows))
    first_known = next(compress(range(len(rows)), found), len(rows))
    new: list[tuple[int, str]] = []
    blank: list[int] = []
    for at in compress(range(len(rows)), map(is_, found, repeat(None))):
        line, lineno = rows[at], at + 1
        if not line.strip():
            blank.append(at)
            continue
        job_id = line.split("|", 1)[0]
        wrong = None
        if not _ID.fullmatch(job_id):
            if new or first_known < at:
                return None  # the rest of a comment with a line break
            wrong = "no job id"
        elif not line.endswith(end := f"|{job_id}|"):
            if any(row.endswith(end) for row in rows[at + 1:]):
                return None  # a comment with a line break
            wrong = f"does not end in |{job_id}|"
        elif line.count("|") < separators:
            wrong = f"fewer than {separators} fields"
        if wrong is not None:
            if _repeat(found[:at], new):
                return None  # as read line by line: an id repeated above it
            raise SlurmParseError(f"{command}: line {lineno}: {wrong}: {line[:80]!r}")
        if "+" in job_id:  # a heterogeneous job's component: squeue --json names it otherwise
            return None
        new.append((at, job_id))
    if blank == [len(rows) - 1]:  # the newline at the end
        rows.pop()
        found.pop()
    elif blank:
        gaps = set(blank)
        rows = [row for at, row in enumerate(rows) if at not in gaps]
        found = list(map(known.jobs.get, rows))
        new = [(at - bisect.bisect_left(blank, at), job_id) for at, job_id in new]
    kept = dict(zip(compress(rows, found), compress(found, found)))
    new_ids = {job_id for _, job_id in new}
    if len(kept) + len(new) != len(rows) or len(new_ids) != len(new) or any(
            known.line.get(job_id) in kept for job_id in new_ids):
        return None  # a line twice, an id twice among the new lines, a new line with the id of a known one
    return Lines(rows, found, new, kept)


def _repeat(found: list[SlurmJob | None], new: list[tuple[int, str]]) -> bool:
    """Whether a job id repeats among the known lines' jobs and the new lines' ids."""
    ids = [*map(_JOB_ID, filter(None, found)), *(job_id for _, job_id in new)]
    return len(set(ids)) != len(ids)


def agrees(line: str, job: SlurmJob, release: tuple[int, int]) -> bool:
    """Whether ``job`` (from squeue --json) is what ``line`` shows, in the fields Slurm changes on its own (state,
    nodes, reason, priority) and those users change most (time limit, partition, node count): a job that changed
    between the two reads shows otherwise."""
    names = fixed(release)
    values = dict(zip(names, line.split("|", len(names))))
    reason = "" if values["Reason"] == "None" else values["Reason"]
    try:
        return (values["State"] == job.state and tuple(expand(values["NodeList"])) == job.nodes
                and reason == job.reason
                and int(values["PriorityLong"]) == job.priority
                and duration_s(values["TimeLimit"], "TimeLimit") == job.time_limit_s
                and values["Partition"] == job.partition and int(values["NumNodes"]) == job.num_nodes)
    except (SlurmParseError, ValueError):
        return False


def repriced(line: str, old: str, job: SlurmJob, release: tuple[int, int]) -> SlurmJob | None:
    """``job``, which ``old`` stood for, with the priority ``line`` shows, where that alone changed (slurmctld
    recalculates every pending job's priority every PriorityCalcPeriod); else None (read its JSON)."""
    count = len(fixed(release))
    now, before = line.split("|", count), old.split("|", count)
    at = _PRIORITY_AT
    value = now[at]
    if now[:at] != before[:at] or now[at + 1:] != before[at + 1:] or not (value.isascii() and value.isdigit()):
        return None
    return job.with_priority(int(value))


def array_agrees(elements: list[tuple[str, str]], records: list[SlurmJob], release: tuple[int, int]) -> bool:
    """Whether an array's records (squeue --json) are what its element lines show: each line by its task's own
    record, or by the record of the tasks not split off yet."""
    by_id = {job.id: job for job in records}
    rest = next((job for job in records if job.array_pending), None)
    return all((job := by_id.get(job_id, rest)) is not None and agrees(line, job, release)
               for job_id, line in elements)
