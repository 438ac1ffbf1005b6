"""How Slurm spells durations and time limits."""

import pytest

from compass_slurm.slurm.errors import SlurmParseError
from compass_slurm.slurm.values import duration_s, time_limit_s


@pytest.mark.parametrize("text, seconds", [
    ("UNLIMITED", None), ("", None), ("NONE", None), ("365-00:00:00", 365 * 86400), ("01:30:00", 5400),
    ("30:00", 1800), ("5", 300), ("2-3", 2 * 86400 + 3 * 3600), ("2-03:04", 2 * 86400 + 3 * 3600 + 240),
    ("2-03:04:05", 2 * 86400 + 3 * 3600 + 245),
])
def test_scontrol_durations(text, seconds):
    assert duration_s(text, "TimeLimit") == seconds


@pytest.mark.parametrize("text", ["1:2:3:4", "soon", "-5", "1-", "01:3x"])
def test_a_bad_duration_names_the_field(text):
    with pytest.raises(SlurmParseError, match="^job 7: field TimeLimit: not a duration: "):
        duration_s(text, "job 7: field TimeLimit")


def test_json_time_limits_are_minutes_and_markers_mean_unlimited():
    assert time_limit_s(90) == 5400
    assert time_limit_s(None) is None and time_limit_s(0xFFFFFFFE) is None and time_limit_s(0xFFFFFFFF) is None
