"""Shared helpers for the simulator tests: traces written as CSV text, the shared trace folder."""

from __future__ import annotations

from pathlib import Path

import pytest

#: Real traces live next to the repository, never in it (see /work/shared/traces/README.md).
TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"


@pytest.fixture
def philly() -> Path:
    path = TRACES / "philly_rfold.csv"
    if not path.is_file():
        pytest.skip(f"Philly trace not found at {path} (expected in ../shared/traces next to the repository)")
    return path
