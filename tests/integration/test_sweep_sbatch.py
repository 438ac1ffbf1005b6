"""``compass simulate --sweep --sbatch`` on the real dev cluster: an array job of simulate runs, then collect."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

# 22.05 only: the array's tasks run this venv's compass on the nodes, as on a site with one installation
# everywhere; the 24.11 and 26.05 nodes run their jobs inside their Debian chroot, which has the checkout
# (bind-mounted) but not the host's Python the venv is made of. The submission is plain sbatch
# (--array, --dependency=afterany), which every release reads alike.
pytestmark = [pytest.mark.slurm, pytest.mark.releases("22.05")]

COMPASS = Path(sys.executable).with_name("compass")
TRACE = "job_id,submit_time_s,duration_s,num_gpus\n" + "".join(
    f"j{i},{i * 7},{30 + 11 * i % 90},{(1, 2, 8, 1, 4)[i % 5]}\n" for i in range(60))
SWEEP = """
policies = ["best-fit", "compass"]
queue = ["backfill", "fifo"]
migrations_per_hour = 12
options = ["--nodes", "4"]

[[windows]]
trace = "t.csv"
name = "early"
window = "0:200"

[[windows]]
trace = "t.csv"
name = "empty"         # no job submitted this late: both of its tasks fail
window = "9000:9100"

[sbatch]
options = ["--time=5"]
"""


def test_an_array_job_runs_the_grid_and_the_collect_job_merges_what_finished(dev_cluster, tmp_path):
    (tmp_path / "t.csv").write_text(TRACE)
    (tmp_path / "s.toml").write_text(SWEEP)
    done = subprocess.run([str(COMPASS), "simulate", "--sweep", str(tmp_path / "s.toml"), "--sbatch"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    array_id, collect_id = words[3], words[-4].rstrip(";")
    assert done.stdout.startswith(f"submitted array job {array_id} (8 tasks) and collect job {collect_id}; ")
    out = tmp_path / "s-results"
    deadline = time.monotonic() + 120
    while subprocess.run(["squeue", "--noheader", f"--jobs={array_id},{collect_id}"], capture_output=True,
                         text=True).stdout.strip():
        assert time.monotonic() < deadline, "the sweep's jobs did not finish"
        time.sleep(0.5)
    rows = json.loads((out / "results.json").read_text())
    assert sorted((r["policy"], r["queue"]) for r in rows) == sorted(
        (p, q) for p in ("best-fit", "compass") for q in ("backfill", "fifo"))
    assert all(r["window"] == "early" and r["nodes"] == 4 and r["jobs"] == 29 for r in rows)
    failed = json.loads((out / "failed.json").read_text())
    assert sorted(f["task"] for f in failed) == [4, 5, 6, 7]
    assert all(f["window"] == "empty" and "no jobs to simulate" in f["reason"] for f in failed)
    log = (out / "collect.log").read_text()
    assert "| early | best-fit |" in log and "failed: task 4 (empty best-fit eta=0.9 backfill slack=0 budget=12)" in log
    assert (out / "sweep.png").stat().st_size > 0
