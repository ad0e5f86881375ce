"""ASTERIX time of day (seconds since UTC midnight, LSB 1/128 s) and Unix nanoseconds.

A time of day names no date: it is placed in the day that puts it nearest a reference instant
(the receiving clock, or the capture time of a recording), so a plot seen at 23:59:59.9 and
received at 00:00:00.1 lands on the day before.
"""

from __future__ import annotations

__all__ = ["DAY_NS", "TOD_UNITS_PER_S", "tod_units", "unix_ns"]

DAY_NS = 86_400 * 1_000_000_000
TOD_UNITS_PER_S = 128
_NS_PER_UNIT = 1_000_000_000 // TOD_UNITS_PER_S  # 7 812 500 ns: exact


def unix_ns(tod_s: float, near_ns: int) -> int:
    """The Unix time (ns) of time of day ``tod_s`` on the day that puts it nearest ``near_ns``."""
    units = round(tod_s * TOD_UNITS_PER_S)
    midnight = near_ns - near_ns % DAY_NS
    t = midnight + units * _NS_PER_UNIT
    if t - near_ns > DAY_NS // 2:
        t -= DAY_NS
    elif near_ns - t > DAY_NS // 2:
        t += DAY_NS
    return t


def tod_units(t_ns: int) -> int:
    """Time of day of Unix time ``t_ns`` in 1/128 s (rounded; 0 ≤ value < 86400·128)."""
    units = round((t_ns % DAY_NS) / _NS_PER_UNIT)
    return units % (86_400 * TOD_UNITS_PER_S)
