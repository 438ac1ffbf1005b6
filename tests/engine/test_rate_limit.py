"""The migration budget: parsing the setting, resolving it on a cluster, spending it over a sliding hour."""

from __future__ import annotations

import re

import pytest

from compass_slurm.engine.rate_limit import DEFAULT, HOUR, PER_NODE, PER_NODE_FLOOR, RateLimit, parse_setting, per_hour


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
    rate = RateLimit(3)
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
    rate = RateLimit(PER_NODE, 20)
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
