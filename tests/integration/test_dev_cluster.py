"""The Slurm access layer against the real dev cluster (scripts/dev-cluster)."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from compass_slurm.service.daemon import NOT_PENDING
from compass_slurm.slurm.cli_backend import CliBackend
from compass_slurm.slurm.errors import SlurmCommandError

pytestmark = pytest.mark.slurm


def test_read_state_sees_every_node_with_its_gpus(dev_cluster):
    state = CliBackend().read_state()
    assert re.fullmatch(r"\d+\.\d+\.\d+", state.version)
    names = [n.name for n in state.nodes]
    assert names == [f"node{i:02d}" for i in range(1, dev_cluster.nodes + 1)]
    assert all(n.gpus == dev_cluster.gpus_per_node and n.cpus == 32 and n.partitions == ("gpu",) for n in state.nodes)
    assert [p.name for p in state.partitions] == ["gpu"]
    # Both parsers must see the same nodes; read them together, since jobs left by earlier
    # tests may still be completing (a transient flag) between two reads.
    for _ in range(20):
        as_json, as_text = CliBackend().read_state().nodes, CliBackend(json=False).read_state().nodes
        if as_json == as_text:
            break
        time.sleep(0.5)
    assert as_text == as_json


def test_submitted_job_shows_its_per_node_gpus(slurm):
    job = slurm.sbatch("--gpus=2")
    node = slurm.wait(job, "RUNNING")
    assert "GRES=gpu:2(IDX:" in slurm.show(job)
    for use_json in (True, False):
        seen = CliBackend(json=use_json).read_state().job(job)
        assert seen.running and seen.nodes == (node,)
        assert seen.gpus_alloc == {node: 2} and seen.gpus_requested == 2


def test_hold_set_nodes_release_lands_on_the_chosen_node(slurm):
    backend = CliBackend()
    job = slurm.sbatch("--hold", "--gpus=2", "--comment=compass")
    slurm.wait(job, "PENDING")
    assert backend.read_state().job(job).held
    backend.set_nodes(job, ["node05"])
    backend.release(job)
    assert slurm.wait(job, "RUNNING") == "node05"
    seen = backend.read_state().job(job)
    assert seen.gpus_alloc == {"node05": 2} and seen.managed and not seen.migratable


def test_place_splits_a_job_into_the_chosen_per_node_counts(slurm):
    job = slurm.sbatch("--hold", "--gpus=8")
    slurm.wait(job, "PENDING")
    backend = CliBackend()
    backend.set_nodes(job, ["node06", "node07"], gpus_per_node=4)
    backend.release(job)
    assert slurm.wait(job, "RUNNING") == "node[06-07]"
    assert CliBackend().read_state().job(job).gpus_alloc == {"node06": 4, "node07": 4}


def test_requeue_migration_moves_a_running_job(slurm):
    backend = CliBackend()
    job = slurm.sbatch("--gpus=3", "--nodelist=node02", "--comment=compass:migratable")
    assert slurm.wait(job, "RUNNING") == "node02"
    backend.migrate(job, ["node08"])
    assert slurm.wait(job, "RUNNING", timeout=20) == "node08"
    seen = backend.read_state().job(job)
    assert seen.gpus_alloc == {"node08": 3} and seen.migratable
    assert "Restarts=1 " in slurm.show(job)
    assert re.search(r"Nodes=node08 .*GRES=gpu:3\(IDX:", slurm.show(job))


def test_an_unknown_release_exits_2_naming_the_known_ones():
    from devcluster import dev

    done = dev("start", "--slurm", "23.02")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1] == ("dev-cluster: error: unknown Slurm release '23.02': "
                                            "known are 22.05, 23.11, 24.11, 25.11, 26.05")


def test_an_unreachable_archive_is_one_line_and_exit_3(tmp_path, monkeypatch):
    from devcluster import UNREACHABLE, dev

    monkeypatch.setenv("COMPASS_CHROOT_CACHE", str(tmp_path / "cache"))  # nothing built there: 23.11 must be
    monkeypatch.setenv("COMPASS_UBUNTU_MIRROR", "http://127.0.0.1:9/ubuntu")  # the discard port: refused
    said = ("Ubuntu's archive cannot be reached (http://127.0.0.1:9/ubuntu/dists/noble/Release: [Errno 111] "
            "Connection refused); set $COMPASS_UBUNTU_MIRROR to a mirror of it")
    done = dev("start", "--slurm", "23.11", "--nodes", "1")
    assert (done.returncode, done.stdout, done.stderr) == (UNREACHABLE, "", f"dev-cluster: error: {said}\n")
    done = dev("prepare", "23.11")  # the tests' background build: the other releases are built all the same
    assert (done.returncode, done.stdout) == (0, "dev-cluster: ready: Slurm -\n")
    assert done.stderr == f"dev-cluster: warning: {said}: Slurm 23.11 not built\n"
    assert not (tmp_path / "cache" / "noble").exists()


def test_prepare_without_the_pyslurm_source_warns_and_builds_the_rest(tmp_path):
    from devcluster import dev

    missing = tmp_path / "pyslurm.tar.gz"
    done = dev("prepare", "--pyslurm", "--source", str(missing), "22.05", "24.11")  # 24.11's chroot: CI builds it anyway
    assert (done.returncode, done.stdout) == (0, "dev-cluster: ready: Slurm 22.05, 24.11\n")
    assert done.stderr.splitlines()[0] == f"dev-cluster: warning: no pyslurm source at {missing}: pyslurm not built"


def test_slurm_refuses_to_pin_a_job_it_started_in_words_the_daemon_reads_as_started_first(slurm):
    """The daemon's update of a job Slurm started between the daemon's read and its update (the lease ran out), and
    of one that ended meanwhile: Slurm refuses both in words NOT_PENDING knows, so the daemon looks where it ran."""
    backend = CliBackend()
    job = slurm.sbatch("--gpus=1", "--nodelist=node05")
    slurm.wait(job, "RUNNING")

    def refusal() -> str:
        with pytest.raises(SlurmCommandError) as refused:
            backend.set_nodes(job, ["node06"], gpus_per_node=1, start_now=True)
        return str(refused.value)

    refusals = [refusal()]
    subprocess.run(["scancel", job], check=True)
    deadline = time.monotonic() + 30
    while subprocess.run(["squeue", "--noheader", "--states=all", f"--jobs={job}", "--format=%T"],
                         capture_output=True, text=True).stdout.strip() != "CANCELLED":
        assert time.monotonic() < deadline, f"job {job} not CANCELLED 30 s after scancel"
        time.sleep(0.3)
    refusals.append(refusal())
    assert [bool(NOT_PENDING.search(text)) for text in refusals] == [True, True], refusals


def test_ran_on_names_where_running_and_finished_jobs_ran(slurm):
    """What the daemon's restart check and a refusal ("already finished") read: a finished job still listed
    (MinJobAge) and a running one, by their nodes; a pending job and an id Slurm never had, left out."""
    backend = CliBackend()
    done = slurm.sbatch("--nodes=2", "--gpus-per-node=1", "--nodelist=node[03-04]")
    running = slurm.sbatch("--gpus=1", "--nodelist=node05")
    waiting = slurm.sbatch("--begin=now+1hour", "--gpus=1")  # (not --hold: a held job cancelled reads as held)
    for job in (done, running):
        slurm.wait(job, "RUNNING")
    subprocess.run(["scancel", done], check=True)
    deadline = time.monotonic() + 30
    while (state := subprocess.run(["squeue", "--noheader", "--states=all", f"--jobs={done}", "--format=%T"],
                                   capture_output=True, text=True).stdout.strip()) != "CANCELLED":
        assert time.monotonic() < deadline, f"job {done} is {state!r} 30 s after scancel"
        time.sleep(0.3)
    wanted = {done: ("node03", "node04"), running: ("node05",)}
    assert backend.ran_on([done, running, waiting]) == wanted
    assert backend.ran_on([done, running, waiting, "9999999"]) == wanted  # one forgotten id loses none of the others
    assert backend.ran_on(["9999999"]) == {}


def test_a_plain_cluster_has_one_controller(dev_cluster):
    """Without --backup-controller: this machine's name as the one SlurmctldHost, bound to INADDR_ANY, as ever."""
    conf = open(dev_cluster.env["SLURM_CONF"], encoding="utf-8").read()
    assert conf.count("SlurmctldHost=") == 1 and "NoCtldInAddrAny" not in conf and "SlurmctldTimeout=30" in conf
    assert "compass-ctl" not in conf
