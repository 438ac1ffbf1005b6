"""The errors of the Slurm access layer: one base class, so a daemon cycle can catch them all."""

from __future__ import annotations


class SlurmError(Exception):
    """Anything that went wrong between us and Slurm."""


class SlurmParseError(SlurmError, ValueError):
    """Slurm said something we did not understand; the message names what and where."""


class SlurmCommandError(SlurmError):
    """A Slurm command failed, timed out or could not be started."""

    def __init__(self, argv: list[str], message: str) -> None:
        super().__init__(f"{' '.join(argv)}: {message}")
        self.argv = argv


class SlurmNameError(SlurmError, ValueError):
    """A node name, job id or partition that does not match Slurm's syntax."""
