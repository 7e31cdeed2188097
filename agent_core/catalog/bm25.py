"""Okapi BM25 over documents made of weighted fields.

A document is a bag of terms whose counts are weighted by the field they came from (a table's
name counts more than a sample value), which is BM25F's idea in its simplest form. Scoring a
question touches only the postings of its terms, so a 900-table catalog answers in
milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

K1 = 1.2
B = 0.75


def weighted_terms(fields: Iterable[tuple[Iterable[str], float]]) -> dict[str, float]:
    """One document's term weights from (terms, field weight) pairs."""
    counts: dict[str, float] = {}
    for terms, weight in fields:
        for term in terms:
            counts[term] = counts.get(term, 0.0) + weight
    return counts


@dataclass(frozen=True)
class Hit(Generic[T]):
    item: T
    score: float
    matched: frozenset[str]  # the query terms the document contains


class Bm25Index(Generic[T]):
    def __init__(self, documents: list[tuple[T, dict[str, float]]]) -> None:
        self._items = [item for item, _ in documents]
        self._lengths = [sum(terms.values()) for _, terms in documents]
        self._average = (sum(self._lengths) / len(self._lengths)) if self._lengths else 1.0
        self._documents = [terms for _, terms in documents]
        self._norms = [K1 * (1 - B + B * length / self._average) for length in self._lengths]
        self._postings: dict[str, list[tuple[int, float]]] = {}
        for number, (_, terms) in enumerate(documents):
            for term, weight in terms.items():
                self._postings.setdefault(term, []).append((number, weight))

    def __len__(self) -> int:
        return len(self._items)

    @property
    def items(self) -> list[T]:
        return self._items

    def document(self, number: int) -> dict[str, float]:
        return self._documents[number]

    def vocabulary(self) -> frozenset[str]:
        return frozenset(self._postings)

    def term_scores(self, query: Mapping[str, float]) -> dict[int, dict[str, float]]:
        """Document number → each query term's share of its score (a term's weight in the
        query multiplies it: a looser match of a question's word counts less)."""
        count = len(self._items)
        norms = self._norms
        out: dict[int, dict[str, float]] = {}
        for term, factor in query.items():
            postings = self._postings.get(term)
            if not postings:
                continue
            scale = (K1 + 1) * factor * math.log(1 + (count - len(postings) + 0.5) / (len(postings) + 0.5))
            for number, weight in postings:
                score = scale * weight / (weight + norms[number])
                terms = out.get(number)
                if terms is None:
                    out[number] = {term: score}
                else:
                    terms[term] = score
        return out

    def search(self, query: Iterable[str], limit: int, accept: Callable[[T], bool] = lambda _: True) -> list[Hit[T]]:
        """The ``limit`` best documents ``accept`` admits, best first (ties: document order)."""
        count = len(self._items)
        scores: dict[int, float] = {}
        matched: dict[int, set[str]] = {}
        for term in set(query):
            postings = self._postings.get(term)
            if not postings:
                continue
            idf = math.log(1 + (count - len(postings) + 0.5) / (len(postings) + 0.5))
            for number, weight in postings:
                norm = K1 * (1 - B + B * self._lengths[number] / self._average)
                scores[number] = scores.get(number, 0.0) + idf * weight * (K1 + 1) / (weight + norm)
                matched.setdefault(number, set()).add(term)
        ranked = sorted(scores, key=lambda number: (-scores[number], number))
        hits: list[Hit[T]] = []
        for number in ranked:
            if accept(self._items[number]):
                hits.append(Hit(self._items[number], scores[number], frozenset(matched[number])))
                if len(hits) == limit:
                    break
        return hits
