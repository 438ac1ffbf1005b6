"""The migration budget: at most N migrations in any sliding hour, N from the ``migrations_per_hour`` setting.

Shared by the daemon (real clock) and the simulator (virtual clock): the caller
passes the time in, so both spend the budget by the very same rule. The setting is
a whole number, ``"unlimited"``, or ``"per-node"`` (the default): one migration per
managed GPU node per hour, at least ``PER_NODE_FLOOR``, because the 2/N bound needs
a budget that grows with the cluster (docs/results/history.md, ``migrations_per_hour``).
Both resolve the setting here, the daemon again whenever its nodes change.

A second, shorter window caps bursts: ``migrations_burst`` migrations in any
``BURST_WINDOW`` (5 minutes), a whole number, ``"unlimited"`` (only the hour counts) or a
share of the hourly budget such as ``"10%"`` (the default; rounded up, so it follows a
per-node budget; a share of an unlimited budget is no cap). Without it a daemon taking
over a fragmented cluster may spend the whole hour's budget in its first cycles, each
migration a checkpoint-restart (docs/results/README.md, "The burst cap").
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

HOUR = 3600.0
#: the burst cap's window: long enough to span a wave of checkpoint-restarts, short against the hour
BURST_WINDOW = 300.0
UNLIMITED = "unlimited"
PER_NODE = "per-node"
#: the default setting: the bound holds by default (the mission); a site trading it for fewer requeues names a number
DEFAULT = PER_NODE
#: a per-node budget never falls below this: small clusters keep the room the fixed default of 12 gave them
PER_NODE_FLOOR = 12

#: a setting as parsed: a whole number >= 0, UNLIMITED or PER_NODE
Setting = int | str
WANTED = f"not a whole number >= 0, {UNLIMITED!r} or {PER_NODE!r}"
#: the burst cap by default: a tenth of the hour's budget per 5 minutes, the smallest round share whose 12
#: windows still add up to the whole hour (docs/results/README.md, "The burst cap")
BURST_DEFAULT = "10%"
BURST_WANTED = f"not a whole number >= 0, {UNLIMITED!r} or a share of the hourly budget such as '10%'"


def parse_setting(value: object) -> Setting:
    """A ``migrations_per_hour`` setting from a file, a flag or the environment.

    ValueError's message completes "<the value> is ...", so each caller names the value its own way.
    """
    if isinstance(value, str):
        text = value.strip().lower()
        if text in (UNLIMITED, PER_NODE):
            return text
        try:
            value = int(text)
        except ValueError:
            raise ValueError(WANTED) from None
    if isinstance(value, float) and value.is_integer():  # TOML's 12.0 is still twelve
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(WANTED)
    if value < 0:
        raise ValueError("negative: give 0 (no migrations) or more")
    return value


def parse_burst(value: object) -> Setting:
    """A ``migrations_burst`` setting: a whole number >= 0, UNLIMITED, or a share "P%" (0 < P <= 100) kept as "P%".

    ValueError's message completes "<the value> is ...", as parse_setting's.
    """
    text = value.strip().lower() if isinstance(value, str) else None
    if text is None or not text.endswith("%"):
        try:
            setting = parse_setting(value)
        except ValueError as err:
            raise ValueError(BURST_WANTED if str(err) == WANTED else str(err)) from None
        if setting == PER_NODE:
            raise ValueError(BURST_WANTED)
        return setting
    try:
        share = float(text[:-1])
    except ValueError:
        raise ValueError(BURST_WANTED) from None
    if not 0 < share <= 100:  # also refuses nan
        raise ValueError("a share outside (0%, 100%]: give 0 for no migrations, a share such as '10%', or a number")
    return f"{share:g}%"


def per_burst(setting: Setting | None, hourly: int | None) -> int | None:
    """The migrations allowed per BURST_WINDOW under an hourly budget of ``hourly``; None: no burst cap."""
    if setting is None or setting == UNLIMITED:
        return None
    if isinstance(setting, str):
        share = float(parse_burst(setting)[:-1])
        return None if hourly is None else math.ceil(hourly * share / 100)
    return parse_burst(setting)


def remaining(budget: int | None, spent: int) -> int | None:
    """What is left of a budget (None: unlimited) after ``spent`` of it."""
    return None if budget is None else max(0, budget - spent)


def per_hour(setting: Setting | None, nodes: int) -> int | None:
    """The migrations allowed per sliding hour on ``nodes`` GPU nodes; None: no limit (``None`` is unlimited too)."""
    if setting is None or setting == UNLIMITED:
        return None
    if setting == PER_NODE:
        return max(PER_NODE_FLOOR, nodes)
    return parse_setting(setting)


class RateLimit:
    """At most ``per_hour`` events in any sliding hour and ``per_burst`` in any sliding BURST_WINDOW,
    resolved from ``setting`` and ``burst`` on ``nodes`` GPU nodes."""

    def __init__(self, setting: Setting | None, nodes: int = 0, burst: Setting | None = BURST_DEFAULT) -> None:
        self.setting = setting
        self.burst = burst
        self.times: deque[float] = deque()  # spent in the last hour (kept only under an hourly budget)
        self.recent: deque[float] = deque()  # spent in the last BURST_WINDOW (kept only under a burst cap)
        self.resize(nodes)

    def resize(self, nodes: int) -> None:
        """The cluster now has ``nodes`` GPU nodes: a per-node budget, and a share of it, follow (what was
        spent still counts)."""
        self.per_hour = per_hour(self.setting, nodes)
        self.per_burst = per_burst(self.burst, self.per_hour)

    def budget(self, now: float) -> int | None:
        """How many events may happen at ``now`` (events older than their window no longer count); None: any."""
        hour = _left(self.times, self.per_hour, now - HOUR)
        burst = _left(self.recent, self.per_burst, now - BURST_WINDOW)
        return hour if burst is None else burst if hour is None else min(hour, burst)

    def spend(self, now: float, n: int) -> None:
        if self.per_hour is not None:
            self.times.extend([now] * n)
        if self.per_burst is not None:
            self.recent.extend([now] * n)

    def spent(self) -> list[float]:
        """When the events still counted were spent, oldest first (the longer window's): what a restart restores."""
        return list(self.times if self.per_hour is not None else self.recent)

    def restore(self, times: Iterable[float]) -> None:
        """Count the events spent at ``times`` (by a daemon before this one) in place of what this one counted."""
        ordered = sorted(times)
        self.times = deque(ordered if self.per_hour is not None else ())
        self.recent = deque(ordered if self.per_burst is not None else ())

    def overspent(self, now: float) -> str | None:
        """What was spent beyond a limit in the window ending at ``now`` (a broken invariant), or None."""
        for spent, limit, window in ((self.times, self.per_hour, HOUR), (self.recent, self.per_burst, BURST_WINDOW)):
            _left(spent, limit, now - window)
            if limit is not None and len(spent) > limit:
                return f"{len(spent)} migrations in the last {window:g} s exceed {limit}"
        return None


def _left(spent: deque[float], limit: int | None, since: float) -> int | None:
    """What ``limit`` leaves after the events of ``spent`` later than ``since`` (older ones are dropped)."""
    if limit is None:
        return None
    while spent and spent[0] <= since:
        spent.popleft()
    return max(0, limit - len(spent))
