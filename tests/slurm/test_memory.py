"""``--mem=0`` (all of each node's memory) read alike by every parser: 0 per node, which is not "unset"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compass_slurm.slurm import parse_json, parse_text
from compass_slurm.slurm.state import memory_per_node

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


@pytest.mark.parametrize(("per_node", "per_cpu", "per_gpu", "expected"), [
    (1000, None, None, 1000),  # --mem=1000
    (0, None, None, 0),  # --mem=0: scontrol and squeue --json
    (None, None, None, 0),  # --mem=0: pyslurm, which reads 0 as unset
    (None, 8000, None, None),  # --mem-per-cpu (or DefMemPerCPU)
    (0, None, 700, None),  # --mem-per-gpu: 22.05 to 23.11 print 0 per node beside it
    (700, None, 700, 700),  # --mem-per-gpu once running, in 24.11's squeue --json
])
def test_memory_per_node_is_0_only_where_nothing_is_asked_per_cpu_or_gpu(per_node, per_cpu, per_gpu, expected):
    assert memory_per_node(per_node, per_cpu, per_gpu) == expected


def test_scontrol_s_min_memory_node_0_is_all_of_the_node_unless_memory_per_gpu_is_given():
    lines = (DATA / "narrow-8x8" / "jobs.txt").read_text().splitlines()
    [mem_1000] = [line for line in lines if "MinMemoryNode=1000M" in line]
    [whole] = parse_text.jobs(mem_1000.replace("MinMemoryNode=1000M", "MinMemoryNode=0"))
    assert (whole.memory_per_node_mb, whole.memory_per_cpu_mb, whole.memory_per_gpu_mb) == (0, None, None)
    [per_gpu] = [job for job in parse_text.jobs("\n".join(lines)) if job.memory_per_gpu_mb]
    assert (per_gpu.memory_per_node_mb, per_gpu.memory_per_gpu_mb) == (None, 700)  # printed MinMemoryNode=0


@pytest.mark.parametrize("release", ["narrow-8x8", "narrow-8x8-24.11"])
def test_squeue_json_s_memory_per_node_0_is_all_of_the_node(release):
    doc = json.loads((DATA / release / "squeue.json").read_text())
    [raw] = [job for job in doc["jobs"] if job["job_id"] == 4]  # --mem=1000
    number = raw["memory_per_node"]
    raw["memory_per_node"] = {**number, "number": 0} if isinstance(number, dict) else 0
    [job] = [job for job in parse_json.jobs(doc) if job.id == "4"]
    assert (job.memory_per_node_mb, job.memory_per_cpu_mb) == (0, None)
