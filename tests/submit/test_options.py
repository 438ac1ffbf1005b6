"""sbatch's option table read from each release's recorded sbatch (tests/data/sbatch/<release>: its --help, --usage,
--version, getopt's list of names, and options.json, the table read from that release's real sbatch, which
tests/integration/test_wrapper_live.py checks again on every release)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from compass_slurm.submit import option_reader, options
from compass_slurm.submit.options import BUILTIN, NONE, OPTIONAL, REQUIRED, OptionTable
from compass_slurm.submit.sbatch_args import GpuRequest, Option, OptionError, gpu_request, parse_command_line

DATA = Path(__file__).resolve().parents[1] / "data" / "sbatch"
RELEASES = ("22.05", "23.11", "24.11", "25.11", "26.05")


def text(release: str, name: str) -> str:
    return (DATA / release / name).read_text()


def table(release: str) -> OptionTable:
    doc = json.loads(text(release, "options.json"))
    return OptionTable(doc["long"], doc["short"], version=doc["version"])


@pytest.mark.parametrize(("release", "name", "form"), [
    ("22.05", "wrap", OPTIONAL),            # what the text says; sbatch needs the value
    ("22.05", "container", NONE),           # bare, takes a value
    ("22.05", "export", OPTIONAL),          # --export[=names]; a value is required
    ("22.05", "propagate", OPTIONAL),       # [=rlimits] in --help, bare in --usage
    ("22.05", "exclusive", OPTIONAL),
    ("22.05", "gpus", REQUIRED),
    ("22.05", "hold", NONE),
    ("22.05", "tres-per-task", None),
    ("23.11", "tres-per-task", REQUIRED),
    ("23.11", "container-id", NONE),        # bare up to 25.11, takes a value
    ("23.11", "export-file", None),         # gone in 23.11, back in 24.11
    ("24.11", "oom-kill-step", OPTIONAL),
    ("24.11", "resv-ports", NONE),          # bare; its value is optional
    ("24.11", "segment", None),             # never in the text
    ("25.11", "requeue", OPTIONAL),         # --requeue[=expedited]
    ("25.11", "spread-segments", NONE),
    ("26.05", "container-id", REQUIRED),
    ("26.05", "container-type", REQUIRED),
])
def test_forms_the_help_shows(release: str, name: str, form: str | None) -> None:
    forms, _ = option_reader.parse_help(text(release, "help.txt"), text(release, "usage.txt"))
    assert forms.get(name) == form


@pytest.mark.parametrize("release", RELEASES)
def test_short_letters_the_help_shows(release: str) -> None:
    _, short = option_reader.parse_help(text(release, "help.txt"), text(release, "usage.txt"))
    assert short == BUILTIN.short  # the same 34 letters in every release ("-B  --extra-node-info" in 22.05 too)


@pytest.mark.parametrize("release", RELEASES)
def test_getopt_lists_every_name(release: str) -> None:
    names = option_reader.parse_names(text(release, "names.txt"))
    assert names is not None and sorted(names) == sorted(table(release).long)
    assert option_reader.parse_names("sbatch: unrecognized option '--='\n") is None


@pytest.mark.parametrize(("release", "name", "arity"), [
    ("22.05", "wrap", REQUIRED), ("22.05", "get-user-env", OPTIONAL), ("22.05", "requeue", NONE),
    ("22.05", "power", REQUIRED), ("22.05", "tres-per-task", None), ("22.05", "segment", None),
    ("23.11", "tres-per-task", REQUIRED), ("23.11", "tres-bind", REQUIRED), ("23.11", "extra", REQUIRED),
    ("23.11", "container-id", REQUIRED), ("23.11", "export-file", None),
    ("24.11", "export-file", REQUIRED), ("24.11", "power", None), ("24.11", "segment", REQUIRED),
    ("24.11", "resv-ports", OPTIONAL), ("24.11", "oom-kill-step", OPTIONAL), ("24.11", "stepmgr", NONE),
    ("25.11", "requeue", OPTIONAL), ("25.11", "get-user-env", NONE), ("25.11", "spread-segments", NONE),
    ("25.11", "consolidate-segments", NONE), ("25.11", "external", NONE), ("25.11", "resources", REQUIRED),
    ("26.05", "container-type", REQUIRED), ("26.05", "mem-update", REQUIRED), ("26.05", "wrap", REQUIRED),
])
def test_each_release_has_its_own_options(release: str, name: str, arity: str | None) -> None:
    """options.json, as read from each release's sbatch, and as Slurm's own option table (slurm_opt.c) has them."""
    assert table(release).long.get(name) == arity


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    sbatch = tmp_path / "sbatch"
    sbatch.write_text(f"#!{sys.executable}\n{(Path(__file__).with_name('recorded_sbatch.py')).read_text()}")
    sbatch.chmod(0o755)
    monkeypatch.setenv("FAKE_SBATCH_LOG", str(tmp_path / "sbatch.log"))
    return sbatch


@pytest.mark.parametrize("release", RELEASES)
def test_the_table_read_from_each_release(recorded: Path, monkeypatch: pytest.MonkeyPatch, release: str) -> None:
    monkeypatch.setenv("FAKE_SBATCH_DATA", str(DATA / release))
    read = option_reader.read_table(str(recorded))
    assert read is not None
    assert (dict(read.long), dict(read.short), read.version) == (table(release).long, table(release).short,
                                                                 text(release, "version.txt").strip())
    asked = [json.loads(line)["argv"] for line in (recorded.parent / "sbatch.log").read_text().splitlines()]
    probed = {argv[0] for argv in asked if len(argv) == 3}
    # only what the built-in table lacks, or the text shows otherwise, is probed
    assert probed == {f"--{name}" for name in table(release).long if name not in BUILTIN.long} | {
        "22.05": {"--wrap", "--container", "--export", "--get-user-env", "--no-kill"},
        "23.11": {"--wrap", "--container", "--export", "--get-user-env", "--no-kill"},
        "24.11": {"--wrap", "--container", "--export", "--get-user-env", "--no-kill"},
        "25.11": {"--wrap", "--container", "--export", "--get-user-env", "--no-kill", "--requeue"},
        "26.05": {"--wrap", "--export", "--get-user-env", "--no-kill", "--requeue"},
    }[release]


def test_a_getopt_that_lists_no_names(recorded: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without getopt's list: the built-in names and those the text shows (24.11: not --segment, never shown)."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("help.txt", "usage.txt", "version.txt", "options.json"):
        (data / name).write_text(text("24.11", name))
    (data / "names.txt").write_text("sbatch: unrecognized option '--='\n")
    monkeypatch.setenv("FAKE_SBATCH_DATA", str(data))
    read = option_reader.read_table(str(recorded))
    assert read is not None
    assert read.long["tres-per-task"] == REQUIRED and read.long["resv-ports"] == OPTIONAL
    assert "segment" not in read.long
    assert read.long["power"] == REQUIRED  # its --help still shows --power, which its getopt refuses


def test_an_sbatch_that_answers_nothing(recorded: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FAKE_SBATCH_DATA", str(tmp_path / "missing"))
    assert option_reader.read_table(str(recorded)) is None
    assert option_reader.read_table(str(tmp_path / "no-such-sbatch")) is None


@pytest.mark.parametrize(("release", "args", "parsed"), [
    ("22.05", ["--spread", "x.sh"], Option("spread-job")),
    ("25.11", ["--spread-s", "x.sh"], Option("spread-segments")),
    ("23.11", ["--exp=ALL", "x.sh"], Option("export", "ALL")),          # 22.05: --export or --export-file
    ("23.11", ["--tres-per=gres/gpu:1", "x.sh"], Option("tres-per-task", "gres/gpu:1")),
    ("24.11", ["--seg", "4", "x.sh"], Option("segment", "4")),
    ("24.11", ["--resv-ports", "x.sh"], Option("resv-ports")),           # an optional value only attaches
    ("25.11", ["--requeue=expedited", "x.sh"], Option("requeue", "expedited")),
    ("26.05", ["--container-id", "c1", "x.sh"], Option("container-id", "c1")),
])
def test_abbreviations_and_values_over_each_table(release: str, args: list[str], parsed: Option) -> None:
    command = parse_command_line(args, table(release))
    assert command.options == (parsed,) and command.script == "x.sh"


@pytest.mark.parametrize(("release", "args", "message"), [
    ("25.11", ["--spread", "x.sh"], "--spread is ambiguous (--spread-job, --spread-segments)"),
    ("22.05", ["--exp=ALL", "x.sh"], "--exp is ambiguous (--export, --export-file)"),
    ("22.05", ["--seg", "4", "x.sh"], "--seg is unknown to this wrapper"),
    ("24.11", ["--pow=x", "x.sh"], "--pow is unknown to this wrapper"),   # --power: gone in 24.11
    ("22.05", ["--requeue=expedited", "x.sh"], "--requeue takes no value"),
])
def test_what_a_release_refuses(release: str, args: list[str], message: str) -> None:
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_command_line(args, table(release))


@pytest.mark.parametrize(("args", "expected"), [
    (["--tres-per-task=gres/gpu:1", "-n", "4"], GpuRequest(gpus_per_task=1, ntasks=4)),
    (["--tres-per-task=cpu=4,gres/gpu:a100=2"], GpuRequest(gpus_per_task=2, gpu_type="a100")),
    (["--tres-per-task=cpu=4"], GpuRequest()),
    (["--tres-per-task=gres/gpu:1", "--gpus-per-task=3"], GpuRequest(gpus_per_task=3)),
])
def test_gpus_per_task_in_23_11s_words(args: list[str], expected: GpuRequest) -> None:
    assert gpu_request(parse_command_line([*args, "x.sh"], table("23.11")).options) == expected


def test_the_cache_keeps_one_entry_per_binary_while_it_is_the_same(tmp_path: Path) -> None:
    cache = str(tmp_path / "compass" / options.CACHE_NAME)
    key = {"size": 10, "mtime_ns": 5}
    options.save(cache, "/a/sbatch", key, table("24.11"))
    options.save(cache, "/b/sbatch", key, table("26.05"))
    assert options.cached(cache, "/a/sbatch", key).long == table("24.11").long
    assert options.cached(cache, "/b/sbatch", key).version == "slurm-wlm 26.05.5"
    assert options.cached(cache, "/a/sbatch", {**key, "mtime_ns": 6}) is None
    doc = json.loads(Path(cache).read_text())
    doc["binaries"]["/a/sbatch"]["read_at"] = time.time() - options.MAX_AGE - 1  # read a day ago: again
    Path(cache).write_text(json.dumps(doc))
    assert options.cached(cache, "/a/sbatch", key) is None
    Path(cache).write_text("{not json")
    assert options.cached(cache, "/b/sbatch", key) is None
    options.save(cache, "/b/sbatch", key, table("26.05"))  # a broken cache is written anew
    assert options.cached(cache, "/b/sbatch", key) is not None


def test_cache_place(tmp_path: Path) -> None:
    assert options.cache_file({"XDG_CACHE_HOME": "/x"}) == "/x/compass/sbatch-options.json"
    assert options.cache_file({"HOME": "/home/u"}) == "/home/u/.cache/compass/sbatch-options.json"


def test_resolve_finds_what_exec_runs(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    real = tmp_path / "b" / "sbatch"
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    (tmp_path / "a" / "sbatch").write_text("not executable")
    (tmp_path / "link").symlink_to(real)
    path = f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'}"
    assert options.resolve("sbatch", path) == str(real)
    assert options.resolve(str(tmp_path / "link"), path) == str(real)
    assert options.resolve("nope", path) is None
