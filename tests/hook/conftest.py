"""The ``hook`` fixture: etc/slurm/job_submit.lua in a real Lua 5.1 (see hookdriver.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hookdriver import LUA, Hook  # noqa: E402


@pytest.fixture
def hook(tmp_path: Path) -> Hook:
    if not LUA:
        pytest.fail("lua5.1 is missing: run ./scripts/bootstrap (it installs Debian's lua5.1)")
    return Hook(tmp_path)
