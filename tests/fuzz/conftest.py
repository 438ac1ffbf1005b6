"""Counts failures per parser and, when COMPASS_FUZZ_REPORT names a file, writes the cases and failures there."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest
from fuzzing import CASES

FAILED: Counter[str] = Counter()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = (yield).get_result()
    marker = item.get_closest_marker("fuzz")
    if marker is not None and report.when == "call" and report.failed:
        FAILED[marker.kwargs["parser"]] += 1


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("COMPASS_FUZZ_REPORT")
    if path:
        parsers = sorted(set(CASES) | set(FAILED))
        report = {p: {"cases": CASES[p], "failures": FAILED[p]} for p in parsers}
        with open(path, "w") as out:
            json.dump(report, out, indent=1)
