"""Durations and points in time as admins type them: ``90s | 30m | 24h | 7d | 2w``, and for ``--since`` also an
ISO-8601 date. The one duration parser: the simulator's windows read it, the wrapper's ``--begin=now+N<unit>``
its units.

A ``--since`` duration means "that long before now". An ISO date or date-time without an offset is
local time (as ``journalctl --since`` reads it); ``Z`` or ``+02:00`` make it explicit.
Every result is a timezone-aware UTC datetime.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

#: seconds per unit (sbatch's unit words begin with these letters: seconds, minutes, hours, days, weeks)
UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")


class TimeParseError(ValueError):
    """A time the parser does not understand; the message names the value and the accepted forms."""


def parse_duration(text: str, unit_required: bool = False) -> float | None:
    """The seconds of ``90s``, ``30m``, ``1.5h``, ``7d``, ``2w`` (case and spaces aside; a bare number is seconds
    unless ``unit_required``); None when ``text`` is not a duration."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None or (unit_required and not match.group(2)):
        return None
    return float(match.group(1)) * UNIT_S[match.group(2) or "s"]


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """The UTC instant ``text`` names: a duration back from ``now`` or an ISO-8601 date."""
    value = text.strip()
    seconds = parse_duration(value, unit_required=True)
    if seconds is not None:
        try:
            return (now or datetime.now(UTC)).astimezone(UTC) - timedelta(seconds=seconds)
        except OverflowError:
            raise TimeParseError(f"invalid time {text!r}: that reaches back before year 1") from None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise TimeParseError(
            f"invalid time {text!r}: expected a duration like 90s, 30m, 24h, 7d, 2w "
            "or an ISO date like 2024-05-01 or 2024-05-01T12:00Z"
        ) from None
    try:
        # astimezone() on a naive datetime assumes local time, which is what the docstring promises.
        return moment.astimezone(UTC)
    except (ValueError, OverflowError):  # in UTC before year 1 or after 9999, or past what the C library can convert
        raise TimeParseError(f"invalid time {text!r}: out of the range of dates (year 1 to 9999 in UTC)") from None
