"""benchmarks/bench_look.py: the look's output as squeue prints it, read back as the daemon reads it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
from bench_look import look_text  # noqa: E402

from compass_slurm.slurm import parse_text  # noqa: E402
from compass_slurm.slurm.state import Look, SlurmJob, SlurmState  # noqa: E402


def test_the_look_reads_back_the_managed_pending_jobs_and_those_holding_nodes():
    jobs = (SlurmJob("1", "u", "PENDING", "gpu", comment="compass"), SlurmJob("2", "u", "PENDING", "gpu"),
            SlurmJob("3", "u", "RUNNING", "gpu", ("n1",), {"n1": 1}), SlurmJob("4", "u", "COMPLETED", "gpu"))
    text = look_text(SlurmState((), jobs, (), (), "22.05.8", 0.0))
    assert text == "1 PD compass\n2 PD (null)\n3 R (null)\n"
    look = parse_text.look(text)
    assert (look.pending, look.holding) == ({"1"}, {"3"})
    states = look_text(SlurmState((), jobs, (), (), "24.11.5", 0.0), comments=False)  # --only-job-state's
    assert states == "1 PD\n2 PD\n3 R\n"
    assert parse_text.look(states, comments=False) == Look(frozenset({"1", "2"}), frozenset({"3"}), comments=False)


@pytest.mark.parametrize("release", ["22.05", "24.11"])
def test_a_small_run_reports_its_figures(release):
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_look.py"), "--nodes", "16", "--jobs", "60",
                           "--repeat", "2", "--release", release, "--json"], capture_output=True, text=True, check=True)
    figures = json.loads(done.stdout)
    assert figures["release"] == release and figures["lines"] == 60 and figures["look_s"] >= 0 and figures["holding"] + figures["pending"] <= 60


@pytest.mark.parametrize("argv, says", [(["--jobs", "0"], "must be above 0"), (["--repeat", "-1"], "must be above 0"),
                                        (["--release", "x"], "--release: not a release such as 24.11: 'x'")])
def test_bad_input_is_one_line_and_exit_2(argv, says):
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_look.py"), *argv], capture_output=True, text=True)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr
