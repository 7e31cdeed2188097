"""Turning names, comments and questions into search terms.

Warehouse names are identifiers (``fct_order_items``, ``customerLifetimeValue``), so they are
split at underscores, case changes and digits; English words are reduced to a common stem
(``orders``/``ordered`` → ``order``) and a few warehouse abbreviations are expanded (``qty``
also counts as ``quantity``). Chinese has no spaces: a run of CJK characters becomes its
overlapping character pairs (``退货率`` → ``退货``, ``货率``), which is how a Chinese question
meets a Chinese column comment without a dictionary.
"""

from __future__ import annotations

import functools
import re

# Letters/digits runs, or runs of CJK ideographs (and the kana/hangul blocks around them).
_WORDS = re.compile(r"[A-Za-z0-9_]+|[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
# camelCase / PascalCase / digits boundaries: "customerLTVByRegion2024" → customer LTV By Region 2024
_CAMEL_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")

# Questions are full of words that say nothing about which table holds the answer.
STOP_WORDS = frozenset(
    """
    a about above after again all also am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers him his how i if in into is it its itself just last
    me more most my no nor not now of off on once only or other our out over own per please
    same she should show so some such than that the their them then there these they this
    those through to too under until up very was we were what when where which while who whom
    why will with would you your give tell list find get much many each every week month year
    day today yesterday top vs versus whose
    """.split()
)
# Common warehouse abbreviations, indexed under the full word as well.
ABBREVIATIONS = {
    "qty": "quantity",
    "amt": "amount",
    "cnt": "count",
    "num": "number",
    "cust": "customer",
    "prod": "product",
    "txn": "transaction",
    "trx": "transaction",
    "inv": "inventory",
    "addr": "address",
    "desc": "description",
    "dept": "department",
    "emp": "employee",
    "mkt": "marketing",
    "mktg": "marketing",
    "rev": "revenue",
    "wh": "warehouse",
    "whse": "warehouse",
    "acct": "account",
    "pmt": "payment",
    "pct": "percent",
    "avg": "average",
    "dt": "date",
    "ts": "timestamp",
    "cat": "category",
    "sku": "product",
}


@functools.lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """A light English stemmer: plural, -ing, -ed and a few derivational endings.

    Light on purpose: it must only merge forms of one word; Porter's aggressive rules turn
    ``business`` and ``busy`` into one stem, which would merge unrelated tables.
    """
    if len(word) <= 3 or not word.isascii() or not word.isalpha():
        return word
    for suffix, replacement in (
        ("ational", "ate"),
        ("ization", "ize"),
        ("fulness", "ful"),
        ("iveness", "ive"),
        ("ousness", "ous"),
        ("ations", "ate"),
        ("ation", "ate"),
        ("ments", "ment"),
        ("ities", "ity"),
        ("ies", "y"),
        ("sses", "ss"),
        ("xes", "x"),
        ("ches", "ch"),
        ("shes", "sh"),
    ):
        if word.endswith(suffix) and len(word) - len(suffix) >= 2:
            word = word[: -len(suffix)] + replacement
            break
    else:
        if word.endswith("ing") and len(word) >= 6:
            word = _undouble(word[:-3])
        elif word.endswith("ed") and len(word) >= 5 and not word.endswith("eed"):
            word = _undouble(word[:-2])
        elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
            word = word[:-1]
    # A final silent e goes, so "rate", "rates" and "rated" meet at "rat".
    if word.endswith("e") and len(word) > 3 and not word.endswith("ee"):
        word = word[:-1]
    return word


def _undouble(word: str) -> str:
    """``shipp`` → ``ship``, ``stor`` stays: the doubled consonant -ing/-ed left behind."""
    if len(word) >= 3 and word[-1] == word[-2] and word[-1] not in "aeioulsz":
        return word[:-1]
    return word


def identifier_parts(identifier: str) -> list[str]:
    """``fct_orderItems2024`` → ``fct``, ``order``, ``items``, ``2024`` (lower case)."""
    parts: list[str] = []
    for chunk in re.split(r"[^A-Za-z0-9]+", identifier):
        parts += [p.lower() for p in _CAMEL_PARTS.findall(chunk)]
    return parts


def terms(text: str | None) -> list[str]:
    """The search terms of ``text`` (a name, comment, value or question), in order, repeated."""
    return list(_terms(text)) if text else []


@functools.lru_cache(maxsize=1 << 16)  # warehouses repeat their names: id, name, created_at…
def _terms(text: str) -> tuple[str, ...]:
    out: list[str] = []
    for word in _WORDS.findall(text):
        if _CJK.match(word):
            out += _cjk_terms(word)
            continue
        parts = identifier_parts(word)
        if len(parts) > 1:
            # The whole identifier is a term too: an exact name match outranks shared words.
            out.append(word.lower())
        for part in parts:
            if part in STOP_WORDS or (len(part) == 1 and not part.isdigit()):
                continue
            out.append(stem(part))
            expanded = ABBREVIATIONS.get(part)
            if expanded is not None:
                out.append(stem(expanded))
    return tuple(out)


def _cjk_terms(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]
