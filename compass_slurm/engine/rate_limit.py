"""The migration budget: at most N migrations in any sliding hour.

Shared by the daemon (real clock) and the simulator (virtual clock): the caller
passes the time in, so both spend the budget by the very same rule.
"""

from __future__ import annotations

from collections import deque

HOUR = 3600.0


class RateLimit:
    """At most ``per_hour`` events in any sliding hour; ``None`` means no limit."""

    def __init__(self, per_hour: int | None) -> None:
        if per_hour is not None and per_hour < 0:
            raise ValueError(f"a rate limit must be >= 0 per hour, got {per_hour}")
        self.per_hour = per_hour
        self.times: deque[float] = deque()

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
