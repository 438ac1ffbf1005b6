"""sbatch's command line and #SBATCH directives, parsed as sbatch 22.05 parses them (the built-in table; the tables
of later releases: test_options.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from compass_slurm.submit.sbatch_args import (
    GpuRequest, Option, OptionError, SbatchArgsError, begin_time, environment_options, gpu_request, last,
    parse_command_line,
    parse_directives,
)


def request_of(args: list[str], script: bytes = b"", environ: dict[str, str] | None = None) -> GpuRequest:
    command = parse_command_line(args)
    directives, _ = parse_directives(script)
    return gpu_request([*directives, *environment_options(environ or {}), *command.options])


@pytest.mark.parametrize(("args", "expected"), [
    (["--gpus=4", "train.sh"], GpuRequest(gpus=4)),
    (["-G", "2", "job.sh"], GpuRequest(gpus=2)),
    (["-G8", "job.sh"], GpuRequest(gpus=8)),
    (["--gpus", "a100:2", "job.sh"], GpuRequest(gpus=2, gpu_type="a100")),
    (["--gpus=a100:2,v100:1", "job.sh"], GpuRequest(gpus=3)),
    (["-N", "2", "--gpus-per-node=8", "--ntasks-per-node=8", "ddp.sh"], GpuRequest(gpus_per_node=8, nodes="2")),
    (["--nodes=2-4", "--gpus-per-node=h100:4", "x.sh"], GpuRequest(gpus_per_node=4, gpu_type="h100", nodes="2-4")),
    (["-n", "4", "--gpus-per-task=1", "mpi.sh"], GpuRequest(gpus_per_task=1, ntasks=4)),
    (["--ntasks=16", "--gpus-per-task=v100:2", "x.sh"], GpuRequest(gpus_per_task=2, gpu_type="v100", ntasks=16)),
    (["--gres=gpu:2", "job.sh"], GpuRequest(gres_gpus=2)),
    (["--gres=gpu:a100:4", "job.sh"], GpuRequest(gres_gpus=4, gpu_type="a100")),
    (["--gres=gpu", "job.sh"], GpuRequest(gres_gpus=1)),
    (["--gres=gpu:tesla", "job.sh"], GpuRequest(gres_gpus=1, gpu_type="tesla")),
    (["--gres=nvme:1,gpu:3", "job.sh"], GpuRequest(gres_gpus=3)),
    (["--gres=nvme:1", "job.sh"], GpuRequest()),
    (["--gres=none", "job.sh"], GpuRequest()),
    (["--gpus=0", "job.sh"], GpuRequest(gpus=0)),
    (["-p", "cpu", "-c", "8", "--mem=16G", "-t", "1:00:00", "job.sh"], GpuRequest()),
    # long options abbreviated to a unique prefix, as getopt_long allows
    (["--gpus-per-n=2", "--ntasks=3", "--comm=x", "job.sh"], GpuRequest(gpus_per_node=2, ntasks=3)),
    # short options clustered, the last one taking the rest as its value
    (["-HvN2", "-G1", "job.sh"], GpuRequest(gpus=1, nodes="2")),
    # the last occurrence wins
    (["--gpus=1", "--gpus=4", "job.sh"], GpuRequest(gpus=4)),
    # after the script, everything is the script's: not sbatch's
    (["job.sh", "--gpus=8"], GpuRequest()),
    (["--", "job.sh", "-G", "2"], GpuRequest()),
    (["--wrap", "python train.py --gpus=8"], GpuRequest()),
    (["--wrap=nvidia-smi", "--gres=gpu:1"], GpuRequest(gres_gpus=1)),
])
def test_gpu_request_from_command_line(args: list[str], expected: GpuRequest) -> None:
    assert request_of(args) == expected


def test_wants_gpus() -> None:
    assert GpuRequest(gpus=1).wants_gpus
    assert GpuRequest(gres_gpus=2).wants_gpus
    assert not GpuRequest(gpus=0, nodes="4").wants_gpus
    assert not GpuRequest().wants_gpus


SCRIPT = b"""#!/bin/bash
#SBATCH --job-name=train   # a trailing comment
#SBATCH -N 2
#SBATCH --gpus-per-node=a100:4
# a plain comment

