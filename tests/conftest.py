"""What every test starts from.

No test reads the host's compass files: every default path (/etc/compass, /run/compass,
/var/lib/compass: ``compass_slurm/paths.py``) and the per-user cache and state folders point
into a temporary directory of this run, set here before compass_slurm is imported, and
inherited by the commands tests run. A stale daemon's hook config in the real /run/compass
cannot change a result (tests/test_host_paths.py shows it).

Every test starts with no frozen objects: a daemon cycle freezes what survives it (collector.paused(freeze=True)),
which in a test process would keep the garbage of earlier tests from ever being collected.

A daemon's JobBook raises on a move its TRANSITIONS do not list (in production it logs the bug and goes on)."""

from __future__ import annotations

import gc
import os
import tempfile

import pytest

HOST = tempfile.mkdtemp(prefix="compass-test-host-")
os.chmod(HOST, 0o755)  # the packaging tests run commands as a plain user too
os.environ["COMPASS_ROOT"] = HOST
os.environ["XDG_CACHE_HOME"] = os.path.join(HOST, "cache")
os.environ["XDG_STATE_HOME"] = os.path.join(HOST, "state")


@pytest.fixture(autouse=True)
def _unfrozen():
    yield
    gc.unfreeze()


@pytest.fixture(autouse=True, scope="session")
def _strict_job_states():
    from compass_slurm.service.job_states import JobBook

    JobBook.strict = True
    yield
