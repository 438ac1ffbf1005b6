"""The pyslurm backend on the 24.11 and 25.11 dev clusters: the same SlurmState as the CLI backend, and a daemon
placement.

`scripts/dev-cluster pyslurm` builds pyslurm inside the release's chroot (it links that chroot's libslurm and C
library): 24.11's from ../shared/vendor/pyslurm-24.11.x-*.tar.gz, 25.11's from PyPI (pyslurm==25.11.2, the
release sites install with pip). So these tests run their Python there, with this checkout on PYTHONPATH, on
those two releases only: no pyslurm exists for the others.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from devcluster import dev

from compass_slurm.slurm.cli_backend import CliBackend

pytestmark = [pytest.mark.slurm, pytest.mark.releases("24.11", "25.11")]

READ_BOTH = """
import json
from compass_slurm.slurm.cli_backend import CliBackend
from compass_slurm.slurm.pyslurm_backend import PyslurmBackend
pyslurm, cli = PyslurmBackend().read_state().to_dict(), CliBackend().read_state().to_dict()
print(json.dumps([pyslurm, cli]))
"""


@pytest.fixture(scope="module")
def pyslurm_python(dev_cluster) -> str:
    dev_cluster.use()  # set up before the first test's own check
    done = dev("pyslurm")
    if done.returncode == 2 and "no pyslurm source at" in done.stderr:  # ../shared/vendor is not beside this checkout
        pytest.skip(done.stderr.strip().splitlines()[-1].removeprefix("dev-cluster: error: "))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def scenario(idle_cluster):
    """Running per-job, per-node and per-task GPU jobs, a held job, a pending array, a drained node, a reservation."""
    slurm = idle_cluster
    running = [slurm.sbatch("--gpus=2"), slurm.sbatch("--nodes=2", "--gpus-per-node=3", "--comment=compass:migratable"),
               slurm.sbatch("--ntasks=2", "--gpus-per-task=1", "--mem=2000")]
    for job in running:
        slurm.wait(job, "RUNNING")
    slurm.sbatch("--hold", "--gpus=8", "--comment=compass")
    slurm.sbatch("--hold", "--array=1-3", "--gpus-per-task=1", "--ntasks=2")
    slurm.sbatch("--hold", "--gpus=2", "--mem=0")  # all of each node's memory: pyslurm shows no memory at all
    # what pyslurm says of constraints (a list split at commas), contiguity and switches, and squeue of --prefer
    # and --segment; the nodes' active features
    features = ["scontrol", "update", "NodeName=node0[5-6]", "AvailableFeatures=a100,80gb,fast",
                "ActiveFeatures=a100,80gb"]
    subprocess.run(features, check=True)
    slurm.sbatch("--hold", "-C", "a100&80gb", "--prefer=fast|80gb", "--contiguous", "--switches=1", "-N2",
                 "--gpus-per-node=1")
    slurm.sbatch("--hold", "-C", "[a100*1&80gb*1]", "--segment=2", "-N2", "--gpus=2")
    scontrol = ["scontrol", "update", "NodeName=node08", "State=DRAIN", "Reason=pyslurm test"]
    subprocess.run(scontrol, check=True)
    subprocess.run(["scontrol", "create", "reservation", "ReservationName=pyslurm-test", "Nodes=node07",
                    "StartTime=now+1hour", "Duration=60", "Users=root", "Flags=MAINT"], check=True, capture_output=True)
    try:
        yield slurm
    finally:
        subprocess.run(["scontrol", "delete", "ReservationName=pyslurm-test"], check=False)
        subprocess.run(["scontrol", "update", "NodeName=node08", "State=RESUME"], check=False)
        subprocess.run(["scontrol", "update", "NodeName=node0[5-6]", "AvailableFeatures=", "ActiveFeatures="],
                       check=False)


def test_pyslurm_reads_the_same_state_as_the_cli(pyslurm_python, scenario):
    for _ in range(10):  # two reads a moment apart: a job may be between states in one of them
        done = subprocess.run([pyslurm_python, "-c", READ_BOTH], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        pyslurm, cli = json.loads(done.stdout)
        pyslurm.pop("read_at"), cli.pop("read_at")
        if pyslurm == cli:
            break
        time.sleep(0.5)
    for kind in ("nodes", "jobs", "partitions", "reservations"):  # field by field, so a difference names itself
        assert [r.get("name", r.get("id")) for r in pyslurm[kind]] == [r.get("name", r.get("id")) for r in cli[kind]]
        for mine, theirs in zip(pyslurm[kind], cli[kind]):
            assert mine == theirs, (kind, {k: (mine[k], theirs[k]) for k in mine if mine[k] != theirs[k]})
    assert pyslurm == cli
    held = {j["id"] for j in cli["jobs"] if j["held"]}
    assert scenario.submitted[3] in held and any(j.endswith("_[1-3]") for j in held)  # the job and the array
    assert [j["memory_per_node_mb"] for j in cli["jobs"] if j["id"] == scenario.submitted[5]] == [0]
    assert any(n["name"] == "node08" and "DRAIN" in n["flags"] for n in cli["nodes"])
    assert [r["name"] for r in cli["reservations"]] == ["pyslurm-test"]
    constrained = {j["id"]: (j["constraint"], j["prefer"], j["contiguous"], j["switches"], j["segment"])
                   for j in cli["jobs"] if j["id"] in scenario.submitted[6:8]}
    assert constrained == {scenario.submitted[6]: ("a100&80gb", "fast|80gb", True, 1, 0),
                           scenario.submitted[7]: ("[a100*1&80gb*1]", "", False, 0, 2 if "25.11" in pyslurm["version"]
                                                   else 0)}
    assert {n["name"]: n["features"] for n in cli["nodes"] if n["features"]} == {
        "node05": ["80gb", "a100"], "node06": ["80gb", "a100"]}


def test_daemon_with_the_pyslurm_backend_places_a_job(pyslurm_python, idle_cluster, tmp_path: Path):
    job = idle_cluster.sbatch("--gpus=4", "--comment=compass", "--begin=now+60")
    config = tmp_path / "compass.toml"
    config.write_text(f'anchors = "{tmp_path / "anchors"}"\nlease = 60\n')
    db = f"sqlite:///{tmp_path / 'log.db'}"
    done = subprocess.run([pyslurm_python, "-c", "from compass_slurm.cli import main; main()", "daemon", "--once",
                           "--backend", "pyslurm", "--config", str(config), "--db", db],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "backend pyslurm (asked for)" in done.stderr
    node = idle_cluster.wait(job, "RUNNING")
    decided = subprocess.run([pyslurm_python, "-c", "from compass_slurm.cli import main; main()", "decisions",
                              "--json", "--db", db], capture_output=True, text=True, timeout=60)
    assert decided.returncode == 0, decided.stderr
    (decision,) = json.loads(decided.stdout)
    assert (decision["job_id"], decision["gpus_per_node"]) == (job, {node: 4})
    assert CliBackend().read_state().job(job).gpus_alloc == {node: 4}
