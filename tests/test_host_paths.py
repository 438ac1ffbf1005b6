"""The suite does not depend on the host: a stale daemon's files in the real /run/compass change no result."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from compass_slurm import paths
from compass_slurm.config import DEFAULT_FILE, Config
from compass_slurm.service.store import SYSTEM_DB

REPO = Path(__file__).resolve().parents[1]
REAL = Path("/run/compass")
#: doctor on the defaults reads the default hook config and judges its anchors file
DOCTOR_TEST = "tests/cli/test_admin_commands.py::test_doctor_on_defaults_without_a_config_file_is_info_not_failure"


def test_every_default_path_is_under_the_test_run_s_root():
    root = Path(os.environ["COMPASS_ROOT"])
    assert paths.ROOT == root and root != Path("/")
    config = Config()
    for path in (DEFAULT_FILE, SYSTEM_DB, config.socket, config.anchors, config.hook_config):
        assert Path(path).is_relative_to(root), path


@pytest.mark.skipif(os.geteuid() != 0, reason="writing the real /run/compass needs root")
def test_a_stale_daemon_s_files_in_the_real_paths_change_no_result(tmp_path):
    if (REAL / "hook.conf").exists() or (REAL / "anchors").exists():
        pytest.skip("a daemon's files are in /run/compass already: not ours to replace")
    made = not REAL.exists()
    REAL.mkdir(parents=True, exist_ok=True)
    try:
        (REAL / "anchors").write_text("stale anchors of a daemon long gone\n")
        (REAL / "hook.conf").write_text(f"anchors = {REAL / 'anchors'}\nstaleness = 1\nlease = 60\n")
        os.utime(REAL / "anchors", (0, 0))
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", DOCTOR_TEST],
                              cwd=REPO, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:]
    finally:
        for name in ("hook.conf", "anchors"):
            (REAL / name).unlink(missing_ok=True)
        if made:
            REAL.rmdir()
