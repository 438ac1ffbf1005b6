"""A job's ``--constraint`` (and ``--prefer``), read as Slurm reads it, for the forms the daemon honours exactly.

Slurm's constraint is an expression over node features: ``a100``, ``a100&80gb`` (AND),
``a100|v100`` (OR) and parentheses, ``(a100|h100)&80gb``; a comma is AND (slurmctld replaces it
with ``&``: ``job_scheduler.c``, ``_feature_string2list``). These are checked one node at a
time, so a node's active features decide whether it is eligible. The other forms say
something about the set of nodes, not each node: brackets (matching OR, ``[rack1|rack2]``:
all nodes share one of them) and counts (``[a100*2&v100*2]``); a ``!`` is no operator
Slurm documents. Those raise UnsupportedConstraint: the job is left to Slurm, never pinned to nodes
that Slurm may refuse. Without parentheses Slurm reads AND and OR mixed (``a|b&c``) left
to right, not by the precedence a reader expects; that is left to Slurm too.

Only the standard library: the simulator reads trace constraints with it as well.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from .errors import SlurmParseError

#: what a feature name may hold (slurm.conf's Feature=): anything but the expression's own characters
_FEATURE = re.compile(r"[A-Za-z0-9_.\-:+/=@]+")
_TOKEN = re.compile(r"\s*(?:(?P<feature>[A-Za-z0-9_.\-:+/=@]+)|(?P<op>[&|()]))")
#: characters of the forms read per set of nodes (see the module docstring)
_SET_FORMS = frozenset("[]*!")


class UnsupportedConstraint(SlurmParseError):
    """A constraint of a form that Slurm checks over the job's whole set of nodes: the daemon leaves it to Slurm."""


@dataclass(frozen=True, slots=True)
class Constraint:
    """A constraint as alternatives (``any_of``), each a set of features a node must all have.

    No alternatives at all is no constraint: every node satisfies it."""

    any_of: tuple[frozenset[str], ...] = ()
    text: str = ""

    def satisfied_by(self, features: frozenset[str]) -> bool:
        return not self.any_of or any(need <= features for need in self.any_of)

    @property
    def features(self) -> frozenset[str]:
        """Every feature the constraint names."""
        return frozenset().union(*self.any_of)


#: no constraint
ANY = Constraint()


@functools.lru_cache(maxsize=1024)  # asked per pending job; constraints repeat
def parse_constraint(text: str | None) -> Constraint:
    """``text`` as a Constraint (ANY when empty). Raises UnsupportedConstraint for a form read per set of nodes,
    SlurmParseError for text that is no constraint at all."""
    text = (text or "").strip()
    if not text or text == "(null)":
        return ANY
    bad = sorted(_SET_FORMS.intersection(text))
    if bad:
        raise UnsupportedConstraint(f"constraint {text!r}: {' '.join(bad)} asks about the job's set of nodes, "
                                    f"not each node")
    tokens = _tokens(text.replace(",", "&"))
    parser = _Parser(text, tokens)
    terms = parser.expression()
    if parser.at != len(tokens):
        raise SlurmParseError(f"constraint {text!r}: unexpected {tokens[parser.at]!r}")
    return Constraint(tuple(dict.fromkeys(terms)), text)


def _tokens(text: str) -> list[str]:
    out, at = [], 0
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None or match.end() == at:
            if text[at:].strip() == "":
                break
            raise SlurmParseError(f"constraint {text!r}: cannot read {text[at:].strip()!r}")
        out.append(match.group("feature") or match.group("op"))
        at = match.end()
    return out


class _Parser:
    """A recursive descent over ``term (op term)*`` with one kind of op per level, to disjunctive normal form."""

    def __init__(self, text: str, tokens: list[str]) -> None:
        self.text, self.tokens, self.at = text, tokens, 0

    def expression(self) -> list[frozenset[str]]:
        terms = self.operand()
        op = None
        while self.at < len(self.tokens) and self.tokens[self.at] in "&|":
            this = self.tokens[self.at]
            if op is not None and this != op:
                raise UnsupportedConstraint(f"constraint {self.text!r}: & and | mixed without parentheses "
                                            f"(Slurm reads them left to right)")
            op = this
            self.at += 1
            right = self.operand()
            terms = terms + right if op == "|" else [a | b for a in terms for b in right]
        return terms

    def operand(self) -> list[frozenset[str]]:
        if self.at >= len(self.tokens):
            raise SlurmParseError(f"constraint {self.text!r}: ends where a feature was expected")
        token = self.tokens[self.at]
        self.at += 1
        if token == "(":
            terms = self.expression()
            if self.at >= len(self.tokens) or self.tokens[self.at] != ")":
                raise SlurmParseError(f"constraint {self.text!r}: a parenthesis is not closed")
            self.at += 1
            return terms
        if not _FEATURE.fullmatch(token):
            raise SlurmParseError(f"constraint {self.text!r}: {token!r} where a feature was expected")
        return [frozenset({token})]
