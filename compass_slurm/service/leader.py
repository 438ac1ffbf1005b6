"""One active daemon: the daemons that share a decision log elect one leader, which alone changes jobs.

A site with a backup controller runs a daemon beside each slurmctld, both on one MariaDB or PostgreSQL
log. The log's ``leader`` table holds one row: the holder, a fencing token (+1 with every new holder) and
a beat (+1 with every renewal). Every cycle the leader renews it; every other daemon is a standby: it
reads Slurm and answers ``compass status`` and the wrapper's ping, says in the row that it is there,
and changes no job.

Time is measured on each daemon's own monotonic clock, never compared across hosts:

- the leader acts only until ``lease - guard`` after it *sent* its last successful renewal (fencing),
  renewing on the way when a step comes late in the cycle;
- a standby claims the lead only once it has seen the row's version (token, beat) stand still for a
  whole lease, counted from when it *first saw* that version, which came after the renewal was sent.
  The claim is a compare-and-set on that version, so of two standbys one wins.

So the old leader has stopped before any standby can claim, whatever the clocks say, and a
standby's read failures cost time, never safety. The lease is short (``leader_lease``, by default
two intervals) while a standby has said it is there; a leader that saw none ("alone") renews a
lone lease of LONE_LEASE_S instead, so that a log outage does not stop a lone daemon placing
(it spools, see spool.py); a standby that appears meanwhile waits the lone lease out. A holder
on this host whose process is gone (a crash; systemd restarts it) is taken over at once. A daemon
that stops gracefully resigns, and a standby takes over at its next cycle.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from .store import LeaderRow, Store, StoreError, resolve_db_url

log = logging.getLogger("compass.daemon")

#: the lease of a leader that saw no standby: how long it goes on through a log outage
LONE_LEASE_S = 600.0
#: a standby counts as there while it said so within this many of its leader's leases
STANDBY_LEASES = 3


@dataclass(frozen=True, slots=True)
class Leader:
    """Who leads, as the row says (for ping, status and doctor)."""

    host: str
    pid: int
    since: datetime | None
    token: int
    renewed: datetime | None = None
    #: how long a standby waits for a renewal before it takes over (the lone lease where the leader saw none)
    lease_s: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "token": self.token, "since": _iso(self.since),
                "renewed": _iso(self.renewed), "lease_s": self.lease_s}

    @classmethod
    def of(cls, row: LeaderRow | None) -> Leader | None:
        if row is None or row.holder is None:
            return None
        return cls(row.host or "?", row.pid or 0, row.since, row.token, row.renewed, _waited(row))


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat(timespec="seconds")


def alive_here(pid: int) -> bool:
    """Whether process ``pid`` of this host exists (one we may not signal exists too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Leadership:
    """This daemon's part in the election over the log at ``db``; without a log it always leads."""

    def __init__(self, db: str | None, lease_s: float, *, clock: Callable[[], float] = time.monotonic,
                 host: str | None = None, pid: int | None = None,
                 alive: Callable[[int], bool] = alive_here) -> None:
        self.db = db
        self.lease_s = lease_s
        self.clock = clock
        self.host = host or socket.gethostname()
        self.pid = os.getpid() if pid is None else pid
        self.holder = f"{self.host}:{self.pid}:{uuid.uuid4().hex[:8]}"
        self.alive = alive
        #: the log is a SQLite file: only daemons of this host can share it
        self.local = db is not None and resolve_db_url(db).startswith("sqlite")
        self.store: Store | None = None
        #: our fencing token while we lead
        self.token: int | None = None
        #: when (our clock) we sent the last renewal that succeeded, and whether it found us alone
        self.renewed_at = 0.0
        self.alone = True
        self._tried_at = 0.0
        #: the row as last read, and when we first saw its version
        self.row: LeaderRow | None = None
        self._seen_at = 0.0
        #: whether the log was ever read
        self.reached = False

    @property
    def leads(self) -> bool:
        return self.db is None or self.token is not None

    @property
    def role(self) -> str:
        return "leader" if self.leads else "standby"

    @property
    def guard(self) -> float:
        """How long before its lease ends the leader stops: a step (one scontrol batch) must end in time."""
        return self.lease_s / 2

    def leader(self) -> Leader | None:
        """Who leads as far as this daemon knows (itself included)."""
        if self.db is None:
            return Leader(self.host, self.pid, None, 0)
        return Leader.of(self.row)

    def step(self) -> bool:
        """Once per cycle, before it acts: renew our lead, or claim it when free, or note that we stand by.
        Returns whether the role changed (the daemon then rebuilds its state from Slurm and the log)."""
        if self.db is None:
            return False
        was = self.leads
        try:
            if self.token:
                self._renew()
            if not self.token:  # a lone lead (token 0) ends with the log back: the lead is claimed properly
                self._follow_or_claim()
        except StoreError as err:
            log.warning("leader election: %s", err.message)
            if self.token is not None:
                self.may_act(renew=False)  # leads on while its lease lasts
            elif self.local and self._unopposed():
                # A SQLite log that fails, and no other daemon known: lead alone, as without a log (a log that
                # fails must not stop placement), for at most the lone lease. Daemons on other hosts cannot
                # share a SQLite file; a server's log is only ever led through its row.
                self.token, self.renewed_at, self.alone = 0, self.clock(), True
                log.warning("leader election: the log cannot be written and no other daemon is known: this daemon "
                            "leads alone, for at most %.0f s", LONE_LEASE_S)
        return self.leads != was

    def may_act(self, renew: bool = True) -> bool:
        """Whether this daemon may change a job now: it leads, and its lease has more than ``guard`` to run.
        Past half the lease it renews first (at most every quarter lease: a log outage must not stall a step)."""
        if self.db is None:
            return True
        if self.token is None:
            return False
        now = self.clock()
        if renew and self.token and now - self.renewed_at > self.lease_s / 2 and now - self._tried_at > self.lease_s / 4:
            self._try_renew()
            if self.token is None:
                return False
        lease = LONE_LEASE_S if self.alone else self.lease_s
        if self.clock() < self.renewed_at + lease - self.guard:
            return True
        self._lose("its lease ran out before it could be renewed")
        return False

    def alone_now(self) -> bool:
        """Whether this daemon leads with no standby there, as the log says now (a renewal: a standby that stopped
        has withdrawn), or as the last renewal said where the log cannot be written."""
        if self.db is not None and self.token:
            self._try_renew()
        return self.leads and self.alone

    def resign(self) -> None:
        """A daemon stopping hands the lead on at once."""
        if self.db is None or self.token is None:
            return
        try:
            self._open().resign_lead(self.holder, self.token)
        except StoreError as err:
            log.warning("leader election: could not resign (%s): a standby takes over when the lease ends",
                        err.message)
        self.token = None

    def close(self) -> None:
        self.resign()
        self._withdraw()
        if self.store is not None:
            self.store.close()
            self.store = None

    # -- the steps ------------------------------------------------------------------------------

    def _open(self) -> Store:
        if self.store is None:
            self.store = Store.open(self.db)
        return self.store

    def _renew(self) -> None:
        assert self.token is not None
        sent = self._tried_at = self.clock()
        row = self._open().renew_lead(self.holder, self.token, self.lease_s, self._standby_since())
        if row is None:
            self._saw(self._open().leader())
            self._lose(f"another daemon took the lead ({_who(self.row)})")
            return
        self._saw(row)
        self.renewed_at, self.alone = sent, row.alone

    def _try_renew(self) -> None:
        """Renew, a log that fails said in one line (the lead goes on while its lease lasts)."""
        try:
            self._renew()
        except StoreError as err:
            log.warning("leader election: renewing the lease: %s", err.message)

    def _follow_or_claim(self) -> None:
        store = self._open()
        row = store.leader()
        self.reached = True
        self._saw(row)
        why = self._claimable(row, self.clock())
        if why is None:
            self._lose(f"{_who(row)} leads")  # (a lone lead, while the log was down)
            store.note_standby(self.holder)
            return
        sent = self.clock()
        won = store.claim_lead(self.holder, self.host, self.pid, self.lease_s,
                               None if row is None else row.version)
        self._saw(won or store.leader())
        if won is None:
            self._lose(f"{_who(self.row)} claimed the lead first")
            return
        # the short lease until the first renewal: a standby waits no longer for a claim never renewed
        self.token, self.renewed_at, self.alone = won.token, sent, False
        log.warning("leader election: this daemon leads now (token %d): %s", won.token, why)

    def _saw(self, row: LeaderRow | None) -> None:
        """``row`` as just read. The wait for a version starts when this daemon first sees it: also a version read
        where a renewal or a claim failed, which another daemon's claim has just made (a stale start would let
        this daemon take the lead straight back)."""
        if row is None or self.row is None or row.version != self.row.version:
            self._seen_at = self.clock()
        self.row = row

    def _standby_since(self) -> datetime:
        """A standby that said it was there since then is there (the row's ``alone`` is false)."""
        return datetime.now(UTC) - timedelta(seconds=STANDBY_LEASES * self.lease_s)

    def _claimable(self, row: LeaderRow | None, now: float) -> str | None:
        """Why the lead may be claimed now, or None."""
        if row is None:
            return "no daemon led before"
        if row.holder is None:
            return "the last leader resigned"
        if self._gone_here(row):
            if row.holder == self.holder:
                return "the last leader was this daemon, and its lead ran out"
            return f"the last leader, pid {row.pid} of this host, is gone"
        wait = _waited(row)
        if now - self._seen_at > wait:
            return f"the lease of {_who(row)} was not renewed for {wait:.0f} s"
        return None

    def _gone_here(self, row: LeaderRow) -> bool:
        """Whether the holder is a process of this host that is gone (our own pid: an earlier holder in this
        process, or one whose pid ours reuses after a reboot)."""
        return row.host == self.host and (row.pid == self.pid or not self.alive(row.pid or 0))

    def _unopposed(self) -> bool:
        """Whether no other daemon is known to lead or stand by: the log was never read, or its row names no live
        holder and no standby lately."""
        row = self.row
        if not self.reached or row is None:
            return True
        if row.holder is not None and not self._gone_here(row):
            return False
        lately = self._standby_since()
        return row.standby in (None, self.holder) or row.standby_seen is None or row.standby_seen < lately

    def _withdraw(self) -> None:
        """A standby stopping says it is no longer there, so that a leader stopping after it lets go of its pins."""
        if self.db is None or not self.reached:
            return
        try:
            self._open().withdraw_standby(self.holder)
        except StoreError as err:
            log.warning("leader election: could not withdraw as a standby (%s)", err.message)

    def _lose(self, why: str) -> None:
        if self.token is not None:
            log.warning("leader election: this daemon stops changing jobs: %s", why)
        self.token = None


def _waited(row: LeaderRow) -> float:
    """How long a standby waits for the row's version to change: the lone lease for a leader that renewed alone;
    the short lease for one that renewed beside a standby, or never renewed (a claim: beat 0), so that a leader
    dying right after its claim is taken over within a lease (it fences on the short lease until it renews)."""
    return LONE_LEASE_S if row.alone and row.beat else row.lease_s


def _who(row: LeaderRow | None) -> str:
    return "no one" if row is None or row.holder is None else f"{row.host} pid {row.pid}"
