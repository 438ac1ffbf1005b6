"""The daemon's own note of its requeues: a small JSON file beside the decision log's spool.

A migration requeue-holds a job in one cycle and re-pins and releases it in a later one; the log's record of the
requeue, written ahead, is how a restarted daemon finds the job again (``sync.take_over_requeues``). A daemon
restarted while its log cannot be read cannot ask it, and Slurm cannot say who requeue-held a job: an admin's
``scontrol requeuehold`` shows as the daemon's does (``job_requeued_in_held_state``, priority 0), and a job an admin
held must never be released. So the leading daemon keeps its requeues' records here too, written before Slurm hears
of a requeue and again whenever they change; a restart that cannot read its log takes these over. The note also keeps
the held jobs a daemon could not account for (``unsure``), so that the next one names them too until the log can say,
and the jobs whose release it owes (``owed``: a failed migration left them held, and Slurm refused their release while
they completed): no record of the log says so, and nothing else would release them. And when the migrations its budget
still counts were made (``spent``, seconds of the epoch), which a restart counts again (the log's otherwise).

    {"requeues": [<decision record>, ...], "unsure": ["<job id>", ...], "owed": ["<job id>", ...], "spent": [<s>, ...]}
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..atomic import write_atomic
from ..slurm.requests import id_order
from .job_states import JobBook
from .spool import MODE, Spool, as_doc, from_doc
from .store import DecisionRecord


@dataclass(frozen=True, slots=True)
class Noted:
    """What a note says: the requeues' records by job id, the held jobs no daemon could account for, the jobs
    whose release is owed, and when the migrations the budget still counts were made."""

    requeues: dict[str, DecisionRecord]
    unsure: tuple[str, ...]
    owed: tuple[str, ...]
    spent: tuple[float, ...]


class RequeueNote:
    """The note at ``path`` (None: none is kept: no log, or a dry run)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        #: held jobs that may be this daemon's requeues, which it can neither tell from an admin's hold nor release
        self.unsure: list[str] = []
        self._written: str | None = None

    @classmethod
    def beside(cls, spool: Spool | None) -> RequeueNote:
        return cls(None if spool is None else spool.path.with_name(spool.path.name + ".requeues"))

    def write(self, book: JobBook, spent: Iterable[float], more: Iterable[DecisionRecord] = ()) -> str | None:
        """Make the note say the book's requeues and ``more`` of them, ``unsure``, the jobs whose release the book
        owes and when the budget's migrations were ``spent`` (not rewritten when it says so already); why it cannot
        be written, or None."""
        if self.path is None:
            return None
        requeues = sorted([*book.requeues(), *more], key=lambda r: id_order(r.job_id))
        text = json.dumps({"requeues": list(map(as_doc, requeues)), "unsure": self.unsure,
                           "owed": sorted(book.release_due, key=id_order), "spent": list(spent)})
        if text == self._written:
            return None
        try:
            write_atomic(self.path, text, MODE)
        except OSError as err:
            return f"the daemon's note of its requeues {self.path} cannot be written ({err.strerror or err})"
        self._written = text
        return None

    def read(self) -> Noted | None:
        """What the note says; None when there is none (raises ValueError when it cannot be read)."""
        if self.path is None:
            return None
        try:
            doc = json.loads(self.path.read_text())
            records = [from_doc("decision", r) for r in doc["requeues"]]
            return Noted({r.job_id: r for r in records}, tuple(map(str, doc["unsure"])),  # type: ignore[attr-defined]
                         tuple(map(str, doc["owed"])), tuple(map(float, doc.get("spent", ()))))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ValueError(f"the daemon's note of its requeues {self.path} cannot be read ({err})") from None
