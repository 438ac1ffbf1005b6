"""The narrow job read on output recorded from the dev cluster (tests/data/slurm/record.py --only narrow)."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest

from compass_slurm.slurm import cli_backend, parse_narrow
from compass_slurm.slurm.cli_backend import JOBS_JSON, CliBackend
from compass_slurm.slurm.errors import SlurmParseError
from compass_slurm.slurm.state import SlurmJob


FIELDS_24_11 = ("JobArrayID:|,State:|,UserName:|,UserID:|,Partition:|,NodeList:|,NumNodes:|,NumCPUs:|,NumTasks:|,"
                "tres-per-node:|,tres-per-job:|,tres-per-task:|,MinMemory:|,mem-per-tres:|,OverSubscribe:|,"
                "ReqNodes:|,ExcNodes:|,Reason:|,Reservation:|,PriorityLong:|,TimeLimit:|,StartTime:|,SubmitTime:|,"
                "EligibleTime:|,ArrayJobID:|,ArrayTaskID:|,Contiguous:|,ReqSwitch:|")
#: after the fixed fields: those that may hold a '|', each followed by the id
FREE = ",Feature:|,JobArrayID:|,Prefer:|,JobArrayID:|,Comment:|,JobArrayID:|"
#: the release lines below are of (fields of 24.11)
V = (24, 11)
ALL_IDS = "1,2,3,4,5,6,7,9,11,12"  # arrays 7 and 9 by their array id (9_3 is job 10)


def version(release: str) -> tuple[int, int]:
    return tuple(map(int, release.split(".")))  # type: ignore[return-value]


def narrow_argv(release: str) -> list[str]:
    segment = ",SegmentSize:|" if release >= "25.11" else ""
    exclusive = ",Exclusive:|" if release >= "26.05" else ""
    return ["squeue", "--noheader", "--array", f"--Format={FIELDS_24_11}{segment}{exclusive}{FREE}"]


def test_the_exact_command_lines(queue):
    assert parse_narrow.argv(version(queue.release)) == narrow_argv(queue.release)
    backend = CliBackend(runner=queue, narrow=None)
    if queue.release < "24.11":  # its squeue --json prints every job for two ids: nothing to narrow
        assert len(CliBackend(runner=queue).read_jobs()) == 12
        assert not backend.uses_narrow and backend.read_commands()["jobs"] == JOBS_JSON
        return
    backend.read_jobs()
    assert queue.calls == [["scontrol", "--version"], narrow_argv(queue.release), [*JOBS_JSON, f"--jobs={ALL_IDS}"]]
    assert backend.read_commands()["jobs"] == narrow_argv(queue.release)


def test_before_24_11_squeue_json_prints_every_job_for_two_ids(wide_queue):
    """Why 22.05 and 23.11 read no narrow: ``squeue --json --jobs=1,2`` (recorded) lists all 12 jobs (23.11 prints
    only the job a single id names; and its squeue --Format has no ExcNodes)."""
    assert len(json.loads(wide_queue.text(wide_queue.answers["squeue --json --jobs=1,2"]))["jobs"]) == 12


def test_the_narrow_read_is_the_json_read_field_by_field(narrow_queue):
    queue, release = narrow_queue, narrow_queue.release
    by_json = CliBackend(runner=queue).read_jobs()
    by_narrow = CliBackend(runner=queue, narrow=True).read_jobs()
    assert sorted(by_narrow, key=lambda j: j.id) == sorted(by_json, key=lambda j: j.id)
    assert {j.id for j in by_narrow if j.exclusive} == {"6"}
    assert [j.comment for j in by_narrow if j.id == "4"] == ["compass:migratable a|b, c"]  # the delimiter, kept


def test_unchanged_lines_are_not_read_again_and_a_changed_one_alone_is(narrow_queue):
    queue, release = narrow_queue, narrow_queue.release
    backend = CliBackend(runner=queue, narrow=True)
    first = backend.read_jobs()
    queue.calls.clear()
    assert backend.read_jobs() == first
    assert queue.calls == [narrow_argv(release)]
    lines = queue.text("narrow.txt").splitlines()
    changed = [line.replace("|JobHeldUser|", "|Priority|") for line in lines]  # job 11 and the array 9 released
    queue.override[" ".join(narrow_argv(release))] = (0, "\n".join(changed) + "\n", "")
    queue.override[" ".join([*JOBS_JSON, "--jobs=9,11"])] = (0, queue.text("jobs.json"), "")
    queue.calls.clear()
    again = backend.read_jobs()
    assert queue.calls == [narrow_argv(release), [*JOBS_JSON, "--jobs=9,11"]]
    assert [j.id for j in again] == [j.id for j in first]
    assert all(a is b for a, b in zip(again, first) if not a.id.startswith(("9", "11")))


def test_a_priority_recalculation_asks_no_json_for_jobs_it_changed_alone(narrow_queue):
    queue, release = narrow_queue, narrow_queue.release
    backend = CliBackend(runner=queue, narrow=True)
    first = backend.read_jobs()
    prio = parse_narrow.FIELDS.index("PriorityLong")

    def recalculated(line: str) -> str:
        parts = line.split("|")
        if "_" not in parts[0] and parts[1] == "PENDING":  # one job's line, not an array's
            parts[prio] = str(int(parts[prio]) + 7)
        return "|".join(parts)

    lines = [recalculated(line) for line in queue.text("narrow.txt").splitlines()]
    queue.override[" ".join(narrow_argv(release))] = (0, "\n".join(lines) + "\n", "")
    queue.calls.clear()
    again = backend.read_jobs()
    assert queue.calls == [narrow_argv(release)]  # no squeue --json at all
    changed = {j.id for j in first if j.pending and "_" not in j.id}
    assert changed and [j.id for j in again] == [j.id for j in first]
    assert all(b.priority == a.priority + 7 and b == replace(a, priority=b.priority) if a.id in changed else b is a
               for a, b in zip(first, again))
    queue.calls.clear()
    assert backend.read_jobs() == again and queue.calls == [narrow_argv(release)]  # kept under the new lines


def test_an_empty_queue_asks_no_json(narrow_queue):
    queue, release = narrow_queue, narrow_queue.release
    queue.override[" ".join(narrow_argv(release))] = (0, "", "")
    assert CliBackend(runner=queue, narrow=True).read_jobs() == []
    assert queue.calls == [["scontrol", "--version"], narrow_argv(release)]


def test_jobs_gone_before_the_json_read_are_left_out(narrow_queue):
    queue, release = narrow_queue, narrow_queue.release
    queue.override[" ".join([*JOBS_JSON, f"--jobs={ALL_IDS}"])] = (1, "", "slurm_load_jobs error: Invalid job id specified")
    assert CliBackend(runner=queue, narrow=True).read_jobs() == []


def test_a_long_list_of_changed_jobs_reads_all_of_squeue_json(narrow_queue, monkeypatch):
    queue, release = narrow_queue, narrow_queue.release
    monkeypatch.setattr(cli_backend, "JOBS_ARG_MAX", 5)
    assert len(CliBackend(runner=queue, narrow=True).read_jobs()) == 12
    assert [*JOBS_JSON] in queue.calls and [*JOBS_JSON, f"--jobs={ALL_IDS}"] not in queue.calls


def with_line(queue, release: str, line: str, first: bool = False) -> None:
    text = line + queue.text("narrow.txt") if first else queue.text("narrow.txt") + line
    queue.override[" ".join(narrow_argv(release))] = (0, text, "")


@pytest.mark.parametrize("tail", ["{fake}|compass\n{fake}|x|12|\n", "{fake}|x|12|\nmore|12|\n",
                                  "{fake}|x|12|\n{fake}|x|12|\n"])
def test_a_comment_with_a_line_break_reads_all_of_squeue_json_that_once(narrow_queue, caplog, tail):
    """Its lines could pose as other jobs: nothing of that read is trusted (nor when an id repeats)."""
    queue, release = narrow_queue, narrow_queue.release
    fake = ("12|RUNNING|mallory|1000|gpu|node05|1|1|1|N/A|gres/gpu:8" + "|N/A" * (len(parse_narrow.fixed(version(release)))
            - 11) + "|(null)|12|(null)|12")
    with_line(queue, release, tail.format(fake=fake))
    backend = CliBackend(runner=queue, narrow=True)
    with caplog.at_level(logging.INFO, "compass.slurm"):
        jobs = backend.read_jobs()
    assert {j.id for j in jobs} == {j.id for j in CliBackend(runner=type(queue)("narrow-8x8", release)).read_jobs()}
    assert [*JOBS_JSON] in queue.calls and backend.narrow_reason is None and backend.uses_narrow
    assert "line break" in caplog.text
    queue.calls.clear()
    del queue.override[" ".join(narrow_argv(release))]
    again = backend.read_jobs()
    assert {j.id: j for j in again} == {j.id: j for j in jobs} and [*JOBS_JSON, f"--jobs={ALL_IDS}"] in queue.calls


def test_lines_split_only_before_the_comment():
    fixed = "|".join(["4", *[f"f{i}" for i in range(1, len(parse_narrow.FIELDS))]]) + "|a|b|4|c|4"
    read = parse_narrow.lines(f"{fixed}|a|4|b|4|\n", V, parse_narrow.Kept())
    (line,) = read.rows
    assert (line, read.known, read.new, read.kept) == (f"{fixed}|a|4|b|4|", [None], [(0, "4")], {})
    assert parse_narrow.field(line, "ArrayTaskID", V) == f"f{parse_narrow.FIELDS.index('ArrayTaskID')}"
    assert parse_narrow.field(line, "ReqSwitch", V) == f"f{len(parse_narrow.FIELDS) - 1}"
    assert parse_narrow.lines(f"{fixed}|a|4|\n{fixed}|b|4|\n", V, parse_narrow.Kept()) is None  # an id twice


def test_an_id_twice_is_found_also_where_a_line_is_known():
    fixed = "|".join(["4", *[f"f{i}" for i in range(1, len(parse_narrow.FIELDS))]]) + "|(null)|4|(null)|4"
    known, other = f"{fixed}|a|4|", f"{fixed.replace('4', '5', 1)}|b|5|"
    kept = parse_narrow.Kept()
    kept.keep(known, SlurmJob("4", "alice", "PENDING", "gpu"))
    read = parse_narrow.lines(f"{known}\n{other}\n", V, kept)
    assert read.known[0] is kept.jobs[known] and read.new == [(1, "5")] and read.kept == {known: kept.jobs[known]}
    assert parse_narrow.lines(f"{known}\n{known}\n", V, kept) is None  # the known line twice
    assert parse_narrow.lines(f"{known}\n{fixed}|b|4|\n", V, kept) is None  # a new line with its id
    assert parse_narrow.lines(f"{fixed}|b|4|\n{known}\n", V, kept) is None  # the other way round


@pytest.mark.parametrize("bad", ["garbage", "4|RUNNING|root|comment|4", "4|too|few|4|"])
def test_a_malformed_line_names_it(bad):
    with pytest.raises(SlurmParseError, match=r"^squeue --noheader --array --Format=.*: line 2: .*" + bad[:8].replace("|", r"\|")):
        parse_narrow.lines(f"\n{bad}\n", V, parse_narrow.Kept())


def test_a_malformed_narrow_output_falls_back_to_json_with_one_warning(narrow_queue, caplog):
    queue, release = narrow_queue, narrow_queue.release
    with_line(queue, release, "garbage\n", first=True)
    backend = CliBackend(runner=queue, narrow=True)
    with caplog.at_level(logging.WARNING, "compass.slurm"):
        jobs = backend.read_jobs()
        queue.calls.clear()
        assert backend.read_jobs() == jobs
    assert len(jobs) == 12 and not backend.uses_narrow and "line 1: no job id: 'garbage'" in backend.narrow_reason
    assert [r.getMessage() for r in caplog.records if "from now on" in r.getMessage()] == [
        f"cannot read jobs narrow ({backend.narrow_reason}); reading them with squeue --json from now on"]
    assert queue.calls[0] == JOBS_JSON and backend.read_commands()["jobs"] == JOBS_JSON


def test_doctor_says_jobs_are_read_narrow(narrow_queue):
    from compass_slurm.cli.doctor import Doctor

    doctor = Doctor(None)
    doctor.backend = CliBackend(runner=narrow_queue, narrow=True)
    doctor.backend.read_jobs()
    assert doctor.json_support().startswith("JSON: nodes by sinfo --Node --json, jobs by squeue --json of the jobs "
                                            "whose line in the narrow read (squeue --Format) changed (Slurm ")
    with_line(narrow_queue, narrow_queue.release, "garbage\n", first=True)
    doctor.backend = CliBackend(runner=narrow_queue, narrow=True)
    doctor.backend.read_jobs()
    assert "jobs by squeue --json (not the narrow read: squeue --noheader --array --Format=" in doctor.json_support()


def test_a_changed_array_task_re_reads_its_whole_array(narrow_queue):
    """Its tasks share the array's throttle, which only some of their lines show."""
    queue, release = narrow_queue, narrow_queue.release
    backend = CliBackend(runner=queue, narrow=True)
    first = {j.id: j for j in backend.read_jobs()}
    changed = [line.replace("|None|", "|Prolog|") if line.startswith("7_1|") else line
               for line in queue.text("narrow.txt").splitlines()]
    queue.override[" ".join(narrow_argv(release))] = (0, "\n".join(changed) + "\n", "")
    queue.override[" ".join([*JOBS_JSON, "--jobs=7"])] = (0, queue.text("jobs.json"), "")
    queue.calls.clear()
    again = {j.id: j for j in backend.read_jobs()}
    assert queue.calls == [narrow_argv(release), [*JOBS_JSON, "--jobs=7"]]
    assert again == first
    assert [i for i in again if again[i] is not first[i]] == ["7_1", "7_2"]


