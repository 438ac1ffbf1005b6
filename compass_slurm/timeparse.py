"""Points in time as admins type them: ``--since 90s | 30m | 24h | 7d | 2w`` or an ISO-8601 date.

A duration means "that long before now". An ISO date or date-time without an offset is
local time (as ``journalctl --since`` reads it); ``Z`` or ``+02:00`` make it explicit.
Every result is a timezone-aware UTC datetime.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import click

_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


class TimeParseError(ValueError):
    """A time the parser does not understand; the message names the value and the accepted forms."""


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """The UTC instant ``text`` names: a duration back from ``now`` or an ISO-8601 date."""
    value = text.strip()
    match = _DURATION.fullmatch(value.lower())
    if match:
        amount, unit = match.groups()
        try:
            return (now or datetime.now(UTC)).astimezone(UTC) - timedelta(**{_UNITS[unit]: float(amount)})
        except OverflowError:
            raise TimeParseError(f"invalid time {text!r}: that reaches back before year 1") from None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise TimeParseError(
            f"invalid time {text!r}: expected a duration like 90s, 30m, 24h, 7d, 2w "
            "or an ISO date like 2024-05-01 or 2024-05-01T12:00Z"
        ) from None
    # astimezone() on a naive datetime assumes local time, which is what the docstring promises.
    return moment.astimezone(UTC)


class SinceType(click.ParamType):
    """A click parameter type for ``--since``: bad values exit with code 2 and name the value."""

    name = "DURATION|DATE"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            return parse_since(str(value))
        except TimeParseError as err:
            self.fail(str(err), param, ctx)


SINCE = SinceType()
