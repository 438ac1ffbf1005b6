"""The soak (benchmarks/soak.py) at CI size: short GPU jobs through the wrapper under random faults."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from soak import markdown, soak  # noqa: E402

pytestmark = pytest.mark.faults


def test_soak_loses_and_duplicates_nothing(cluster, tmp_path, capsys):
    result = soak(jobs=400, concurrency=16, fault_every=4, seed=7, workdir=tmp_path)
    with capsys.disabled():
        print("\n" + markdown(result))
    assert result["lost"] == [] and result["duplicated"] == [] and result["disagreements"] == []
    assert sum(result["faults"].values()) >= 3
    assert result["placed_by_daemon"] > 0
