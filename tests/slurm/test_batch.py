"""Several scontrol command lines through one scontrol reading its standard input (Backend.scontrol_lines).

The output below is what 22.05 and 26.05 print (stdout and stderr in one stream) for such a batch on the dev
cluster; tests/integration/test_batch_live.py runs one on every release.
"""

from __future__ import annotations

import pytest

from compass_slurm.slurm.backend import DryRunBackend, lease_argv, release_argv, requeue_hold_argv, update_argv
from compass_slurm.slurm.cli_backend import CliBackend, attribute
from compass_slurm.slurm.errors import SlurmCommandError
from compass_slurm.slurm.snapshot import SnapshotBackend

LINES = [
    ["scontrol", "update", "JobId=1", "ReqNodeList=node01", "StartTime=now+500"],
    ["scontrol", "update", "JobId=2", "ReqNodeList=node01", "StartTime=now+500"],
    ["scontrol", "update", "JobId=3", "ReqNodeList=nodeZZ", "StartTime=now+500"],
    ["scontrol", "update", "JobId=3", "StartTime=now+400"],
    ["scontrol", "update", "JobId=999999", "StartTime=now+400"],
    ["scontrol", "release", "1,3"],
    ["scontrol", "update", "JobId=1,2", "StartTime=now+300"],
]
#: recorded on the dev cluster (26.05; 22.05 prints the same), job 2 cancelled before
OUTPUT = """\
scontrol: update JobId=1 ReqNodeList=node01 StartTime=now+500
scontrol: update JobId=2 ReqNodeList=node01 StartTime=now+500
Job has already finished for job 2
scontrol: update JobId=3 ReqNodeList=nodeZZ StartTime=now+500
Invalid node name specified for job 3
scontrol: update JobId=3 StartTime=now+400
scontrol: update JobId=999999 StartTime=now+400
Invalid job id specified for job 999999
scontrol: release 1,3
scontrol: update JobId=1,2 StartTime=now+300
Job has already finished for job 2
scontrol: 
"""
EXPECTED = [
    None,
    "scontrol update JobId=2 ReqNodeList=node01 StartTime=now+500: exit 1: Job has already finished for job 2",
    "scontrol update JobId=3 ReqNodeList=nodeZZ StartTime=now+500: exit 1: Invalid node name specified for job 3",
    None,
    "scontrol update JobId=999999 StartTime=now+400: exit 1: Invalid job id specified for job 999999",
    None,
    "scontrol update JobId=1,2 StartTime=now+300: exit 1: Job has already finished for job 2",
]


def test_each_line_gets_what_followed_its_echo():
    assert attribute(LINES, 1, OUTPUT) == EXPECTED


def test_exit_0_is_success_for_every_line():
    ok = "".join(f"scontrol: {' '.join(a[1:])}\n" for a in LINES) + "scontrol: \n"
    assert attribute(LINES, 0, ok) == [None] * len(LINES)


@pytest.mark.parametrize("cut, done", [(0, 0), (OUTPUT.index("scontrol: update JobId=3 R"), 1),
                                       (OUTPUT.index("scontrol: update JobId=1,2"), 5), (OUTPUT.rindex("scontrol:"), 6)])
def test_lines_of_a_batch_cut_short_are_not_known_done(cut, done):
    """Died midway: the line scontrol was on (echoed, not followed by the next echo: on a job list, a complaint
    about one job says nothing of the next) and those after are unknown."""
    results = attribute(LINES, 1, OUTPUT[:cut])
    assert results[:done] == EXPECTED[:done] and results[done:] == [...] * (len(LINES) - done)


class FakeScontrol:
    """scontrol reading stdin as the dev cluster's does: echo, then the job's complaint if it is refused."""

    def __init__(self, refuse: dict[str, str], die_at: int | None = None) -> None:
        self.refuse, self.die_at = refuse, die_at
        self.texts: list[str] = []
        self.alone: list[list[str]] = []

    def batch(self, argv, text, timeout):
        assert argv == ["scontrol"]
        self.texts.append(text)
        out, code = [], 0
        for at, line in enumerate(text.splitlines()):
            out.append(f"scontrol: {line}")
            if at == self.die_at:
                return None, "\n".join(out) + "\n"
            for job in line.split()[1].removeprefix("JobId=").split(","):
                if job in self.refuse:
                    out.append(f"{self.refuse[job]} for job {job}")
                    code = 1
        return code, "\n".join(out) + "\nscontrol: \n"

    def run(self, argv, timeout):
        self.alone.append(argv)
        job = argv[2].removeprefix("JobId=")
        if job in self.refuse:
            return 1, "", f"{self.refuse[job]} for job {job}\n"
        return 0, "", ""


def backend(fake: FakeScontrol) -> CliBackend:
    return CliBackend(runner=fake.run, batch_runner=fake.batch)


def test_one_scontrol_for_the_lines_with_exact_stdin_and_per_line_results():
    fake = FakeScontrol({"8": "Job has already finished"})
    lines = [update_argv("7", ["n1"], 2, start_now=True), update_argv("8", ["n2"], 2, start_now=True),
             lease_argv(["9", "8", "10"], 60), requeue_hold_argv(["11", "12"]), release_argv(["11"])]
    results = backend(fake).scontrol_lines(lines)
    assert fake.texts == ["update JobId=7 ReqNodeList=n1 NumNodes=1 TresPerJob= TresPerNode=gres:gpu:2 StartTime=now\n"
                          "update JobId=8 ReqNodeList=n2 NumNodes=1 TresPerJob= TresPerNode=gres:gpu:2 StartTime=now\n"
                          "update JobId=9,8,10 StartTime=now+60\n"
                          "requeuehold 11,12\n"
                          "release 11\n"]
    assert fake.alone == []
    assert results == [None, f"{' '.join(lines[1])}: exit 1: Job has already finished for job 8",
                       f"{' '.join(lines[2])}: exit 1: Job has already finished for job 8", None, None]


def test_a_batch_killed_midway_runs_only_the_lines_not_known_done_one_by_one():
    fake = FakeScontrol({"9": "Invalid job id specified"}, die_at=2)
    lines = [lease_argv([j], 60) for j in ("7", "8", "9", "10")]
    results = backend(fake).scontrol_lines(lines)
    assert fake.alone == lines[2:]  # line 3 was echoed but not followed: it may not have reached slurmctld
    assert results == [None, None, "scontrol update JobId=9 StartTime=now+60: exit 1: Invalid job id specified for job 9",
                       None]


def test_after_a_line_run_alone_gets_no_answer_the_rest_are_not_sent():
    fake = FakeScontrol({}, die_at=0)

    def unanswered(argv, timeout):
        fake.alone.append(argv)
        raise SlurmCommandError(argv, "no answer within 30 s")

    fake.run = unanswered
    lines = [lease_argv([j], 60) for j in ("7", "8", "9")]
    results = backend(fake).scontrol_lines(lines)
    assert fake.alone == lines[:1]
    assert results[0].endswith("no answer within 30 s")
    assert all("not sent" in r for r in results[1:])


def test_one_line_runs_as_before_without_stdin():
    fake = FakeScontrol({})
    assert backend(fake).scontrol_lines([release_argv("5")]) == [None]
    assert fake.texts == [] and fake.alone == [["scontrol", "release", "5"]]


def test_recording_backends_record_the_same_lines_one_by_one():
    lines = [update_argv("7", ["n1"], 2), lease_argv(["9", "10"], 60)]
    for rec in (SnapshotBackend(None, out=None), DryRunBackend(CliBackend(), out=None)):
        assert rec.scontrol_lines(lines) == [None, None]
        assert rec.commands == lines