#SBATCH --comment="nightly run"
module load cuda
#SBATCH --gpus-per-node=8
srun python train.py
"""


def test_directives_until_the_first_command() -> None:
    options, heterogeneous = parse_directives(SCRIPT)
    assert options == [Option("job-name", "train"), Option("nodes", "2"), Option("gpus-per-node", "a100:4"),
                       Option("comment", "nightly run")]
    assert not heterogeneous
    assert request_of(["job.sh"], SCRIPT) == GpuRequest(gpus_per_node=4, gpu_type="a100", nodes="2")


def test_command_line_beats_environment_beats_directives() -> None:
    script = b"#!/bin/sh\n#SBATCH --gpus=1\n#SBATCH --gres=gpu:1\n"
    assert request_of([], script) == GpuRequest(gpus=1, gres_gpus=1)
    environ = {"SBATCH_GPUS": "2", "SBATCH_GRES": "gpu:v100:3", "SBATCH_COMMENT": "ignored by sbatch"}
    assert request_of([], script, environ) == GpuRequest(gpus=2, gres_gpus=3, gpu_type="v100")
    assert request_of(["-G", "5"], script, environ) == GpuRequest(gpus=5, gres_gpus=3, gpu_type="v100")


def test_heterogeneous_jobs_are_recognised() -> None:
    assert parse_directives(b"#!/bin/sh\n#SBATCH -G 1\n#SBATCH hetjob\n#SBATCH -G 2\n")[1]
    assert parse_command_line(["-G", "1", ":", "-G", "2", "job.sh"]).heterogeneous
    assert not parse_command_line(["-G", "1", "job.sh"]).heterogeneous


def test_command_line_split() -> None:
    command = parse_command_line(["--migratable", "-J", "x", "--exclusive", "-k", "--", "run.sh", "--migratable"])
    assert command.migratable
    assert command.option_argv == ("-J", "x", "--exclusive", "-k")
    assert command.operands == ("run.sh", "--migratable")
    assert command.script == "run.sh"
    assert command.options == (Option("job-name", "x"), Option("exclusive"), Option("no-kill"))
    # options the wrapper adds go before the "--" and the script
    assert command.argv(["--begin=now+60"]) == ["-J", "x", "--exclusive", "-k", "--begin=now+60", "--",
                                                "run.sh", "--migratable"]


def test_optional_values_only_attach() -> None:
    command = parse_command_line(["--exclusive=user", "--nice", "job.sh"])
    assert command.options == (Option("exclusive", "user"), Option("nice"))
    assert command.script == "job.sh"


def test_last_value() -> None:
    options = [Option("comment", "a"), Option("hold"), Option("comment", "b")]
    assert last(options, "comment") == "b"
    assert last(options, "hold") == ""
    assert last(options, "begin") is None


@pytest.mark.parametrize(("args", "message"), [
    (["--frobnicate", "job.sh"], "option --frobnicate is unknown to this wrapper"),
    (["--gpu=2", "job.sh"], "ambiguous"),
    (["-G"], "-G needs a value"),
    (["--gpus"], "--gpus needs a value"),
    (["--hold=yes", "job.sh"], "--hold takes no value"),
    (["-Z", "job.sh"], "option -Z is unknown to this wrapper"),
])
def test_bad_command_lines(args: list[str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_command_line(args)


@pytest.mark.parametrize(("args", "message"), [
    (["--gpus=lots"], "not \\[type:\\]count"),
    (["--gres=gpu:a100:two"], "cannot read .gpu:a100:two."),
    (["--gres=gpu:a:b:1"], "cannot read"),
    (["-n", "four"], "not a number"),
])
def test_bad_gpu_values(args: list[str], message: str) -> None:
    with pytest.raises(SbatchArgsError, match=message):
        request_of([*args, "job.sh"])


def test_bad_directive_names_its_line() -> None:
    with pytest.raises(OptionError, match="script line 3: option --bogus is unknown to this wrapper"):
        parse_directives(b"#!/bin/sh\n#SBATCH -G 1\n#SBATCH --bogus\n")
    with pytest.raises(SbatchArgsError, match="script line 2: No closing quotation"):
        parse_directives(b"#!/bin/sh\n#SBATCH --comment='open\n")


NOW = datetime(2026, 12, 1, 14, 30, 0)


@pytest.mark.parametrize(("value", "expected"), [
    ("now", NOW),
    ("now+90", NOW + timedelta(seconds=90)),
    ("now+2hours", NOW + timedelta(hours=2)),
    ("NOW+1day", NOW + timedelta(days=1)),
    ("now+3weeks", NOW + timedelta(weeks=3)),
    ("now-5minutes", NOW - timedelta(minutes=5)),
    ("16:00", datetime(2026, 12, 1, 16, 0)),
    ("09:15:30", datetime(2026, 12, 2, 9, 15, 30)),   # passed today: tomorrow
    ("2026-12-24", datetime(2026, 12, 24)),
    ("2026-12-24T18:00", datetime(2026, 12, 24, 18, 0)),
    ("2026-12-24T18:00:05", datetime(2026, 12, 24, 18, 0, 5)),
    ("midnight", datetime(2026, 12, 2)),
    ("noon", datetime(2026, 12, 2, 12)),
    ("teatime", datetime(2026, 12, 1, 16)),
    ("tomorrow", datetime(2026, 12, 2)),
    ("today", datetime(2026, 12, 1)),
    ("12/24", None), ("1224", None), ("4pm", None), ("25:00", None), ("2026-13-01", None), ("soon", None),
])
def test_begin_times_resolve_as_sbatch_resolves_them(value: str, expected: datetime | None) -> None:
    assert begin_time(value, NOW) == expected
