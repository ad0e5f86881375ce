"""Latency statistics: a frozen summary record and an HDR-histogram recorder that fills it.

All values are recorded in nanoseconds and reported in microseconds; the `_us` suffix in every
field name is the unit, matching the `p50_us`/`p99_us`/`max_us` keys of a benchmark row.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

import numpy as np
from hdrh.histogram import HdrHistogram

__all__ = ["CDF_PERCENTILES", "LatencyRecorder", "LatencyStats"]

LOWEST_NS = 1
HIGHEST_NS = 60 * 1_000_000_000
SIGNIFICANT_DIGITS = 3

# With 3 significant digits the histogram has 2048 (2**11) sub-buckets: values below 2048 are
# exact and each doubling above that halves the resolution (see `_quantize`).
_SUB_BUCKET_BITS = 11

CDF_PERCENTILES = (
    0.0, 1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 97.5, 99.0,
    99.5, 99.9, 99.95, 99.99, 100.0,
)  # fmt: skip
"""Where `LatencyRecorder.cdf` samples the distribution (percent)."""


@dataclasses.dataclass(frozen=True)
class LatencyStats:
    """Summary of one latency run, times in microseconds.

    `count` is the number of measured samples and `lost` the number sent but never answered.
    `stdev_us`, `stderr_us` and `p999_us` are None when the source (an anchor tool's summary)
    does not report them.
    """

    count: int
    lost: int
    mean_us: float
    stdev_us: float | None
    stderr_us: float | None
    min_us: float
    p50_us: float
    p90_us: float
    p99_us: float
    p999_us: float | None
    max_us: float

    def as_row(self) -> dict[str, int | float | None]:
        """The fields as a benchmark-row fragment (keys are the field names)."""
        return dataclasses.asdict(self)


class LatencyRecorder:
    """Collects latency samples in nanoseconds into an HDR histogram (1 ns .. 60 s, 3 digits).

    Percentiles, mean and standard deviation all come from the histogram, so they are exact to
    within its resolution (relative error below 0.1 %).
    """

    def __init__(self) -> None:
        self._hist = HdrHistogram(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_DIGITS)

    @property
    def count(self) -> int:
        """Number of samples recorded so far."""
        return int(self._hist.get_total_count())

    def merge(self, other: LatencyRecorder) -> None:
        """Add everything `other` recorded to this recorder (e.g. one per subscriber → all)."""
        self._hist.add(other._hist)

    def encode(self) -> str:
        """The histogram as compact text (HdrHistogram's compressed base64 form), to send it
        from a benchmark process to the one that reports; `decode` reads it back exactly."""
        return bytes(self._hist.encode()).decode("ascii")

    @classmethod
    def decode(cls, text: str) -> LatencyRecorder:
        """A recorder holding the histogram that `encode` wrote."""
        recorder = cls()
        try:
            recorder._hist.add(HdrHistogram.decode(text.encode("ascii")))
        except Exception as exc:  # hdrh raises assorted errors on bad input
            raise ValueError(f"not an encoded latency histogram: {text[:40]!r} ({exc})") from exc
        return recorder

    def cdf(self, percentiles: Iterable[float] = CDF_PERCENTILES) -> list[tuple[float, float]]:
        """(percentile, µs) points of the distribution, for CDF plots; 0 and 100 are min, max."""
        h = self._hist
        if h.get_total_count() == 0:
            raise ValueError("no latency samples recorded; cannot compute a CDF")
        qs = list(percentiles)
        if bad := [q for q in qs if not 0.0 <= q <= 100.0]:
            raise ValueError(f"percentile {bad[0]} is outside 0 .. 100")
        # One pass over the buckets for all of them (`get_value_at_percentile` walks them once
        # per percentile), nearest rank as it.
        ns = h.get_percentile_to_value_dict(qs)
        return [(float(q), (h.get_min_value() if q == 0 else ns[q]) / 1e3) for q in qs]

    def record_ns(self, value: int) -> None:
        """Record one latency of `value` nanoseconds (0 .. 60 s)."""
        self._record(int(value), 1)

    def record_many_ns(self, values: Iterable[int] | np.ndarray) -> None:
        """Record many latencies in nanoseconds (an iterable or an integer/float numpy array)."""
        arr = np.asarray(values if isinstance(values, np.ndarray) else list(values))
        if arr.size == 0:
            return
        if arr.dtype.kind == "f":
            if not np.all(np.isfinite(arr)):
                raise ValueError("latency samples contain NaN or inf; record finite nanoseconds")
            arr = np.rint(arr)
        elif arr.dtype.kind not in "iu":
            raise TypeError(f"latency samples must be numbers, got dtype {arr.dtype}")
        arr = arr.astype(np.int64).ravel()
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi > HIGHEST_NS:
            bad = lo if lo < 0 else hi
            raise ValueError(f"latency sample {bad} ns is outside 0 .. {HIGHEST_NS} ns")
        # One histogram update per distinct bucket instead of per sample: hdrh records in pure
        # Python. Quantizing to the bucket's lowest value changes nothing the histogram reports,
        # min and max included (it reports them as bucket bounds anyway).
        levels, counts = np.unique(_quantize(arr), return_counts=True)
        for level, n in zip(levels.tolist(), counts.tolist(), strict=True):
            self._record(level, n)

    def stats(self, lost: int = 0) -> LatencyStats:
        """Summarise what was recorded; `lost` is passed through. Raises if nothing was recorded."""
        count = self.count
        if count == 0:
            raise ValueError("no latency samples recorded; cannot compute statistics")
        (_, min_us), (_, p50), (_, p90), (_, p99), (_, p999) = self.cdf((0.0, 50, 90, 99, 99.9))
        mean_ns, stdev_ns = self._mean_stdev_ns()
        stdev_us = stdev_ns / 1e3
        return LatencyStats(
            count=count,
            lost=int(lost),
            mean_us=mean_ns / 1e3,
            stdev_us=stdev_us,
            stderr_us=stdev_us / math.sqrt(count),
            min_us=min_us,
            p50_us=p50,
            p90_us=p90,
            p99_us=p99,
            p999_us=p999,
            max_us=self._hist.get_max_value() / 1e3,
        )

    def _mean_stdev_ns(self) -> tuple[float, float]:
        """Mean and population standard deviation, as `HdrHistogram.get_mean_value`/`get_stddev`.

        Same definition (each bucket counts at its median-equivalent value), but vectorised over
        the occupied buckets: hdrh's own versions walk every bucket in Python (~0.25 s each).
        """
        h = self._hist
        counts = np.ctypeslib.as_array(h.counts)
        occupied = np.flatnonzero(counts)
        lows = np.array([h.get_value_from_index(i) for i in occupied.tolist()], dtype=np.int64)
        mids = (lows + ((1 << _bucket_shift(lows)) >> 1)).astype(np.float64)
        weights = counts[occupied].astype(np.float64)
        mean = float(np.average(mids, weights=weights))
        var = float(np.average((mids - mean) ** 2, weights=weights))
        return mean, math.sqrt(var)

    def _record(self, value: int, count: int) -> None:
        # hdrh silently accepts values up to its top bucket's end (~68.7 s); hold it to 60 s.
        if not 0 <= value <= HIGHEST_NS or not self._hist.record_value(value, count):
            raise ValueError(f"latency sample {value} ns is outside 0 .. {HIGHEST_NS} ns")


def _bucket_shift(values: np.ndarray) -> np.ndarray:
    """log2 of the histogram bucket width at non-negative int64 `values`: a value of n > 11
    bits shares its bucket with the others of its n - 11 high bits (frexp's exponent is n)."""
    return np.maximum(np.frexp(values)[1] - _SUB_BUCKET_BITS, 0)


def _quantize(values: np.ndarray) -> np.ndarray:
    """Round non-negative int64 nanoseconds down to the lowest value of their histogram bucket."""
    shift = _bucket_shift(values)
    return (values >> shift) << shift
