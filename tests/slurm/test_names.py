import pytest

from compass_slurm.slurm import names
from compass_slurm.slurm.errors import SlurmNameError


def test_valid_names_pass_through():
    assert names.job_id("1234") == "1234"
    assert names.job_id(1234) == "1234"
    assert names.job_id("77_3") == "77_3"
    assert names.node_name("gpu-a100.rack1-07") == "gpu-a100.rack1-07"
    assert names.partition("gpu_long") == "gpu_long"
    assert names.node_names(["node01", "node02"]) == ["node01", "node02"]


@pytest.mark.parametrize(
    "check, value",
    [
        (names.job_id, "12 Priority=1"),
        (names.job_id, "0"),
        (names.job_id, "-5"),
        (names.job_id, "12;rm"),
        (names.job_id, "11_[1-3]"),
        (names.job_id, None),
        (names.node_name, "node01 Priority=1"),
        (names.node_name, "node[01-02]"),
        (names.node_name, "a,b"),
        (names.node_name, "-node"),
        (names.node_name, ""),
        (names.partition, "gpu=1"),
        (names.partition, "x" * 65),
    ],
)
def test_bad_names_are_refused(check, value):
    with pytest.raises(SlurmNameError, match="not a valid Slurm"):
        check(value)


def test_empty_node_list_is_refused():
    with pytest.raises(SlurmNameError, match="empty node list"):
        names.node_names([])
