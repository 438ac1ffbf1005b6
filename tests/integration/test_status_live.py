"""``compass status --json`` against live Slurm on the dev cluster."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from compass_slurm.slurm.cli_backend import CliBackend

pytestmark = pytest.mark.slurm
COMPASS = Path(sys.executable).parent / "compass"


def test_status_json_matches_slurm(slurm, dev_cluster, tmp_path: Path) -> None:
    whole = slurm.sbatch("--gpus=8")
    small = slurm.sbatch("--gpus=3")
    slurm.wait(whole, "RUNNING")
    node = slurm.wait(small, "RUNNING")
    env = {**os.environ, "COMPASS_DB": f"sqlite:///{tmp_path / 'none.db'}", "COMPASS_CONFIG": str(tmp_path / "c.toml")}
    (tmp_path / "c.toml").write_text("[compass]\n")
    done = subprocess.run([str(COMPASS), "status", "--json"], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    state = CliBackend().read_state()  # Slurm's own view, read right after
    assert (doc["schema_version"], doc["nodes"], doc["gpus"]) == (1, dev_cluster.nodes, 64)
    assert doc["gpus_used"] == sum(n.gpus_used for n in state.nodes) >= 11
    assert doc["partial"] == sum(1 for n in state.nodes if 0 < n.gpus_used < n.gpus) >= 1
    assert doc["sif_bound"] == 2 / dev_cluster.nodes and isinstance(doc["wcc"], bool)
    assert doc["sif"] == (doc["partial"] - doc["phi_star"]) / doc["nodes"]
    cells = {c["name"]: c for c in doc["node_map"]}
    assert cells[node]["gpus_used"] >= 3 and cells[node]["kind"] in ("slotted", "partial", "full")
    # and Slurm's own words for it: GresUsed of scontrol show node -d, read here without our parsers
    shown = subprocess.run(["scontrol", "show", "node", "-d", "-o"], capture_output=True, text=True, check=True).stdout
    gres_used = {re.search(r"NodeName=(\S+)", line)[1]: sum(map(int, re.findall(r"gpu(?::[^:(,\s]+)?:(\d+)",
                                                                              re.search(r"GresUsed=(\S*)", line)[1])))
                 for line in shown.splitlines() if line.strip()}
    assert {name: c["gpus_used"] for name, c in cells.items()} == gres_used
    assert doc["gpus_used"] == sum(gres_used.values())
    assert doc["partial"] == sum(1 for name, used in gres_used.items() if 0 < used < dev_cluster.gpus_per_node)
    assert doc["decisions"] is None  # no log: left out, not an error
