import pytest

from compass_slurm.slurm.gres import GresError, GresItem, gpu_count, gpu_type, parse


@pytest.mark.parametrize(
    "text, count, kind",
    [
        ("gpu:8", 8, None),
        ("gpu:a100:8(S:0-1)", 8, "a100"),
        ("gpu:a100:2(IDX:0-1)", 2, "a100"),
        ("gpu:a100:0(IDX:N/A)", 0, "a100"),
        ("gres/gpu=4", 4, None),
        ("gres/gpu:a100=4", 4, "a100"),
        ("gres:gpu:2", 2, None),
        ("gres:gpu:a100:3", 3, "a100"),
        ("gres:gpu:+1", 1, None),           # slurmctld accepts these (strtol): the job-submit hook leaves
        ("gres:gpu: 2", 2, None),           # them to Slurm, the daemon must still read them
        ("cpu=1,mem=8000M,node=1,billing=1,gres/gpu=2", 2, None),
        ("gpu:a100:2(IDX:0-1),gpu:v100:1(IDX:2)", 3, "a100"),
        ("gpu:8(S:0,1),mps:100", 8, None),
        ("nic:2,gpu:1g.10gb:2", 2, "1g.10gb"),
        ("gpu", 1, None),
        ("(null)", 0, None),
        ("N/A", 0, None),
        ("", 0, None),
        ("mps:100", 0, None),
    ],
)
def test_gpu_count_and_type(text, count, kind):
    assert gpu_count(text) == count
    assert gpu_type(text) == kind


def test_items_keep_type_count_and_detail():
    assert parse("gpu:a100:8(S:0-1),nic:1") == [GresItem("gpu", "a100", 8, "S:0-1"), GresItem("nic", None, 1)]


@pytest.mark.parametrize(
    "text, message",
    [
        ("gpu:8(S:0-1", "'(' is never closed"),
        ("gpu:8)", "')' without '('"),
        ("gpu:8:9:10", "cannot read 'gpu:8:9:10'"),
        ("gpu:a100:two", "cannot read"),
        ("gpu:8,,nic:1", "cannot read ''"),
    ],
)
def test_bad_gres_names_the_part(text, message):
    with pytest.raises(GresError) as err:
        gpu_count(text)
    assert message in str(err.value)
    assert repr(text) in str(err.value)
