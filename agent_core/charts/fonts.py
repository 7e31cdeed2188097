"""A font for Chinese text in charts.

The project depends on ``noto-cjk-sans-otc``, a wheel that ships Noto Sans CJK (SIL OFL) as a
file inside the package, so nothing is downloaded at run time; it is registered with
matplotlib's font manager when this module is imported. Fonts already on the machine
(matplotlib's font list, then fontconfig) are the fallback if that package is missing.
"""

from __future__ import annotations

import logging
import shutil
import subprocess

from matplotlib import font_manager

log = logging.getLogger(__name__)

# Families able to show Simplified Chinese, best first. Noto Sans CJK SC comes with the
# noto-cjk-sans-otc dependency; the others are common system fonts (Debian, macOS, Windows).
CJK_FAMILIES: tuple[str, ...] = (
    "Noto Sans CJK SC",
    "Source Han Sans SC",
    "Noto Sans SC",
    "WenQuanYi Micro Hei",
    "WenQuanYi Zen Hei",
    "Microsoft YaHei",
    "PingFang SC",
    "SimHei",
    # matplotlib < 3.11 only sees the first face of a .ttc collection: the JP face of the
    # bundled font, whose Han glyphs still cover Chinese.
    "Noto Sans CJK JP",
)
# Characters every chart label in Chinese is likely to need; a font must have all of them.
CJK_PROBE_TEXT = "销售额订单数环比同比增长华东华北华南西部中部地区渠道品类月份合计其他"


def font_covers(family: str, text: str) -> bool:
    """True if the font matplotlib uses for ``family`` has a real glyph for every character.

    A missing glyph has index 0 (".notdef"), which is what renders as a tofu box.
    """
    try:
        path = font_manager.findfont(
            font_manager.FontProperties(family=family), fallback_to_default=False
        )
    except ValueError:
        return False
    font = font_manager.get_font(path)
    return all(font.get_char_index(ord(ch)) != 0 for ch in text if not ch.isspace())


def _register_bundled_font() -> None:
    try:
        import noto_cjk_sans_otc
    except ImportError:
        return
    try:
        font_manager.fontManager.addfont(str(noto_cjk_sans_otc.FONT_PATH))
    except (OSError, RuntimeError) as exc:  # an unreadable or truncated font file
        log.warning("could not load the bundled CJK font: %s", exc)


def _fontconfig_cjk_families() -> list[str]:
    """Register fonts fontconfig reports for Chinese and return their family names.

    Needed because matplotlib caches its system font list: a font installed after the cache
    was built (e.g. ``apt-get install fonts-wqy-microhei``) is otherwise invisible to it.
    """
    fc_list = shutil.which("fc-list")
    if fc_list is None:
        return []
    try:
        listing = subprocess.run(
            [fc_list, ":lang=zh", "file"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    families: list[str] = []
    for path in sorted({line.split(":")[0].strip() for line in listing.splitlines()} - {""}):
        try:
            font_manager.fontManager.addfont(path)
            families.append(font_manager.get_font(path).family_name)
        except (OSError, RuntimeError, ValueError):
            continue
    return families


def _find_cjk_family() -> str | None:
    _register_bundled_font()
    known = {entry.name for entry in font_manager.fontManager.ttflist}
    for family in CJK_FAMILIES:
        if family in known and font_covers(family, CJK_PROBE_TEXT):
            return family
    for family in _fontconfig_cjk_families():
        if font_covers(family, CJK_PROBE_TEXT):
            return family
    log.warning(
        "no CJK font found: Chinese text in charts will show as boxes; install the "
        "noto-cjk-sans-otc package (or Debian's fonts-wqy-microhei)"
    )
    return None


CJK_FONT_FAMILY: str | None = _find_cjk_family()
