"""benchmarks/slurmctld_load.py's reading of `sdiag` (recorded from 22.05's dev cluster) and its report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import slurmctld_load  # noqa: E402

SDIAG = Path(__file__).resolve().parent / "data" / "slurm" / "sdiag-22.05.txt"


def test_sdiag_rpcs_are_read_by_message_type_only(monkeypatch):
    text = SDIAG.read_text()
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: SimpleNamespace(stdout=text, returncode=0))
    rpcs = slurmctld_load.sdiag_rpcs()
    assert rpcs["REQUEST_SUBMIT_BATCH_JOB"].count == 1 and rpcs["REQUEST_SUBMIT_BATCH_JOB"].total_us == 3541
    assert set(rpcs) == {"REQUEST_PARTITION_INFO", "MESSAGE_NODE_REGISTRATION_STATUS", "REQUEST_NODE_INFO",
                         "REQUEST_SUBMIT_BATCH_JOB", "REQUEST_JOB_INFO", "REQUEST_COMPLETE_BATCH_SCRIPT"}
    assert "root" not in rpcs  # the by-user section is not a message type


def test_the_daemons_share_is_the_rpc_time_of_types_plain_slurm_never_saw():
    Rpc, Phase = slurmctld_load.Rpc, slurmctld_load.Phase
    plain = Phase("plain", 10, 60.0, 1.0, {"REQUEST_SUBMIT_BATCH_JOB": Rpc(10, 2000)}, [0.02] * 10)
    ours = Phase("hook", 10, 60.0, 2.0, {"REQUEST_SUBMIT_BATCH_JOB": Rpc(10, 3000),
                                          "REQUEST_JOB_INFO": Rpc(5, 1000)}, [0.03] * 10, cycles=3, looks=2)
    wrapped = Phase("wrapper", 10, 60.0, 1.5, {"REQUEST_SUBMIT_BATCH_JOB": Rpc(10, 2000),
                                               "REQUEST_JOB_INFO": Rpc(2, 500)}, [0.2] * 10, cycles=2)
    assert ours.beyond(plain) == 1000
    text = slurmctld_load.report([plain, ours, wrapped],
                                 SimpleNamespace(rate=2.0, minutes=1.0, release="22.05", seed=1))
    assert "- hook: the daemon's RPCs 25.0% of slurmctld's RPC time" in text
    assert "submit RPC mean +50.0% over plain Slurm" in text
    assert "- wrapper: the daemon's RPCs 20.0% of slurmctld's RPC time" in text and "+0.0% over plain" in text
    assert "REQUEST_JOB_INFO (daemon): 5 (0 plain)" in text
    assert "| hook | 10 | 2.0 | 0.00 | 0.00 | 0.30 | 0.030 | 0.030 | 3 | 2 |" in text


@pytest.mark.parametrize("text, names", [("plain,hook,wrapper", ["plain", "hook", "wrapper"]),
                                         ("plain, wrapper", ["plain", "wrapper"])])
def test_phases_are_named_plain_first(text, names):
    assert slurmctld_load.phase_list(text) == names


@pytest.mark.parametrize("argv, says", [(["--rate", "0"], "must be above 0"), (["--minutes", "-1"], "must be above 0"),
                                        (["--phases", "hook"], "name plain first"),
                                        (["--phases", "plain,cli_filter"], "name plain first")])
def test_bad_input_is_one_line_and_exit_2(argv, says):
    done = subprocess.run([sys.executable, str(Path(slurmctld_load.__file__)), *argv], capture_output=True, text=True)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("argv, says", [(["--jobs", "0"], "must be above 0"), (["--repeat", "-2"], "must be above 0"),
                                        (["--release", "24.x"], "--release: not a release such as 24.11: '24.x'")])
def test_the_looks_benchmark_refuses_bad_input_in_one_line(argv, says):
    look = Path(slurmctld_load.__file__).with_name("slurmctld_look.py")
    done = subprocess.run([sys.executable, str(look), *argv], capture_output=True, text=True)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr
