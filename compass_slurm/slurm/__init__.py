"""Access to Slurm: state value objects, one Backend interface and its implementations.

- ``state``: SlurmNode, SlurmJob, SlurmPartition, SlurmReservation, SlurmState
  (and the job-comment marker that says a job is compass-managed / migratable)
- ``backend``: the Backend interface, the exact scontrol command lines, DryRunBackend
- ``cli_backend``: sinfo / squeue / scontrol; ``snapshot``: a saved state; ``pyslurm_backend``: optional
- ``hostlist``, ``gres``, ``names``: Slurm syntax in and out
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .errors import SlurmCommandError, SlurmError, SlurmNameError, SlurmParseError
from .state import SlurmJob, SlurmNode, SlurmPartition, SlurmReservation, SlurmState

if TYPE_CHECKING:
    from .backend import Backend, DryRunBackend
    from .cli_backend import Runner

__all__ = [
    "Backend", "DryRunBackend", "SlurmCommandError", "SlurmError", "SlurmJob", "SlurmNameError", "SlurmNode",
    "SlurmParseError", "SlurmPartition", "SlurmReservation", "SlurmState", "open_backend",
]

log = logging.getLogger("compass.slurm")
#: what --backend accepts
BACKENDS = ("auto", "cli", "pyslurm")


def __getattr__(name: str) -> Any:
    """The backends load on first use: the sbatch wrapper needs only the state and the names."""
    if name in ("Backend", "DryRunBackend"):
        from . import backend

        return getattr(backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_backend(kind: str = "auto", snapshot: str | None = None, timeout: float = 30.0,
                 runner: Runner | None = None) -> Backend:
    """The backend a command should use: a snapshot file if given, else ``kind`` (cli, pyslurm or auto).

    ``auto`` takes pyslurm only when it is built for the running Slurm and a first read through it
    works; otherwise the CLI backend, with the reason logged and kept in ``chosen_because``.
    ``pyslurm`` raises PyslurmUnavailable (naming both versions when they differ) instead of falling back.
    ``runner`` runs the Slurm commands (tests replay recorded output).
    """
    if snapshot is not None:
        from .snapshot import SnapshotBackend

        backend: Backend = SnapshotBackend.from_file(snapshot)
        backend.chosen_because = f"--snapshot {snapshot}"
        return backend
    from .cli_backend import CliBackend, run_process

    runner = runner or run_process
    if kind not in BACKENDS:
        raise SlurmError(f"unknown backend {kind!r}: choose one of {', '.join(BACKENDS)}")
    if kind == "cli":
        backend = CliBackend(timeout, runner=runner, narrow=None, lines=None)
        backend.chosen_because = "asked for"
        return backend
    from .pyslurm_backend import PyslurmBackend, PyslurmUnavailable

    try:
        backend = PyslurmBackend(timeout, runner=runner)
        if kind == "auto":
            backend.read_state()
    except PyslurmUnavailable as err:
        if kind == "pyslurm":
            raise
        reason = str(err)
    except SlurmError as err:
        if kind == "pyslurm":
            raise
        reason = f"a first read through pyslurm failed: {err}"
    else:
        backend.chosen_because = "asked for" if kind == "pyslurm" else f"pyslurm {backend.pyslurm_version} matches Slurm"
        return backend
    log.info("backend: the CLI, since %s", reason)
    backend = CliBackend(timeout, runner=runner, narrow=None, lines=None)
    backend.chosen_because = reason
    return backend
