"""The real ``compass daemon`` logging to each backend (a dry run on a recorded Slurm state, so no Slurm is
needed), and the real ``compass decisions`` reading it back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from compass_slurm.service.store import Store

COMPASS = Path(sys.executable).parent / "compass"
MIXED = Path(__file__).resolve().parents[1] / "data" / "snapshots" / "mixed-16x8.json"


def compass(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(COMPASS), *args], capture_output=True, text=True, timeout=120)


def test_the_daemon_logs_its_cycles_and_the_cli_reads_them(log_url: str) -> None:
    for _ in range(2):  # the second opens a log the first made
        done = compass("daemon", "--once", "--config", "/dev/null", "--snapshot", str(MIXED), "--db", log_url)
        assert done.returncode == 0, done.stderr
    with Store.open(log_url, create=False) as log:
        samples = log.samples()
        assert [s.nodes for s in samples] == [16, 16] and samples[0].cycle < samples[1].cycle
        assert log.errors() == []
    read = compass("decisions", "--json", "--db", log_url)
    assert read.returncode == 0 and json.loads(read.stdout) == [], read.stderr
