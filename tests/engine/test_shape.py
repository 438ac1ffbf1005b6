"""The one rule that turns a GPU count into a gang of identical instances (daemon and simulator)."""

from __future__ import annotations

import pytest

from compass_slurm.engine.shape import Shape, instance_shape


@pytest.mark.parametrize(
    "gpus, nodes, shape",
    [
        (1, None, Shape(1, 1, False, "single")),
        (8, 1, Shape(1, 8, False, "single")),
        (4, 2, Shape(2, 2, True, "per_node")),  # --nodes=2: two nodes, as Slurm must give
        (16, 2, Shape(2, 8, False, "per_node")),
        (16, None, Shape(2, 8, False, "whole_nodes")),
        (16, 3, Shape(2, 8, False, "whole_nodes")),  # 3 does not divide 16
        (12, 1, Shape(2, 6, True, "divisor")),  # 12 GPUs on one 8-GPU node cannot run: 2 x 6
        (12, 12, Shape(12, 1, True, "per_node")),
        (20, 2, Shape(4, 5, True, "divisor")),
        (11, None, Shape(11, 1, True, "divisor")),
    ],
)
def test_gpu_counts_become_gangs(gpus, nodes, shape):
    assert instance_shape(gpus, 8, nodes) == shape


@pytest.mark.parametrize("gpus", range(1, 70))
@pytest.mark.parametrize("nodes", [None, 1, 2, 3, 4, 8])
def test_every_shape_keeps_the_gpus_and_gives_each_node_one_count(gpus, nodes):
    s = instance_shape(gpus, 8, nodes)
    assert s.instances * s.gpus == gpus and 1 <= s.gpus <= 8
    # Slurm is told one GPU count per node: either one instance per node, or whole nodes.
    assert s.instances == 1 or s.distinct_nodes or s.gpus == 8
