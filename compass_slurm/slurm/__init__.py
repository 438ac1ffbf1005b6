"""Access to Slurm: state value objects, one Backend interface and its implementations.

- ``state``: SlurmNode, SlurmJob, SlurmPartition, SlurmReservation, SlurmState
  (and the job-comment marker that says a job is compass-managed / migratable)
- ``backend``: the Backend interface, the exact scontrol command lines, DryRunBackend
- ``cli``: sinfo / squeue / scontrol; ``snapshot``: a saved state; ``pyslurm_backend``: optional
- ``hostlist``, ``gres``, ``names``: Slurm syntax in and out
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import SlurmCommandError, SlurmError, SlurmNameError, SlurmParseError
from .state import SlurmJob, SlurmNode, SlurmPartition, SlurmReservation, SlurmState

if TYPE_CHECKING:
    from .backend import Backend, DryRunBackend

__all__ = [
    "Backend", "DryRunBackend", "SlurmCommandError", "SlurmError", "SlurmJob", "SlurmNameError", "SlurmNode",
    "SlurmParseError", "SlurmPartition", "SlurmReservation", "SlurmState", "open_backend",
]


def __getattr__(name: str) -> Any:
    """The backends load on first use: the sbatch wrapper needs only the state and the names."""
    if name in ("Backend", "DryRunBackend"):
        from . import backend

        return getattr(backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_backend(kind: str = "auto", snapshot: str | None = None, timeout: float = 30.0) -> Backend:
    """The backend a command should use: a snapshot file if given, else pyslurm when usable, else the CLI."""
    if snapshot is not None:
        from .snapshot import SnapshotBackend

        return SnapshotBackend.from_file(snapshot)
    from .cli_backend import CliBackend

    if kind == "cli":
        return CliBackend(timeout)
    from .pyslurm_backend import PyslurmBackend, PyslurmUnavailable

    try:
        return PyslurmBackend(timeout)
    except PyslurmUnavailable:
        if kind == "pyslurm":
            raise
        return CliBackend(timeout)
