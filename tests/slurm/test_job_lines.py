"""Jobs read by line before 24.11 (``scontrol show job --details --oneliner``, parse_text.job_lines), on output
recorded from the dev cluster (tests/data/slurm/record.py): the same jobs as ``squeue --json``, each line parsed once,
and ``squeue --json`` whenever a line cannot be trusted."""

from __future__ import annotations

import logging
import random
import re

import pytest

from compass_slurm.slurm import parse_json, parse_text
from compass_slurm.slurm.cli_backend import JOBS_JSON, JOBS_TEXT, CliBackend
from compass_slurm.slurm.errors import SlurmParseError

TEXT = " ".join(JOBS_TEXT)


def json_jobs(slurm) -> list:
    return parse_json.jobs(parse_json.load(slurm.text(slurm.answers["squeue --json"]), "squeue --json"))


def asked(slurm) -> list[list[str]]:
    """The commands a backend ran, but for the version (asked once, when first needed)."""
    return [argv for argv in slurm.calls if argv != ["scontrol", "--version"]]


def later(text: str) -> str:
    """The same jobs a few minutes on: every run time and every last look of the scheduler moved."""
    text = re.sub(r"RunTime=\S+", "RunTime=00:07:31", text)
    return re.sub(r"LastSchedEval=\S+", "LastSchedEval=2030-01-01T00:00:00", text)


def test_the_lines_read_as_squeue_json_does_field_by_field(by_line):
    jobs, kept = parse_text.job_lines(by_line.text("jobs.txt"), {})
    assert jobs == json_jobs(by_line)
    assert len(kept) == len(jobs)


def test_before_24_11_the_backend_reads_jobs_by_line_and_from_24_11_narrow(mixed):
    backend = CliBackend(runner=mixed, narrow=None, lines=None)
    assert backend.uses_lines == (mixed.release < "24.11") and backend.uses_narrow == (mixed.release >= "24.11")
    if mixed.release < "24.11":
        jobs = backend.read_jobs()
        assert mixed.calls == [["scontrol", "--version"], JOBS_TEXT]
        assert backend.read_commands()["jobs"] == JOBS_TEXT
        assert jobs == CliBackend(runner=mixed).read_jobs()  # the JSON read's


def test_a_whole_read_asks_the_same_commands_but_jobs(mixed_by_line):
    backend = CliBackend(runner=mixed_by_line, lines=True)
    backend.read_state()
    sinfo = ["sinfo", "--json"] if mixed_by_line.release == "22.05" else ["sinfo", "--Node", "--json"]
    assert mixed_by_line.calls == [["scontrol", "--version"], JOBS_TEXT, sinfo,
                                   ["scontrol", "show", "partition", "--oneliner"],
                                   ["scontrol", "show", "reservation", "--oneliner"], ["scontrol", "show", "topology"]]


def test_lines_unchanged_but_for_run_times_are_not_parsed_again(by_line):
    first, kept = parse_text.job_lines(by_line.text("jobs.txt"), {})
    again, kept_again = parse_text.job_lines(later(by_line.text("jobs.txt")), kept)
    assert all(a is b for a, b in zip(again, first, strict=True))  # the very objects: nothing parsed
    assert kept_again == kept


def test_a_changed_line_alone_is_parsed_and_gone_lines_are_forgotten(mixed_by_line):
    text = mixed_by_line.text("jobs.txt")
    first, kept = parse_text.job_lines(text, {})
    lines = text.splitlines()
    changed = [re.sub(r" Priority=\d+", " Priority=7", lines[0], count=1), *lines[2:]]  # job 2 ended
    jobs, now = parse_text.job_lines("\n".join(changed) + "\n", kept)
    assert jobs[0].id == first[0].id and jobs[0].priority == 7 and jobs[0] is not first[0]
    assert all(a is b for a, b in zip(jobs[1:], first[2:], strict=True))
    assert len(now) == len(jobs) and first[1] not in [line.job for line in now.values()]


def test_a_priority_recalculation_changes_the_priorities_and_parses_no_line(by_line, monkeypatch):
    text = by_line.text("jobs.txt")
    first, kept = parse_text.job_lines(text, {})
    recalculated = re.sub(r" Priority=(\d+)", lambda m: f" Priority={int(m.group(1)) + 7}", text)
    whole, _ = parse_text.job_lines(recalculated, {})
    monkeypatch.setattr(parse_text, "_job", lambda r: pytest.fail(f"parsed {r.what}"))
    jobs, now = parse_text.job_lines(recalculated, kept)
    assert jobs == whole and [job.priority for job in jobs] == [job.priority + 7 for job in first]
    assert len(now) == len(jobs)


