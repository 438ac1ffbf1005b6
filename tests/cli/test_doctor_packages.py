"""compass doctor's installation check: it knows every subpackage the source tree has."""

from __future__ import annotations

from pathlib import Path

from compass_slurm.cli.doctor import PACKAGES, Doctor

SOURCE = Path(__file__).resolve().parents[2] / "compass_slurm"


def test_every_subpackage_of_the_source_tree_is_checked():
    found = {".".join(d.relative_to(SOURCE).parts) for d in SOURCE.rglob("*")
             if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py"))}
    assert set(PACKAGES) == found


def test_the_installation_check_passes_on_this_tree():
    detail = Doctor(None).installation()
    assert detail.endswith(f"in {len(PACKAGES)} subpackages import from {SOURCE}")
