"""compass replay: run an event stream through a policy and print states or a summary."""

from __future__ import annotations

import json

import click

from ..config import Config
from ..engine.model import MAX_NODE_GPUS, MAX_NODES, EngineError, Node
from .common import UserError, emit_json


def cluster_nodes(count: int, gpus: int) -> list[Node]:
    """``count`` identical nodes named node0001, node0002, ... (the width grows with the count)."""
    width = max(4, len(str(count)))
    return [Node(f"node{k:0{width}d}", gpus) for k in range(1, count + 1)]


@click.command("replay")
@click.argument("events", type=click.File("rb"))  # bytes: parse_events decodes each line, naming a bad one
@click.option("--nodes", "node_count", type=click.IntRange(1, MAX_NODES), required=True, help="Number of nodes.")
@click.option("--gpus-per-node", type=click.IntRange(1, MAX_NODE_GPUS), default=8, show_default=True)
@click.option("--policy", default=Config.policy, show_default=True,
              help="Placement policy (see compass policies); the default is the daemon's.")
@click.option("--states", is_flag=True, help="Print one JSON line per input event: the cluster after it.")
def command(events, node_count: int, gpus_per_node: int, policy: str, states: bool) -> None:
    """Replay arrival/departure EVENTS (JSON Lines, '-' for stdin) through a policy."""
    from ..engine.policies.base import policy_names
    from ..engine.replay import states as replay_states
    from ..engine.replay import summary as replay_summary
    from ..native_stdout import native_stdout_silenced

    if policy not in policy_names():
        raise UserError(f"unknown policy {policy!r}", hint=f"choose from: {', '.join(policy_names())}")
    nodes = cluster_nodes(node_count, gpus_per_node)
    try:
        with native_stdout_silenced():
            if states:
                for state in replay_states(events, nodes, policy):
                    click.echo(json.dumps(state, separators=(",", ":")))
                return
            totals = replay_summary(events, nodes, policy)
    except EngineError as err:  # a bad event line: the states before it stand, the replay stops
        raise UserError(f"{getattr(events, 'name', '<stdin>')}: {err}") from None  # a binary stdin may have none
    emit_json({"policy": policy, "nodes": node_count, "gpus_per_node": gpus_per_node, **totals})
