"""The user's language: which one a reply is in, and the catalog of every text the bot writes.

Every sentence the bot writes itself (errors, progress lines, budgets, schedule notices, the
provenance line…) is an English msgid wrapped in `t`, translated in one gettext catalog per
language under ``agent_core/locale/<lang>/LC_MESSAGES/messages.po``. To update them::

    pybabel extract -F pyproject.toml --no-location --sort-output -o messages.pot agent_core gateway adapters
    pybabel update -i messages.pot -d agent_core/locale -w 100

(the keywords are in pyproject's ``[tool.babel]``), then translate the new entries;
tests/test_i18n.py fails while one is missing. The .po file is compiled in memory at first
use, so neither a build step nor compiled .mo files exist.

Placeholders are ``str.format`` fields (``{ref}``), filled after translation, so a translation
may move them.

This module sits at the bottom of agent_core with the message model: it imports no other
module of the package, and Babel only when a catalog is first loaded.
"""

from __future__ import annotations

import functools
import gettext
import re
from enum import StrEnum
from importlib import resources
from importlib.resources.abc import Traversable
from io import BytesIO

DOMAIN = "messages"


class Language(StrEnum):
    """The languages the bot writes in; the value names the catalog's folder."""

    EN = "en"  # the msgids themselves
    ZH_HANS = "zh_Hans"  # Simplified Chinese


# CJK Unified Ideographs with extension A and the compatibility block: Han characters, without
# kana or hangul, which would make Japanese or Korean look Chinese.
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[A-Za-z\u00c0-\u024f]+")
# A Han character carries about as much as a Latin word: Chinese when they make this share of
# the two, so a Chinese question naming tables (查询 dwh.orders 的 GMV) still counts as Chinese.
_CHINESE_SHARE = 0.4


def language_of_locale(locale: str | None) -> Language | None:
    """The language of a platform locale (``zh-CN``, ``zh_TW``, ``en-US``, ``zh``); None for a
    locale the bot has no catalog for, or none at all.

    Every Chinese locale reads Simplified Chinese: closer to a Traditional reader than English.
    """
    if not locale:
        return None
    primary = re.split(r"[-_]", locale.strip(), maxsplit=1)[0].lower()
    return {"zh": Language.ZH_HANS, "en": Language.EN}.get(primary)


def language_of_text(text: str) -> Language:
    """The language a message is written in, by the share of Han characters (English when the
    text has neither)."""
    han = len(_HAN.findall(text))
    if han == 0:
        return Language.EN
    words = len(_LATIN_WORD.findall(text))
    return Language.ZH_HANS if han / (han + words) >= _CHINESE_SHARE else Language.EN


def reply_language(locale: str | None, text: str) -> Language:
    """The language to answer a user in: their platform locale where the bot speaks it, else
    the language of what they wrote."""
    return language_of_locale(locale) or language_of_text(text)


def t(language: Language, message: str, /, **values: object) -> str:
    """``message`` (an English msgid) in ``language``, its ``{fields}`` filled from ``values``."""
    text = _catalog(language).gettext(message)
    return text.format(**values) if values else text


def catalog_path(language: Language) -> Traversable:
    """The .po file of ``language`` (shipped in the wheel as package data)."""
    return resources.files("agent_core") / "locale" / language.value / "LC_MESSAGES" / f"{DOMAIN}.po"


@functools.cache
def _catalog(language: Language) -> gettext.NullTranslations:
    """The translations of ``language``, compiled from its .po file once per process."""
    if language is Language.EN:
        return gettext.NullTranslations()
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    with catalog_path(language).open("rb") as po:
        catalog = read_po(po, locale=language.value, domain=DOMAIN)
    compiled = BytesIO()
    write_mo(compiled, catalog)  # fuzzy entries are left out: the msgid shows instead
    compiled.seek(0)
    return gettext.GNUTranslations(compiled)
