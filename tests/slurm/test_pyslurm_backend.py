"""Choosing and refusing the pyslurm backend (pyslurm itself runs in tests/integration/test_pyslurm_live.py:
it cannot be imported here, so a stand-in module plays the installed pyslurm)."""

import logging
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from compass_slurm.slurm import open_backend
from compass_slurm.slurm.cli_backend import CliBackend
from compass_slurm.slurm.errors import SlurmParseError
from compass_slurm.slurm.pyslurm_backend import (JOB_TRES, JOB_TRES_SEGMENT, JobExtra, PyslurmUnavailable, _gpus, job_tres,
                                                 load_pyslurm)

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


class _Failing:
    @staticmethod
    def load():
        raise RuntimeError("slurm_load_node: Unable to contact slurm controller")


@pytest.fixture
def installed(monkeypatch):
    """Puts a stand-in ``pyslurm`` of a given version on sys.modules; reads through it fail."""

    def install(version: str, legacy: bool = False) -> None:
        module = types.ModuleType("pyslurm")
        module.__version__ = version
        if not legacy:
            module.Nodes = module.Jobs = module.Partitions = module.Reservations = _Failing
        monkeypatch.setitem(sys.modules, "pyslurm", module)

    return install


def test_a_mismatched_pyslurm_is_refused_naming_both_versions(installed):
    installed("25.11.1")
    with pytest.raises(PyslurmUnavailable, match=r"pyslurm 25\.11\.1 does not match Slurm 24\.11\.5"):
        load_pyslurm("24.11.5")


def test_a_pyslurm_of_the_same_release_is_taken(installed):
    installed("24.11.0")
    assert load_pyslurm("24.11.5").__version__ == "24.11.0"
    installed("22.5.1")  # pyslurm's own numbering up to 22.05
    assert load_pyslurm("22.05.8").__version__ == "22.5.1"


def test_the_legacy_api_is_refused(installed):
    installed("24.11.0", legacy=True)
    with pytest.raises(PyslurmUnavailable, match="only the legacy API"):
        load_pyslurm("24.11.5")


def test_auto_takes_the_cli_when_pyslurm_is_missing(mixed, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # import pyslurm raises ImportError
    backend = open_backend("auto", runner=mixed)
    assert type(backend) is CliBackend and backend.chosen_because.startswith("pyslurm is not installed")
    with pytest.raises(PyslurmUnavailable, match="pyslurm is not installed"):
        open_backend("pyslurm", runner=mixed)


def test_auto_takes_the_cli_when_versions_differ(mixed, installed):
    installed("23.2.0")  # 23.02: a release none of the recordings is of
    backend = open_backend("auto", runner=mixed)
    assert type(backend) is CliBackend
    assert backend.chosen_because == f"pyslurm 23.2.0 does not match Slurm {backend.version()}"


def test_auto_takes_the_cli_when_the_first_pyslurm_read_fails(mixed, installed, caplog):
    installed(mixed.release.replace(".0", "."))  # 22.05 -> pyslurm 22.5
    with caplog.at_level(logging.INFO, logger="compass.slurm"):
        backend = open_backend("auto", runner=mixed)
    assert type(backend) is CliBackend
    assert backend.chosen_because == ("a first read through pyslurm failed: pyslurm: RuntimeError: "
                                      "slurm_load_node: Unable to contact slurm controller")
    assert [r.getMessage() for r in caplog.records] == [f"backend: the CLI, since {backend.chosen_because}"]
    assert backend.read_nodes() and backend.uses_narrow == (mixed.release >= "24.11")  # open_backend reads narrow


def test_asking_for_cli_or_for_an_unknown_backend(mixed):
    assert open_backend("cli", runner=mixed).chosen_because == "asked for"
    with pytest.raises(Exception, match="unknown backend 'slurmrestd': choose one of auto, cli, pyslurm"):
        open_backend("slurmrestd", runner=mixed)


def test_per_job_gpu_requests_and_memory_per_gpu_from_squeue():
    output = ("1|gres/gpu:2||(null)|1|\n2|||(null)|2|\n3|N/A|N/A|(null)|3|\n9|gres/gpu:a100:4|gres/gpu:1000|(null)|9|\n"
              "10||gres/gpu:500|a|b|10|\n")
    assert job_tres(output) == {1: JobExtra("gres/gpu:2", ""), 9: JobExtra("gres/gpu:a100:4", "gres/gpu:1000"),
                                10: JobExtra("", "gres/gpu:500", "a|b")}
    with pytest.raises(SlurmParseError, match="line 1: cannot read 'JOBID'"):
        job_tres("JOBID\n")
    with pytest.raises(SlurmParseError, match="line 1: cannot read '1|N/A|N/A|80gb|2|'"):
        job_tres("1|N/A|N/A|80gb|2|\n")  # not its own id after --prefer


@pytest.mark.parametrize("release", ["24.11", "25.11"])
def test_prefer_and_segment_from_squeue_as_recorded(release):
    """What pyslurm's Job does not say: --prefer (which may hold a '|') and, from 25.05, --segment."""
    segment = release >= "25.11"
    text = (DATA / f"features-4x8-{release}" / "pyslurm-extra.txt").read_text()
    extra = job_tres(text, segment)
    assert extra[2].prefer == "80gb" and extra[5].prefer == "a100|v100" and extra[4].per_job == "gres/gpu:a100:4"
    assert (extra[6].segment if segment else 0) == (2 if segment else 0)


def test_gpu_requests_in_each_form_pyslurm_gives_them():
    assert _gpus({"gpu:a100": 2}, "24.11 gres_per_node") == (2, "a100")
    assert _gpus({"gres/gpu:a100": 3}, "25.11 gres_per_node") == (3, "a100")
    assert _gpus({"gres/gpu": 2}, "25.11 gres_per_node") == (2, None)
    tres = SimpleNamespace(gres={"gpu:a100": SimpleNamespace(count=1)})  # 25.11's TrackableResources (tres_per_task)
    assert _gpus(tres, "25.11 tres_per_task") == (1, "a100")
    assert _gpus(SimpleNamespace(gres={"gpu": SimpleNamespace(count=4)}), "25.11 tres_per_task") == (4, None)
    assert _gpus(SimpleNamespace(gres={}), "no GPUs") == (None, None)
    assert _gpus(None, "none") == _gpus({}, "none") == (None, None)


def test_auto_takes_the_cli_when_pyslurm_objects_have_an_unknown_shape(mixed, installed, monkeypatch):
    """A pyslurm of the right release whose objects lack what the backend reads: the CLI, not a traceback."""
    installed(mixed.release.replace(".0", "."))
    odd = types.SimpleNamespace(load=lambda: {7: SimpleNamespace(id=7, state="PENDING")})
    empty = types.SimpleNamespace(load=dict)
    for kind, stand_in in (("Nodes", empty), ("Jobs", odd), ("Partitions", empty), ("Reservations", empty)):
        monkeypatch.setattr(sys.modules["pyslurm"], kind, stand_in, raising=False)
    mixed.override[" ".join(JOB_TRES_SEGMENT if mixed.release >= "25.11" else JOB_TRES)] = (0, "", "")
    backend = open_backend("auto", runner=mixed)
    assert type(backend) is CliBackend
    assert backend.chosen_because.startswith(f"a first read through pyslurm failed: pyslurm {mixed.release.replace('.0', '.')}"
                                             ": unexpected objects: AttributeError: ")
