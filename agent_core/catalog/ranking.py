"""Ranking tables for a question as groups that join.

A question often needs several tables: the one its words name, the ones holding the other
things it mentions, and the link tables between them that no word names (``Has_Pet`` between
``Student`` and ``Pets``). First-stage BM25 gives each table a score per question term. Each of
the best tables then seeds a group that grows along the join graph (`agent_core.catalog.joins`)
by the partner that adds the most of the question's terms not yet covered -- reaching through
one link table when needed -- as long as that gain is worth it. A group scores the sum, over
the question's terms, of the best score any of its tables has for that term, so a group that
covers the whole question beats a single table that covers half of it, and the tables come out
group by group, best group first.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agent_core.catalog.joins import Join

SEEDS = 24  # first-stage tables that seed a group
MAX_GROUP = 4  # tables per group
MIN_GAIN = 0.5  # a partner joins a group when it adds this share of the best table's score


@dataclass(frozen=True)
class Group:
    tables: tuple[int, ...]  # seed first, then partners in the order they joined
    joins: tuple[Join, ...]  # the edges that connect them
    score: float


def rank_groups(
    contributions: Mapping[int, Mapping[str, float]],
    totals: Mapping[int, float],
    neighbours: Callable[[int], list[Join]],
    accept: Callable[[int], bool],
) -> list[Group]:
    """Groups seeded by the SEEDS best tables (``totals``: each table's score, the sum of its
    ``contributions``), best group first (duplicates of a better group's table set dropped);
    a partner must be ``accept``-ed."""
    best = heapq.nsmallest(SEEDS, totals, key=lambda number: (-totals[number], number))
    if not best:
        return []
    groups: dict[frozenset[int], Group] = {}
    for seed in best:
        group = _grow(seed, totals[best[0]], contributions, neighbours, accept)
        key = frozenset(group.tables)
        if key not in groups or groups[key].score < group.score:
            groups[key] = group
    return sorted(groups.values(), key=lambda g: (-g.score, g.tables))


def _grow(
    seed: int,
    top_score: float,
    contributions: Mapping[int, Mapping[str, float]],
    neighbours: Callable[[int], list[Join]],
    accept: Callable[[int], bool],
) -> Group:
    members = [seed]
    joins: list[Join] = []
    covered = dict(contributions.get(seed, {}))

    def gain(number: int) -> float:
        terms = contributions.get(number)
        if not terms:
            return 0.0
        return sum(max(0.0, score - covered.get(term, 0.0)) for term, score in terms.items())

    while len(members) < MAX_GROUP:
        best: tuple[float, list[Join]] | None = None
        for member in members:
            for edge in neighbours(member):
                if edge.other in members or not accept(edge.other):
                    continue
                direct = gain(edge.other)
                if best is None or direct > best[0]:
                    best = (direct, [edge])
                if len(members) + 2 > MAX_GROUP:
                    continue
                # Through a link table the question does not name: partner two hops away.
                for far in neighbours(edge.other):
                    if far.other in members or far.other == member or not accept(far.other):
                        continue
                    reached = gain(far.other) + direct
                    if best is None or reached > best[0] * 1.0001 + 1e-9:
                        best = (reached, [edge, far])
        if best is None or best[0] < MIN_GAIN * top_score:
            break
        for edge in best[1]:
            members.append(edge.other)
            joins.append(edge)
            for term, score in contributions.get(edge.other, {}).items():
                covered[term] = max(covered.get(term, 0.0), score)
    return Group(tuple(members), tuple(joins), sum(covered.values()))
