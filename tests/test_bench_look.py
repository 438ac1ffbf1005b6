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
from compass_slurm.slurm.state import SlurmJob, SlurmState  # noqa: E402


def test_the_look_reads_back_the_managed_pending_jobs_and_those_holding_nodes():
    jobs = (SlurmJob("1", "u", "PENDING", "gpu", comment="compass"), SlurmJob("2", "u", "PENDING", "gpu"),
            SlurmJob("3", "u", "RUNNING", "gpu", ("n1",), {"n1": 1}), SlurmJob("4", "u", "COMPLETED", "gpu"))
    text = look_text(SlurmState((), jobs, (), (), "22.05.8", 0.0))
    assert text == "1 PD compass\n2 PD (null)\n3 R (null)\n"
    look = parse_text.look(text)
    assert (look.pending_managed, look.holding) == ({"1"}, {"3"})


def test_a_small_run_reports_its_figures():
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_look.py"), "--nodes", "16", "--jobs", "60",
                           "--repeat", "2", "--json"], capture_output=True, text=True, check=True)
    figures = json.loads(done.stdout)
    assert figures["lines"] == 60 and figures["look_s"] >= 0 and figures["holding"] + figures["pending_managed"] <= 60


@pytest.mark.parametrize("argv", [["--jobs", "0"], ["--repeat", "-1"]])
def test_bad_input_is_one_line_and_exit_2(argv):
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_look.py"), *argv], capture_output=True, text=True)
    assert done.returncode == 2 and "must be above 0" in done.stderr and "Traceback" not in done.stderr
