"""The migration budget: parsing the settings, resolving them on a cluster, spending them over a sliding hour
and the burst cap's sliding 5 minutes."""

from __future__ import annotations

import re

import pytest

from compass_slurm.engine.rate_limit import (
    BURST_DEFAULT, BURST_WINDOW, DEFAULT, HOUR, PER_NODE, PER_NODE_FLOOR, RateLimit, parse_burst, parse_setting,
    per_burst, per_hour,
)


@pytest.mark.parametrize(("value", "setting"), [
    (0, 0), (12, 12), (12.0, 12), ("48", 48), (" 7 ", 7), ("unlimited", "unlimited"), ("Unlimited", "unlimited"),
    ("per-node", "per-node"), ("PER-NODE", "per-node"),
])
def test_a_setting_is_a_whole_number_unlimited_or_per_node(value, setting):
    assert parse_setting(value) == setting


@pytest.mark.parametrize(("value", "message"), [
    (-1, "negative: give 0 (no migrations) or more"), ("-3", "negative"),
    ("lots", "not a whole number >= 0, 'unlimited' or 'per-node'"), (1.5, "not a whole number"),
    (float("inf"), "not a whole number"), ("9" * 5000, "not a whole number"),
    ("1.5", "not a whole number"), (True, "not a whole number"), (None, "not a whole number"), ("", "not a whole"),
])
def test_a_bad_setting_says_what_it_is_not(value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_setting(value)


def test_the_default_is_one_per_node_but_at_least_12():
    assert (DEFAULT, PER_NODE_FLOOR) == (PER_NODE, 12)
    assert [per_hour(PER_NODE, n) for n in (0, 5, 12, 13, 262)] == [12, 12, 12, 13, 262]
    assert per_hour(40, 262) == 40 and per_hour(0, 262) == 0
    assert per_hour("unlimited", 262) is None and per_hour(None, 262) is None


def test_the_budget_slides_over_the_hour():
    rate = RateLimit(3, burst="unlimited")
    assert rate.budget(0.0) == 3
    rate.spend(0.0, 2)
    rate.spend(10.0, 1)
    assert rate.budget(20.0) == 0
    assert rate.budget(HOUR) == 2  # the two at 0 s are an hour old
    assert rate.budget(HOUR + 10.0) == 3


def test_unlimited_spends_nothing():
    rate = RateLimit("unlimited", 100)
    rate.spend(0.0, 1000)
    assert rate.budget(0.0) is None and not rate.times


def test_a_per_node_budget_follows_the_nodes_and_keeps_what_was_spent():
    rate = RateLimit(PER_NODE, 20, burst="unlimited")
    assert rate.per_hour == 20
    rate.spend(0.0, 15)
    assert rate.budget(1.0) == 5
    rate.resize(14)  # nodes left: the hour's 15 still count, so nothing is left this hour
    assert (rate.per_hour, rate.budget(2.0)) == (14, 0)
    rate.resize(3)
    assert rate.per_hour == 12  # the floor
    rate.resize(40)
    assert rate.budget(3.0) == 25
    fixed = RateLimit(12, 20)
    fixed.resize(400)
    assert fixed.per_hour == 12  # a number is a number, whatever the cluster


# -- the burst cap -------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "setting"), [
    (0, 0), (60, 60), (60.0, 60), (" 60 ", 60), ("unlimited", "unlimited"), ("UNLIMITED", "unlimited"),
    ("10%", "10%"), (" 10.0% ", "10%"), ("2.5%", "2.5%"), ("100%", "100%"),
])
def test_a_burst_cap_is_a_whole_number_unlimited_or_a_share(value, setting):
    assert parse_burst(value) == setting


@pytest.mark.parametrize(("value", "message"), [
    (-1, "negative: give 0 (no migrations) or more"),
    ("lots", "not a whole number >= 0, 'unlimited' or a share of the hourly budget such as '10%'"),
    ("per-node", "not a whole number >= 0, 'unlimited' or a share"),  # a burst is not per node: say a share
    (1.5, "not a whole number"), (True, "not a whole number"), (None, "not a whole number"), ("%", "not a whole"),
    ("ten%", "not a whole number"), ("0%", "a share outside (0%, 100%]"), ("150%", "outside (0%, 100%]"),
    ("nan%", "outside (0%, 100%]"), ("-5%", "outside"),
])
def test_a_bad_burst_cap_says_what_it_is_not(value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_burst(value)


def test_the_burst_default_is_a_tenth_and_a_share_is_of_the_hourly_budget_rounded_up():
    assert (BURST_DEFAULT, BURST_WINDOW) == ("10%", 300.0)
    assert per_burst("unlimited", 4096) is None and per_burst(None, 12) is None
    assert per_burst(60, 4096) == 60 and per_burst(60, None) == 60 and per_burst(0, 12) == 0
    assert [per_burst("10%", h) for h in (4096, 59, 12, 1, 0)] == [410, 6, 2, 1, 0]
    assert per_burst("10%", None) is None  # a share of no limit is no limit


def test_the_default_burst_cap_is_a_tenth_of_the_hour():
    assert (RateLimit(PER_NODE, 4096).per_burst, RateLimit(3).per_burst) == (410, 1)
    assert RateLimit("unlimited", 100).per_burst is None  # a share of no limit is no limit


def test_an_unlimited_burst_cap_keeps_only_the_hour():
    rate = RateLimit(3, burst="unlimited")
    assert rate.per_burst is None
    rate.spend(0.0, 3)
    assert rate.budget(1.0) == 0 and not rate.recent


def test_both_windows_slide_and_the_tighter_one_limits():
    rate = RateLimit(5, burst=2)
    assert rate.budget(0.0) == 2
    rate.spend(0.0, 2)
    assert rate.budget(BURST_WINDOW - 1) == 0  # (-1, 299] still holds the two at 0 s
    assert rate.budget(BURST_WINDOW) == 2  # (0, 300] does not: the hour has 3 left
    rate.spend(400.0, 2)
    assert rate.budget(800.0) == 1  # the hour limits: 4 of 5 spent
    assert rate.budget(HOUR + 1) == 2  # the two at 0 s are an hour old: the hour has 3 left, the burst 2
    assert rate.overspent(HOUR + 1) is None


def test_a_burst_cap_under_an_unlimited_hour_still_caps():
    rate = RateLimit("unlimited", 100, burst=60)
    rate.spend(0.0, 60)
    assert rate.budget(299.0) == 0 and not rate.times
    assert rate.budget(301.0) == 60


def test_a_share_follows_a_per_node_budget_and_keeps_what_was_spent():
    rate = RateLimit(PER_NODE, 4096, burst="10%")
    assert (rate.per_hour, rate.per_burst) == (4096, 410)
    rate.spend(0.0, 400)
    assert rate.budget(1.0) == 10
    rate.resize(1000)  # nodes left: a share of 1,000 is 100, and 400 were spent in these 5 minutes
    assert (rate.per_burst, rate.budget(2.0)) == (100, 0)
    assert rate.budget(BURST_WINDOW + 1) == 100


def test_overspent_names_the_window_beyond_its_limit():
    rate = RateLimit(10, burst=2)
    rate.spend(0.0, 3)  # a driver that spent beyond budget(): the simulator's --check catches it
    assert rate.overspent(1.0) == "3 migrations in the last 300 s exceed 2"
    assert rate.overspent(BURST_WINDOW + 1) is None
    rate = RateLimit(2)
    rate.spend(0.0, 3)
    assert rate.overspent(1.0) == "3 migrations in the last 3600 s exceed 2"


def test_what_was_spent_is_restored_in_place_of_what_was_counted():
    # a restarted daemon counts the moves of the hour before: none left until the older ones are an hour old
    rate = RateLimit(3, burst=2)
    rate.spend(0.0, 1)
    rate.restore([900.0, 100.0, 3000.0])
    assert rate.spent() == [100.0, 900.0, 3000.0]
    assert rate.budget(3000.0) == 0
    assert rate.budget(3701.0) == 1  # the move at 100 is over an hour old
    assert rate.budget(4501.0) == 2
    unlimited_hour = RateLimit("unlimited", burst=2)
    unlimited_hour.restore([0.0, 10.0])
    assert unlimited_hour.spent() == [0.0, 10.0] and unlimited_hour.budget(10.0) == 0
