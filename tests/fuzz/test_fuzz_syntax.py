"""Fuzzing Slurm's small syntaxes: hostlists (and their round trip), GRES/TRES strings, and the name checks."""

from __future__ import annotations

import string

from fuzzing import garbage, target
from fuzzing import clear
from hypothesis import strategies as st

from compass_slurm.slurm import gres, hostlist, names
from compass_slurm.slurm.errors import SlurmNameError
from compass_slurm.slurm.gres import GresError
from compass_slurm.slurm.hostlist import HostlistError

NODE_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
#: what a value must never carry onto an scontrol command line
FORBIDDEN = set(string.whitespace) | set(";&|$`<>(){}[]*?!~'\"\\,=#%^+:@/\x00")

hostlist_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="node0123456789[]-,_. ", max_size=40),
    garbage,
)


@st.composite
def hostlists(draw: st.DrawFn) -> tuple[str, int]:
    """A well-formed hostlist and how many names it holds."""
    parts, total = [], 0
    for _ in range(draw(st.integers(1, 3))):
        prefix = draw(st.from_regex(r"[a-z][a-z._-]{0,6}", fullmatch=True))
        ranges, count = [], 0
        for _ in range(draw(st.integers(1, 3))):
            lo = draw(st.integers(0, 200))
            hi = draw(st.integers(lo, lo + 30))
            width = draw(st.integers(len(str(hi)), 4))
            ranges.append(f"{lo:0{width}d}" if lo == hi else f"{lo:0{width}d}-{hi:0{width}d}")
            count += hi - lo + 1
        suffix = draw(st.sampled_from(["", "b", "-ib"]))
        parts.append(f"{prefix}[{','.join(ranges)}]{suffix}")
        total += count
    return ",".join(parts), total


node_names = st.one_of(
    st.from_regex(NODE_NAME, fullmatch=True),
    st.builds(lambda p, n, w: f"{p}{n:0{w}d}", st.sampled_from(["node", "gpu-a", "r1n", "x."]), st.integers(0, 300),
              st.integers(1, 4)),
)


@target("hostlist expand", hostlist_text)
def test_expand_yields_names_or_a_hostlist_error(text):
    result = clear(lambda: hostlist.expand(text), HostlistError)
    if isinstance(result, list):
        for name in result:
            assert name and not set(name) & set("[],") and not any(c.isspace() for c in name), name


@target("hostlist expand", hostlists())
def test_expand_counts_every_name_of_a_wellformed_hostlist(case):
    text, total = case
    assert len(hostlist.expand(text)) == total


@target("hostlist expand", st.integers(2, 6), st.sampled_from(["n[0-9999]", "n[0-4999,5000-9999]"]))
def test_huge_hostlists_are_refused_before_they_are_built(groups, group):
    # each group alone is within the limit; side by side they would make 10**8 names and more
    clear(lambda: hostlist.expand(group * groups), HostlistError)


@target("hostlist expand", st.just(",".join(["n[0-99999]"] * 11)))
def test_long_comma_lists_stop_at_the_host_limit(text):
    clear(lambda: hostlist.expand(text), HostlistError)


@target("hostlist compress round trip", st.lists(node_names, max_size=40))
def test_compress_then_expand_gives_back_the_names(names_):
    compressed = hostlist.compress(names_)
    assert sorted(hostlist.expand(compressed)) == sorted(set(names_))


@target("hostlist compress round trip", hostlists())
def test_expand_then_compress_keeps_the_names(case):
    expanded = hostlist.expand(case[0])
    assert sorted(hostlist.expand(hostlist.compress(expanded))) == sorted(set(expanded))


gres_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="gpu:resa100()IDXS0123456789,-=/KMG ", max_size=40),
    garbage,
)


@target("GRES", gres_text)
def test_gres_strings_read_or_raise_a_gres_error(text):
    items = clear(lambda: gres.parse(text), GresError)
    if isinstance(items, list):
        assert gres.gpu_count(text) == sum(i.count for i in items if i.name == "gpu") >= 0


gres_item = st.tuples(
    st.sampled_from(["gpu", "mps", "shard", "nic"]),
    st.none() | st.from_regex(r"[a-z][a-z0-9_]{0,6}|[1-9]g\.[1-9]0gb", fullmatch=True),
    st.integers(0, 64),
    st.sampled_from(["", "(S:0-1)", "(IDX:0-3,5)", "(IDX:N/A)"]),
    st.sampled_from(["", "gres:", "gres/"]),
)


@target("GRES", st.lists(gres_item, min_size=1, max_size=5))
def test_wellformed_gres_lists_count_their_gpus(items):
    text = ",".join(f"{pre}{name}{':' + kind if kind else ''}:{count}{detail}" for name, kind, count, detail, pre in items)
    assert gres.gpu_count(text) == sum(count for name, _, count, _, _ in items if name == "gpu")


def _check_name(check, value: object) -> None:
    result = clear(lambda: check(value), SlurmNameError)
    if isinstance(result, SlurmNameError):
        assert "not a valid Slurm" in str(result)
        return
    assert result == str(value) and len(result) <= 64
    assert not set(result) & FORBIDDEN, f"{check.__name__} let {result!r} through"


injections = st.builds(
    lambda head, evil, tail: head + evil + tail,
    st.from_regex(r"[a-z0-9]{0,8}", fullmatch=True),
    st.sampled_from([";rm -rf /", "$(id)", "`id`", "\n", " ", "\t", "=1", " Priority=1", ",node2", "[1-2]",
                     "|cat", "&&", ">x", "\x00", "../", "*", "'", '"', "\\", "x" * 65]),
    st.from_regex(r"[a-z0-9]{0,8}", fullmatch=True),
)
anything = st.one_of(st.text(max_size=80), injections, garbage, st.integers(), st.none(), st.binary(max_size=8),
                     st.lists(st.text(max_size=3), max_size=2), st.booleans(), st.floats())


@target("names", st.sampled_from([names.job_id, names.node_name, names.partition, names.gpu_type]), anything)
def test_a_name_that_passes_carries_no_metacharacters(check, value):
    _check_name(check, value)


@target("names", st.sampled_from([names.node_name, names.partition, names.gpu_type]), injections)
def test_injection_attempts_never_pass(check, value):
    result = clear(lambda: check(value), SlurmNameError)
    assert isinstance(result, SlurmNameError), f"{check.__name__} accepted {value!r}"


@target("names", node_names)
def test_valid_node_names_round_trip(name):
    assert names.node_name(name) == name
    assert hostlist.expand(hostlist.compress([name])) == [name]
    assert names.node_names([name, name]) == [name, name]


@target("names", st.integers(1, 10**10 - 1), st.none() | st.integers(0, 10**10 - 1))
def test_valid_job_ids_round_trip(job, task):
    text = str(job) if task is None else f"{job}_{task}"
    assert names.job_id(text) == text
    assert names.job_id(job) == str(job)
