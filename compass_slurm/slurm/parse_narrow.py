"""The narrow job read: one ``squeue --Format`` line per job, used to tell which jobs changed.

``squeue --json`` prints every field of every job (390 MB at 100,000 jobs); the
narrow read prints, per job, only the fields ``SlurmJob`` is made of, a few
percent of those bytes, and far less work for slurmctld. A line equal to one of
the last read stands for the job parsed then; only the jobs whose line is new are
read again with ``squeue --json --jobs=...`` and the JSON parser, so each job is
still built from JSON, field for field. Widths are ``:|`` (no limit, ``|`` after
the field: squeue truncates to the width otherwise). The comment, the one field a
user writes freely, comes last and the id is printed again after it: a line ends
with ``|<its id>|``, so a ``|`` in a comment cannot shift a field, and a comment
holding a line break shows as a record over several lines, whose lines could
pose as other jobs: then the read is not trusted (``None``) and the caller reads
all of ``squeue --json`` that once.
"""

from __future__ import annotations

import re

from .errors import SlurmParseError

#: fields (24.11 names) whose change a job's line must show; the comment and the id follow them
FIELDS = ("JobArrayID", "State", "UserName", "UserID", "Partition", "NodeList", "NumNodes", "NumCPUs", "NumTasks",
          "tres-per-node", "tres-per-job", "tres-per-task", "MinMemory", "mem-per-tres", "OverSubscribe",
          "ReqNodes", "ExcNodes", "Reason", "Reservation", "PriorityLong", "TimeLimit", "StartTime",
          "SubmitTime", "EligibleTime", "ArrayJobID", "ArrayTaskID")
#: 26.05's squeue --json no longer says which jobs are --exclusive: its line does
EXCLUSIVE_FIELD = "Exclusive"
_ID = re.compile(r"\d+(?:_(?:\d+|\[[\d,\-%]+\]))?")


def fields(exclusive: bool) -> tuple[str, ...]:
    """The fields of a line, in order, the comment and the id last."""
    return (*FIELDS, *((EXCLUSIVE_FIELD,) if exclusive else ()), "Comment", "JobArrayID")


def argv(exclusive: bool) -> list[str]:
    return ["squeue", "--noheader", "--Format=" + ",".join(f"{name}:|" for name in fields(exclusive))]


class Line:
    """One job's line: its id, the fields before the comment, and the whole text (the key for the memo)."""

    __slots__ = ("id", "fixed", "text")

    def __init__(self, job_id: str, fixed: list[str], text: str) -> None:
        self.id = job_id
        self.fixed = fixed
        self.text = text

    @property
    def array(self) -> str:
        """The array job id of an array record ("" for other jobs): a changed record re-reads its whole array,
        whose throttle its split tasks share."""
        return self.id.split("_")[0] if "_" in self.id else ""

    def field(self, name: str, exclusive: bool) -> str:
        return self.fixed[fields(exclusive).index(name)]


def lines(output: str, exclusive: bool) -> list[Line] | None:
    """The jobs' lines, in squeue's order; None when a comment holds a line break (or an id repeats).

    Raises SlurmParseError naming the line when a line is not one of ours.
    """
    command = " ".join(argv(exclusive))
    fixed_count = len(fields(exclusive)) - 2
    rows = output.splitlines()
    out: list[Line] = []
    seen: set[str] = set()
    trusted = True
    at = 0
    while at < len(rows):
        line, lineno = rows[at], at + 1
        at += 1
        if not line.strip():
            continue
        job_id = line.split("|", 1)[0]
        if not _ID.fullmatch(job_id):
            raise SlurmParseError(f"{command}: line {lineno}: no job id: {line[:80]!r}")
        end = f"|{job_id}|"
        text = line
        while not text.endswith(end) and at < len(rows):  # a line break in the comment: join its lines
            text += "\n" + rows[at]
            at += 1
            trusted = False
        parts = text.split("|", fixed_count)
        if not text.endswith(end) or len(parts) <= fixed_count:
            raise SlurmParseError(f"{command}: line {lineno}: not {len(fields(exclusive))} fields ending in the "
                                  f"job id: {line[:80]!r}")
        if job_id in seen:
            trusted = False
        seen.add(job_id)
        out.append(Line(job_id, parts[:fixed_count], text))
    return out if trusted else None
