"""SLUIDs (issue 31): from 26.05 on a pin names its job by the SLUID read, which spares slurmctld scontrol's read of
the job before the update; earlier releases read none and pins name job ids (tests/integration/test_batch_live.py
counts the RPCs on each release)."""

import pytest

from compass_slurm.slurm import parse_json, parse_text
from compass_slurm.slurm.backend import update_argv
from compass_slurm.slurm.cli_backend import CliBackend
from compass_slurm.slurm.errors import SlurmNameError, SlurmParseError
from compass_slurm.slurm.requests import array_tasks

SLUID = "s685M8Y3T4EB00"


@pytest.mark.parametrize("use_json", [True, False])
def test_jobs_carry_their_sluid_from_26_05_on(mixed, use_json):
    jobs = CliBackend(runner=mixed, json=use_json).read_state().jobs
    if mixed.release < "26.05":
        assert {job.sluid for job in jobs} == {""}
        return
    one = [job for job in jobs if not job.array_pending]
    assert one and all(job.sluid.startswith("s") and len(job.sluid) == 14 for job in one)
    assert len({job.sluid for job in one}) == len(one)


def test_the_narrow_read_carries_them_too(narrow_queue):
    jobs = CliBackend(runner=narrow_queue, narrow=None, lines=None).read_jobs()
    assert all(bool(job.sluid) == (narrow_queue.release >= "26.05" and not job.array_pending) for job in jobs)


def test_an_array_s_tasks_not_split_off_have_none(queue):
    """The record of an array's tasks not split off yet has the array's SLUID: a pin of one task by it would pin
    them all. Its tasks are named by their ids."""
    records = [job for job in CliBackend(runner=queue).read_jobs() if job.array_pending]
    assert records
    assert {task.sluid for job in records for task in array_tasks(job)} == {""}


def test_a_pin_names_the_sluid_when_given():
    assert update_argv("7", ["n1"], 2, start_now=True, sluid=SLUID) == [
        "scontrol", "update", f"JobId={SLUID}", "ReqNodeList=n1", "NumNodes=1", "TresPerJob=",
        "TresPerNode=gres:gpu:2", "StartTime=now"]
    assert update_argv("7", ["n1"], sluid="")[2] == "JobId=7"
    with pytest.raises(SlurmNameError, match="not a valid Slurm SLUID: 's1 Priority=1'"):
        update_argv("7", ["n1"], sluid="s1 Priority=1")


@pytest.mark.parametrize("value", ["s685M8Y3T4EB0", "s685M8Y3T4EB00 x", "S685M8Y3T4EB00", "s685M8Y3T4EBI0", 5])
def test_a_sluid_that_is_none_is_a_parse_error_naming_it(value):
    doc = {"jobs": [{"job_id": 5, "job_state": ["PENDING"], "step_id": {"sluid": value}}]}
    with pytest.raises(SlurmParseError, match="squeue --json job 5: step_id.sluid: not a valid Slurm SLUID"):
        parse_json.jobs(doc, sluids=True)
    assert parse_json.jobs(doc)[0].sluid == ""  # not asked for: not read


def test_the_text_read_checks_it_alike():
    line = f"JobId=5 JobName=x UserId=u(1) JobState=PENDING Partition=gpu NodeList=(null) SLUID={SLUID}0\n"
    with pytest.raises(SlurmParseError, match="field SLUID: not a valid Slurm SLUID"):
        parse_text.jobs(line, sluids=True)
    assert parse_text.jobs(line.replace(f"{SLUID}0", SLUID), sluids=True)[0].sluid == SLUID
