"""Which groups the collectives are timed in: the whole world, and with several nodes each node alone
(intra-node: NVLink, PCIe) and one rank per node (inter-node: the network), each measured separately.

>>> [(scope.name, scope.groups) for scope in plan_scopes(["a", "a", "b", "b"])]
[('world', [[0, 1, 2, 3]]), ('intra-node', [[0, 1], [2, 3]]), ('inter-node', [[0, 2]])]
>>> [scope.name for scope in plan_scopes(["a", "a"])]
['world']
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Scope:
    """A measuring phase: ``groups`` of ranks that time their collectives at the same time (disjoint)."""

    name: str
    groups: list

    def group_of(self, rank: int) -> list | None:
        """The ranks ``rank`` measures with in this scope (``None``: it sits this one out)."""
        for ranks in self.groups:
            if rank in ranks:
                return ranks
        return None


def plan_scopes(hosts) -> list[Scope]:
    """Scopes for ranks on ``hosts`` (the host of each rank, by rank); groups of one rank are dropped."""
    nodes: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        nodes.setdefault(host, []).append(rank)
    world = Scope("world", [list(range(len(hosts)))])
    if len(nodes) == 1:
        return [world]
    scopes = [world]
    intra = [ranks for ranks in nodes.values() if len(ranks) > 1]
    if intra:
        scopes.append(Scope("intra-node", intra))
    scopes.append(Scope("inter-node", [[ranks[0] for ranks in nodes.values()]]))
    return scopes
