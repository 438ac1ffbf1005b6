"""``--since`` values: durations back from now and ISO dates, always UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from compass_slurm.timeparse import TimeParseError, parse_since

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "back"),
    [
        ("90s", timedelta(seconds=90)),
        ("30m", timedelta(minutes=30)),
        ("1h", timedelta(hours=1)),
        ("24h", timedelta(hours=24)),
        ("7d", timedelta(days=7)),
        ("2w", timedelta(weeks=2)),
        ("1.5h", timedelta(minutes=90)),
        (" 10M ", timedelta(minutes=10)),
    ],
)
def test_durations_count_back_from_now(text: str, back: timedelta) -> None:
    assert parse_since(text, now=NOW) == NOW - back


def test_iso_dates_become_utc() -> None:
    assert parse_since("2024-04-30T22:15:00Z") == datetime(2024, 4, 30, 22, 15, tzinfo=UTC)
    assert parse_since("2024-04-30T22:15:00+02:00") == datetime(2024, 4, 30, 20, 15, tzinfo=UTC)
    local_midnight = datetime(2024, 4, 30).astimezone()
    assert parse_since("2024-04-30") == local_midnight.astimezone(UTC)
    assert parse_since("2024-04-30").tzinfo is UTC


def test_a_naive_now_is_not_needed() -> None:
    before = datetime.now(UTC)
    assert before - timedelta(hours=1, seconds=1) <= parse_since("1h") <= datetime.now(UTC) - timedelta(hours=1)
    assert parse_since("1h", now=NOW.astimezone(timezone(timedelta(hours=5)))) == NOW - timedelta(hours=1)


@pytest.mark.parametrize("bad", ["", "h", "1y", "yesterday", "5 minutes", "2024-13-01", "-1h", "99999999999d"])
def test_bad_values_name_themselves(bad: str) -> None:
    with pytest.raises(TimeParseError, match=f"invalid time {bad!r}"):
        parse_since(bad, now=NOW)


@pytest.mark.parametrize("edge", ["0001-01-01T00:00+01:00", "9999-12-31T23:59:59-10:00"])
def test_a_date_utc_moves_past_year_1_or_9999_is_one_clear_error(edge: str) -> None:
    with pytest.raises(TimeParseError) as err:
        parse_since(edge)
    assert str(err.value) == f"invalid time {edge!r}: out of the range of dates (year 1 to 9999 in UTC)"


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90.0), ("90s", 90.0), ("30m", 1800.0), ("1.5h", 5400.0), ("2d", 172800.0), ("2w", 1209600.0), (" 3H ", 10800.0),
])
def test_one_duration_parser_for_since_windows_and_begin(text: str, seconds: float) -> None:
    from compass_slurm.sim.workloads import parse_window
    from compass_slurm.timeparse import parse_duration

    assert parse_duration(text) == seconds
    assert parse_window(f"{text}:") == (seconds, float("inf"))  # the simulator's windows read the same forms
    assert parse_duration(text, unit_required=True) == (None if text.strip().isdigit() else seconds)


@pytest.mark.parametrize("text", ["", "m", "-5s", "5 m", "5y", "1e3"])
def test_what_is_not_a_duration(text: str) -> None:
    from compass_slurm.timeparse import parse_duration

    assert parse_duration(text) is None


def test_sbatch_begin_words_use_the_same_units() -> None:
    from compass_slurm.submit.sbatch_args import begin_time

    now = datetime(2024, 5, 1, 12, 0)
    assert [begin_time(f"now+2{unit}", now) - now for unit in ("", "seconds", "minute", "hours", "day", "weeks")] == [
        timedelta(seconds=2), timedelta(seconds=2), timedelta(minutes=2), timedelta(hours=2), timedelta(days=2),
        timedelta(weeks=2)]