def test_a_line_changed_beyond_its_priority_is_parsed_whole(mixed_by_line):
    text = mixed_by_line.text("jobs.txt")
    first, kept = parse_text.job_lines(text, {})
    changed = re.sub(r" Priority=\d+ (.*) TimeLimit=\S+", r" Priority=3 \1 TimeLimit=00:05:00", text.splitlines()[0])
    jobs, _ = parse_text.job_lines(changed, kept)
    assert (jobs[0].priority, jobs[0].time_limit_s) == (3, 300)


@pytest.mark.parametrize(("pattern", "replacement", "parsed"), [
    (r" RunTime=\S+", " RunTime=1-00:00:04", False),  # a run time grown longer
    (r" LastSchedEval=\S+", " LastSchedEval=Unknown", False),
    (r" JobState=\S+", " JobState=COMPLETING", True),  # before the run time
    (r" TimeLimit=\S+", " TimeLimit=00:05:00", True),  # between the two volatile fields
    (r" Scheduler=Backfill", " Scheduler=Main", True),  # right after the last look
    (r"$", " ", True),  # at the end
], ids=["run-time", "last-look", "state", "time-limit", "scheduler", "end"])
def test_a_line_is_compared_whole_but_for_its_volatile_values(mixed_by_line, pattern, replacement, parsed):
    text = mixed_by_line.text("jobs.txt")
    first, kept = parse_text.job_lines(text, {})
    lines = text.splitlines()
    at = next(at for at, line in enumerate(lines) if re.search(pattern, line))
    lines[at] = re.sub(pattern, lambda _: replacement, lines[at], count=1)
    assert lines[at] != text.splitlines()[at]
    jobs, _ = parse_text.job_lines("\n".join(lines) + "\n", kept)
    assert (jobs[at] is not first[at]) == parsed and jobs == parse_text.job_lines("\n".join(lines) + "\n", {})[0]
    assert all(a is b for a, b in zip(jobs[:at] + jobs[at + 1:], first[:at] + first[at + 1:], strict=True))


@pytest.mark.parametrize("seed", range(5))
def test_lines_in_any_order_stand_for_their_jobs(mixed_by_line, seed):
    """scontrol prints its jobs in the same order each time, which the read expects but must not rely on: lines
    shuffled, some gone, a changed one and one twice read as a fresh parse does, or are not trusted."""
    text = mixed_by_line.text("jobs.txt")
    first, kept = parse_text.job_lines(text, {})
    lines = later(text).splitlines()
    rng = random.Random(seed)
    rng.shuffle(lines)
    lines = lines[:max(1, len(lines) - rng.randrange(3))]
    jobs, now = parse_text.job_lines("\n".join(lines) + "\n", kept)
    assert jobs == parse_text.job_lines("\n".join(lines) + "\n", {})[0]
    assert all(any(job is f for f in first) for job in jobs)  # nothing parsed again
    assert list(now) == [line[:line.find(" ")] for line in lines]
    twice = parse_text.job_lines("\n".join([*lines, lines[0]]) + "\n", kept)
    assert isinstance(twice, str) and "a job id on two lines" in twice


class Counted(dict):
    """The kept lines, counting the look-ups by job id."""

    looked_up = 0

    def get(self, *args):
        self.looked_up += 1
        return super().get(*args)


def test_after_a_gap_the_lines_are_expected_in_order_again(mixed_by_line):
    """A job that ended costs one look-up by id, not one for every line after it."""
    text = mixed_by_line.text("jobs.txt")
    first, kept = parse_text.job_lines(text, {})
    lines = later(text).splitlines()
    kept = Counted(kept)
    jobs, _ = parse_text.job_lines("\n".join(lines[1:]) + "\n", kept)
    assert jobs == first[1:] and kept.looked_up == 1


def test_blank_lines_among_kept_ones_are_passed_over(mixed_by_line):
    text = mixed_by_line.text("jobs.txt")
    first, kept = parse_text.job_lines(text, {})
    lines = later(text).splitlines()
    jobs, now = parse_text.job_lines("\n\n" + "\n\n".join(lines) + "\n\n\n", kept)
    assert all(a is b for a, b in zip(jobs, first, strict=True)) and now == kept


def test_a_job_id_on_two_lines_of_other_arrays_is_not_trusted(mixed_by_line):
    line = mixed_by_line.text("jobs.txt").splitlines()[0]
    twin = line.replace(" JobName=", " ArrayJobId=7 ArrayTaskId=1 JobName=", 1)
    read = parse_text.job_lines(f"{line}\n{twin}\n", {})
    assert isinstance(read, str) and "a job id on two lines" in read


def test_an_empty_queue_reads_no_jobs():
    assert parse_text.job_lines("No jobs in the system\n", {}) == ([], {})
    assert parse_text.job_lines("", {}) == ([], {})


