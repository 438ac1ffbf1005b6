"""The host's paths that compass uses by default, under one root.

``COMPASS_ROOT`` (default ``/``) moves them all at once: the test suite points it at a
temporary directory, so that no test reads what a daemon left on the machine (a stale
``/run/compass/hook.conf``, say), and a packager can lay them out under a staging root.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(os.environ.get("COMPASS_ROOT") or "/")
#: the config file's folder
ETC = ROOT / "etc" / "compass"
#: the daemon's socket, anchors and the hook's config (systemd's RuntimeDirectory)
RUN = ROOT / "run" / "compass"
#: the SQLite decision log's folder (systemd's StateDirectory)
STATE = ROOT / "var" / "lib" / "compass"
