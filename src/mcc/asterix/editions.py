"""The ASTERIX category editions MCC reads and writes, as libasterix classes and compiled layouts.

CAT048 1.32 and CAT034 1.29 are read (the latest libasterix has: a radar of an older edition
sends a subset of their items, the same layout); CAT048 is written in items whose layout has not
changed since 1.21. CAT062 is written in 1.18 and CAT065 in 1.4, the editions most centres
read (docs/asterix.md). libasterix's ``generated`` module holds every category and costs about
0.7 s and 80 MB to import, so it is imported on first use, and its objects are then moved out of
the garbage collector's sight (``gc.freeze``): a full collection would otherwise walk its tens of
thousands of classes every few hundred allocations of the hot path.
"""

from __future__ import annotations

import functools
import gc
from typing import Any

from mcc.asterix.layout import RecordLayout

__all__ = ["EDITIONS", "layout", "libasterix", "spec"]

#: Category → libasterix class name of the edition MCC uses.
EDITIONS = {
    34: "Cat_034_1_29",
    48: "Cat_048_1_32",
    62: "Cat_062_1_18",
    65: "Cat_065_1_4",
}


@functools.cache
def libasterix() -> Any:
    """The ``asterix.generated`` module of libasterix (imported once)."""
    import asterix.generated as generated

    gc.freeze()
    return generated


def spec(category: int) -> Any:
    """The libasterix class of ``category``'s edition (`EDITIONS`)."""
    return getattr(libasterix(), EDITIONS[category])


@functools.cache
def layout(category: int) -> RecordLayout:
    """The compiled record layout of ``category``'s edition."""
    return RecordLayout(spec(category))


def edition_text(category: int) -> str:
    """``CAT048 1.32``."""
    major, minor = spec(category).cv_edition
    return f"CAT{category:03d} {major}.{minor}"
