"""Replays Slurm output recorded on the dev cluster (tests/data/slurm/record.py) in place of the commands.

The ``mixed`` and ``typed`` fixtures run each test once per Slurm release recorded (RELEASES).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
RELEASES = ("22.05", "23.11", "24.11", "25.11", "26.05")
#: the first release the CLI backend reads jobs narrow on (cli_backend.NARROW_SINCE)
NARROW_SINCE = "24.11"


class RecordedSlurm:
    """A CliBackend runner answering from a recorded scenario; remembers every argv it was given."""

    def __init__(self, scenario: str, release: str = "22.05") -> None:
        self.release = release
        self.dir = DATA / (scenario if release == "22.05" else f"{scenario}-{release}")
        self.answers = json.loads((self.dir / "commands.json").read_text())
        self.calls: list[list[str]] = []
        self.override: dict[str, tuple[int, str, str]] = {}

    def text(self, filename: str) -> str:
        return (self.dir / filename).read_text()

    def __call__(self, argv: list[str], timeout: float) -> tuple[int, str, str]:
        self.calls.append(list(argv))
        key = " ".join(argv)
        if key in self.override:
            return self.override[key]
        if key in self.answers:
            return 0, self.text(self.answers[key]), ""
        return 1, "", f"not recorded: {key}"


@pytest.fixture(params=RELEASES)
def mixed(request: pytest.FixtureRequest) -> RecordedSlurm:
    return RecordedSlurm("mixed-16x8", request.param)


@pytest.fixture(params=RELEASES)
def typed(request: pytest.FixtureRequest) -> RecordedSlurm:
    return RecordedSlurm("typed-4x4", request.param)


@pytest.fixture(params=RELEASES)
def queue(request: pytest.FixtureRequest) -> RecordedSlurm:
    """The narrow read's scenario (record.py --only narrow), on every release."""
    return RecordedSlurm("narrow-8x8", request.param)


@pytest.fixture(params=[r for r in RELEASES if r >= NARROW_SINCE])
def narrow_queue(request: pytest.FixtureRequest) -> RecordedSlurm:
    """The narrow read's scenario on the releases that read narrow."""
    return RecordedSlurm("narrow-8x8", request.param)


@pytest.fixture(params=[r for r in RELEASES if r < NARROW_SINCE])
def wide_queue(request: pytest.FixtureRequest) -> RecordedSlurm:
    """The narrow read's scenario on the releases that read all of squeue --json."""
    return RecordedSlurm("narrow-8x8", request.param)


@pytest.fixture
def exclusive_arrays() -> RecordedSlurm:
    """--exclusive arrays with tasks split off on 26.05 (record.py --only exclusive), whose JSON says nothing of it."""
    return RecordedSlurm("exclusive-4x8", "26.05")


@pytest.fixture(params=[(scenario, release) for scenario in ("mixed-16x8", "typed-4x4", "narrow-8x8")
                        for release in RELEASES if release < NARROW_SINCE])
def by_line(request: pytest.FixtureRequest) -> RecordedSlurm:
    """Every scenario on the releases that read jobs by line (scontrol show job)."""
    return RecordedSlurm(*request.param)


@pytest.fixture(params=[r for r in RELEASES if r < NARROW_SINCE])
def mixed_by_line(request: pytest.FixtureRequest) -> RecordedSlurm:
    """The mixed scenario on the releases that read jobs by line."""
    return RecordedSlurm("mixed-16x8", request.param)


@pytest.fixture
def recorded() -> type[RecordedSlurm]:
    """The replay itself, for tests that replay a scenario more than once (a replay per read)."""
    return RecordedSlurm
