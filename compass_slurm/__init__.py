"""compass_slurm: COMPASS-ABS GPU placement for Slurm clusters."""

__version__ = "0.2.0"
