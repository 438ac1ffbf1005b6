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
from devcluster import dev, rpc_counts

from compass_slurm.slurm.backend import unpin_argv, update_argv
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
    slurm.sbatch("--hold", "-N1-2", "--ntasks-per-node=2", "--gpus=4")  # a node range, tasks per node
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
    assert [(j["max_nodes"], j["tasks_per_node"]) for j in cli["jobs"] if j["id"] == scenario.submitted[8]] == [(2, 2)]
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


#: what an update costs slurmctld: scontrol's with a node list (ReqNodeList, NumNodes) first reads the job
#: (update_job.c's _is_single_job: REQUEST_JOB_INFO_SINGLE, and REQUEST_FED_INFO before it)
UPDATE_RPCS = ("REQUEST_UPDATE_JOB", "REQUEST_JOB_INFO_SINGLE", "REQUEST_FED_INFO")
#: what the daemon's pin sets, as `scontrol show job` prints it
PIN_FIELDS = ("ReqNodeList", "NumNodes", "TresPerJob", "TresPerNode")
#: the release's own sdiag (the host's may be of another release), run in its chroot like pyslurm
SDIAG = "import subprocess, sys; subprocess.run(['sdiag', *sys.argv[1:]], check=True)"
#: pyslurm's own update (Job.modify: slurm_update_job, one RPC) of every job named, with the JobSubmitDescription
#: fields given as JSON and the begin time now; prints each refusal
MODIFY = """
import json, sys, time, pyslurm
for job in sys.argv[2:]:
    changes = pyslurm.JobSubmitDescription(**json.loads(sys.argv[1]), begin_time=int(time.time()))
    try:
        pyslurm.Job(int(job)).modify(changes)
    except pyslurm.RPCError as err:
        print(job, err)
"""


def _sdiag(python: str, *args: str) -> str:
    done = subprocess.run([python, "-c", SDIAG, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _update_rpcs(python: str) -> dict[str, int]:
    """How many RPCs of each UPDATE_RPCS type slurmctld served since ``sdiag --reset``."""
    return rpc_counts(_sdiag(python), UPDATE_RPCS)


def _pinned(job: str) -> dict[str, str]:
    line = subprocess.run(["scontrol", "show", "job", "--oneliner", job], capture_output=True, text=True).stdout
    fields = dict(field.split("=", 1) for field in line.split() if "=" in field)
    return {name: fields.get(name, "") for name in PIN_FIELDS}  # (a TresPerJob never set is not printed)


def test_pyslurm_cannot_pin_jobs_as_scontrol_does(pyslurm_python, idle_cluster):
    """Why the pyslurm backend changes jobs through scontrol although pyslurm's own update costs slurmctld one RPC
    where scontrol's pin costs three (issue 31): on an update pyslurm's JobSubmitDescription sets no node count
    (NumNodes), and takes an empty value for no value, so it clears neither TresPerJob (a --gpus=N job's pin is
    refused) nor ReqNodeList (left as it was, the update said to have succeeded). When this fails, a pyslurm can
    make the pin: then the pins may go through it."""
    shapes = {"2 nodes": ("--nodes=2", "--gpus-per-node=2"), "1 node": ("--nodes=1", "--gpus-per-node=8"),
              "per job": ("--gpus=8",)}
    per_shape = 4
    jobs = {(shape, way): [idle_cluster.sbatch("--hold", *args) for _ in range(per_shape)]
            for shape, args in shapes.items() for way in ("scontrol", "pyslurm")}
    by = {way: [job for shape in shapes for job in jobs[shape, way]] for way in ("scontrol", "pyslurm")}
    _sdiag(pyslurm_python, "--reset")
    pins = [update_argv(job, ["node01", "node02"], 4, None, start_now=True) for job in by["scontrol"]]
    assert CliBackend().scontrol_lines(pins) == [None] * len(pins)  # one scontrol reading them all, as the daemon
    rpcs = {"scontrol": _update_rpcs(pyslurm_python)}

    def modify(changes: dict, job_ids: list[str]) -> dict[str, str]:
        done = subprocess.run([pyslurm_python, "-c", MODIFY, json.dumps(changes), *job_ids], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return dict(line.split(" ", 1) for line in done.stdout.splitlines())

    _sdiag(pyslurm_python, "--reset")
    refused = modify({"required_nodes": "node[01-02]", "gres_per_node": {"gpu": 4}}, by["pyslurm"])
    rpcs["pyslurm"] = _update_rpcs(pyslurm_python)
    count = len(by["pyslurm"])
    assert rpcs == {"scontrol": dict.fromkeys(UPDATE_RPCS, count),
                    "pyslurm": {"REQUEST_UPDATE_JOB": count, "REQUEST_JOB_INFO_SINGLE": 0, "REQUEST_FED_INFO": 0}}
    assert refused == dict.fromkeys(jobs["per job", "pyslurm"], "Invalid generic resource (gres) specification")
    pinned = {way: _pinned(jobs["2 nodes", way][0]) for way in ("scontrol", "pyslurm")}
    assert pinned["scontrol"] == pinned["pyslurm"] == {"ReqNodeList": "node[01-02]", "NumNodes": "2-2",
                                                       "TresPerJob": "", "TresPerNode": "gres/gpu:4"}
    one_node = {way: _pinned(jobs["1 node", way][0])["NumNodes"] for way in ("scontrol", "pyslurm")}
    assert one_node == {"scontrol": "2-2", "pyslurm": "1-1"}  # released, it runs on one node with 4 GPUs of its 8

    unpin = {"scontrol": jobs["2 nodes", "scontrol"][1], "pyslurm": jobs["2 nodes", "pyslurm"][1]}
    assert CliBackend().scontrol_lines([unpin_argv(unpin["scontrol"], None, start_now=True)]) == [None]
    assert modify({"required_nodes": "", "gpus": ""}, [unpin["pyslurm"]]) == {}
    assert {way: _pinned(job)["ReqNodeList"] for way, job in unpin.items()} == {"scontrol": "(null)",
                                                                               "pyslurm": "node[01-02]"}