def _with_comment(text: str, comment: str) -> str:
    """The first line whose job has a comment, with ``comment`` in its place."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if " Comment=" in line)
    lines[at] = re.sub(r" Comment=\S+", lambda _: f" Comment={comment}", lines[at])
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("comment", ["compass lr=0.1 bs=32", "compass x=y StdErr-like=1", "compass a|b=c, d=e"])
def test_words_like_fields_in_a_comment_are_the_comment(mixed_by_line, comment):
    jobs, _ = parse_text.job_lines(_with_comment(mixed_by_line.text("jobs.txt"), comment), {})
    assert comment in [job.comment for job in jobs]


@pytest.mark.parametrize(("how", "why"), [
    (lambda line: line.replace(" Comment=", " Comment=compass TresPerNode=gres:gpu:8 "), "out of scontrol's order"),
    (lambda line: line.replace(" JobName=wrap", " JobName=x JobState=RUNNING"), "out of scontrol's order"),
    (lambda line: line.replace(" JobName=wrap", " JobName=x ArrayJobId=3 ArrayTaskId=1"), "out of scontrol's order"),
    (lambda line: line.replace(" Comment=compass", " Comment=compass Nodes=node01 CPU_IDs=0 Mem=1 GRES=gpu:8(IDX:0-7)"),
     "out of scontrol's order"),
    (lambda line: line.replace(" Power=", " Power= NewField=1"), "'NewField' is not one scontrol prints"),
    (lambda line: line.replace(" Comment=compass", " Comment=compass\nmore"), "(a comment with a line break)"),
    (lambda line: line.replace(" Comment=compass", " Comment=compass\n" + line.split(" Comment=")[0]),
     "no Power (a comment with a line break)"),
    (lambda line: line + "\n" + line, "a job id on two lines"),
], ids=["forged-gres", "forged-state", "forged-array", "forged-details", "unknown-field", "broken-comment",
        "forged-line", "twice"])
def test_a_line_that_may_not_be_one_job_s_is_not_trusted(mixed_by_line, how, why):
    text = mixed_by_line.text("jobs.txt")
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if " Comment=compass " in line)
    lines[at] = how(lines[at])
    read = parse_text.job_lines("\n".join(lines) + "\n", {})
    assert isinstance(read, str) and why in read


def test_an_untrusted_line_takes_squeue_json_that_cycle_only(mixed_by_line, caplog):
    text = mixed_by_line.text("jobs.txt")
    forged = text.replace(" Comment=compass ", " Comment=compass NodeList=node01 ", 1)
    backend = CliBackend(runner=mixed_by_line, lines=True)
    mixed_by_line.override[TEXT] = (0, forged, "")
    with caplog.at_level(logging.INFO, logger="compass.slurm"):
        jobs = backend.read_jobs()
        assert backend.read_jobs() == jobs  # the same line: said once
    assert asked(mixed_by_line) == [JOBS_TEXT, JOBS_JSON, JOBS_TEXT, JOBS_JSON]
    assert jobs == json_jobs(mixed_by_line)
    assert [r.getMessage() for r in caplog.records] == [
        "reading all of squeue --json while this stands: scontrol show job line 9 (JobId=9): field 'NodeList' out of "
        "scontrol's order (a name or comment that reads like fields)"]
    assert backend.uses_lines and backend.lines_reason is None
    del mixed_by_line.override[TEXT]
    mixed_by_line.calls.clear()
    assert backend.read_jobs() == jobs
    assert mixed_by_line.calls == [JOBS_TEXT]


def test_a_trusted_line_it_cannot_read_switches_to_squeue_json_for_good(mixed_by_line, caplog):
    broken = re.sub(r" Priority=\d+", " Priority=high", mixed_by_line.text("jobs.txt"), count=1)
    mixed_by_line.override[TEXT] = (0, broken, "")
    backend = CliBackend(runner=mixed_by_line, lines=True)
    with caplog.at_level(logging.WARNING, logger="compass.slurm"):
        jobs = backend.read_jobs()
        backend.read_jobs()
    assert jobs == json_jobs(mixed_by_line)
    assert not backend.uses_lines and "field 'Priority' is not a number: 'high'" in backend.lines_reason
    assert [r.getMessage() for r in caplog.records] == [
        f"cannot read jobs by line ({backend.lines_reason}); reading them with squeue --json from now on"]
    assert asked(mixed_by_line) == [JOBS_TEXT, JOBS_JSON, JOBS_JSON]
    assert backend.read_commands()["jobs"] == JOBS_JSON


def test_a_line_that_does_not_start_with_its_job_id_is_a_clear_error():
    with pytest.raises(SlurmParseError, match="line 1 does not start with JobId="):
        parse_text.jobs(" JobId=1 JobName=x")
