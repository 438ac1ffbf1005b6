"""The optional pyslurm backend: reads through pyslurm's Slurm API, changes jobs like the CLI backend.

Used only when ``import pyslurm`` works and pyslurm was built for the running
Slurm (pyslurm's major.minor, e.g. 22.5, must match Slurm's 22.05): a mismatched
build reads memory layouts wrongly, so it is refused rather than tried. pyslurm's
own dictionaries have the shape of the JSON the CLI prints, so the JSON parsers
read them too.
"""

from __future__ import annotations

import time
from importlib import import_module
from types import ModuleType

from . import parse_json, parse_text
from .cli_backend import PARTITIONS, RESERVATIONS, CliBackend
from .errors import SlurmError
from .state import SlurmState


class PyslurmUnavailable(SlurmError):
    """pyslurm is missing or built for another Slurm version."""


def load_pyslurm(slurm_version: str) -> ModuleType:
    try:
        pyslurm = import_module("pyslurm")
    except ImportError as err:
        raise PyslurmUnavailable(f"pyslurm is not installed ({err})") from None
    built_for = str(getattr(pyslurm, "__version__", "0.0")).split(".")[:2]
    major, minor = slurm_version.split(".")[:2]
    if built_for != [major, str(int(minor))]:
        raise PyslurmUnavailable(
            f"pyslurm {getattr(pyslurm, '__version__', '?')} does not match Slurm {slurm_version}"
        )
    return pyslurm


class PyslurmBackend(CliBackend):
    """Nodes and jobs from pyslurm; partitions, reservations and every change through the CLI."""

    name = "pyslurm"

    def __init__(self, timeout: float = 30.0) -> None:
        super().__init__(timeout)
        self.pyslurm = load_pyslurm(self.version())

    def read_state(self) -> SlurmState:
        read_at = time.time()
        try:
            node_doc = {"nodes": [dict(v, name=k) for k, v in self.pyslurm.node().get().items()]}
            job_doc = {"jobs": list(self.pyslurm.job().get().values())}
        except Exception as err:  # pyslurm raises its own ValueError/RuntimeError kinds
            raise SlurmError(f"pyslurm: {type(err).__name__}: {err}") from None
        return SlurmState(
            nodes=tuple(parse_json.nodes(node_doc)),
            jobs=tuple(parse_json.jobs(job_doc)),
            partitions=tuple(parse_text.partitions(self._run(PARTITIONS))),
            reservations=tuple(parse_text.reservations(self._run(RESERVATIONS))),
            version=self.version(),
            read_at=read_at,
        )
