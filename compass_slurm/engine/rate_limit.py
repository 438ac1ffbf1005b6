"""The migration budget: at most N migrations in any sliding hour, N from the ``migrations_per_hour`` setting.

Shared by the daemon (real clock) and the simulator (virtual clock): the caller
passes the time in, so both spend the budget by the very same rule. The setting is
a whole number, ``"unlimited"``, or ``"per-node"`` (the default): one migration per
managed GPU node per hour, at least ``PER_NODE_FLOOR``, because the 2/N bound needs
a budget that grows with the cluster (README, "The named setting between the bound
and requeues"). Both resolve the setting here, the daemon again whenever its nodes change.
"""

from __future__ import annotations

from collections import deque

HOUR = 3600.0
UNLIMITED = "unlimited"
PER_NODE = "per-node"
#: the default setting: the bound holds by default (the mission); a site trading it for fewer requeues names a number
DEFAULT = PER_NODE
#: a per-node budget never falls below this: small clusters keep the room the fixed default of 12 gave them
PER_NODE_FLOOR = 12

#: a setting as parsed: a whole number >= 0, UNLIMITED or PER_NODE
Setting = int | str
WANTED = f"not a whole number >= 0, {UNLIMITED!r} or {PER_NODE!r}"


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
    """At most ``per_hour`` events in any sliding hour, resolved from ``setting`` on ``nodes`` GPU nodes."""

    def __init__(self, setting: Setting | None, nodes: int = 0) -> None:
        self.setting = setting
        self.per_hour = per_hour(setting, nodes)
        self.times: deque[float] = deque()

    def resize(self, nodes: int) -> None:
        """The cluster now has ``nodes`` GPU nodes: a per-node budget follows (what was spent still counts)."""
        self.per_hour = per_hour(self.setting, nodes)

    def budget(self, now: float) -> int | None:
        """How many events may happen at ``now`` (events older than an hour no longer count); None: any."""
        if self.per_hour is None:
            return None
        while self.times and self.times[0] <= now - HOUR:
            self.times.popleft()
        return max(0, self.per_hour - len(self.times))

    def spend(self, now: float, n: int) -> None:
        if self.per_hour is not None:
            self.times.extend([now] * n)