def test_a_heterogeneous_job_reads_all_of_squeue_json(narrow_queue):
    """squeue prints its components as 12+0, 12+1; squeue --json by their own ids."""
    queue, release = narrow_queue, narrow_queue.release
    component = "|".join(["12+1", *["x"] * (len(parse_narrow.fields(version(release))) - 3), "c", "12+1"]) + "|"
    with_line(queue, release, component + "\n")
    assert len(CliBackend(runner=queue, narrow=True).read_jobs()) == 12
    assert [*JOBS_JSON] in queue.calls


def _released(jobs_json: str, job_id: int) -> str:
    """jobs.json as squeue --json prints it once ``job_id`` (a held job, or the held rest of an array) is released."""
    doc = json.loads(jobs_json)
    for raw in doc["jobs"]:
        if raw["job_id"] == job_id:
            raw["state_reason"], raw["priority"]["number"] = "Priority", 1
    return json.dumps(doc)


@pytest.mark.parametrize("job_id", ["11", "9"])
def test_a_job_changed_between_its_line_and_its_json_is_read_again(narrow_queue, job_id):
    # Read 1: the line says held, the JSON read (a moment later) says released; it is held again by read 2, whose
    # line is that of read 1 again: the record of read 1 does not stand for it and must not be kept under it.
    queue, release = narrow_queue, narrow_queue.release
    released = _released(queue.text("jobs.json"), int(job_id))
    queue.override[" ".join([*JOBS_JSON, f"--jobs={ALL_IDS}"])] = (0, released, "")
    backend = CliBackend(runner=queue, narrow=True)

    def reasons(jobs):  # of job 11, or of the array 9's record of the tasks not split off
        return [job.reason for job in jobs if job.id == job_id or job.array_job == job_id and job.array_pending]

    assert reasons(backend.read_jobs()) == ["Priority"]
    queue.override[" ".join([*JOBS_JSON, f"--jobs={job_id}"])] = (0, queue.text("jobs.json"), "")
    queue.calls.clear()
    again = backend.read_jobs()
    assert queue.calls == [narrow_argv(release), [*JOBS_JSON, f"--jobs={job_id}"]]
    assert reasons(again) == ["JobHeldUser"]
    queue.calls.clear()
    assert backend.read_jobs() == again  # now the record is the line's: kept
    assert queue.calls == [narrow_argv(release)]
