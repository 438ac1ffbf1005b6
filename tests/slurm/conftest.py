"""Replays Slurm output recorded on the dev cluster (tests/data/slurm/record.py) in place of the commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


class RecordedSlurm:
    """A CliBackend runner answering from a recorded scenario; remembers every argv it was given."""

    def __init__(self, scenario: str) -> None:
        self.dir = DATA / scenario
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


@pytest.fixture
def mixed() -> RecordedSlurm:
    return RecordedSlurm("mixed-16x8")


@pytest.fixture
def typed() -> RecordedSlurm:
    return RecordedSlurm("typed-4x4")
