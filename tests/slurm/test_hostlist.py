import pytest

from compass_slurm.slurm.hostlist import HostlistError, compress, expand


@pytest.mark.parametrize(
    "text, names",
    [
        ("node[01-03,10]", ["node01", "node02", "node03", "node10"]),
        ("node[8-11]", ["node8", "node9", "node10", "node11"]),
        ("node[098-101]", ["node098", "node099", "node100", "node101"]),
        ("a[1-3]b", ["a1b", "a2b", "a3b"]),
        ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
        ("x,node[1-2],gpu-a.1", ["x", "node1", "node2", "gpu-a.1"]),
        ("node05", ["node05"]),
        ("", []),
        ("(null)", []),
    ],
)
def test_expand(text, names):
    assert expand(text) == names


@pytest.mark.parametrize(
    "text, message",
    [
        ("node[1-", "'[' is never closed"),
        ("node1]", "']' without '['"),
        ("node[[1]]", "nested '['"),
        ("node[3-1]", "range '3-1' runs backwards"),
        ("node[a-b]", "bad range 'a-b'"),
        ("node[1-2,]", "bad range ''"),
        ("a,,b", "empty name between commas"),
        ("node[1-99999999]", "more than 1000000 hosts"),
        ("no de", "unexpected ' '"),
    ],
)
def test_malformed_hostlists_name_the_problem(text, message):
    with pytest.raises(HostlistError, match="hostlist") as err:
        expand(text)
    assert message in str(err.value)


@pytest.mark.parametrize(
    "names, text",
    [
        (["node01", "node02", "node03", "node05"], "node[01-03,05]"),
        (["node05"], "node05"),
        (["node2", "node1", "node1"], "node[1-2]"),
        (["b", "a7", "node09", "node10"], "a7,b,node[09-10]"),
        (["node9", "node10"], "node10,node9"),
    ],
)
def test_compress(names, text):
    assert compress(names) == text
    assert sorted(expand(text)) == sorted(set(names))
