"""The primes kernel: count the primes in a range and find the largest, by segmented sieve.

The same functions run in the DDS task farm (``mcc.hpc.farm``) and in the MPI baseline
(``mcc.hpc.mpi``), with the same chunking (``split_range``), so the two differ only in how
work items and results travel.

>>> base = base_primes(isqrt(100))
>>> count_primes(1, 101, base)
PrimeCount(count=25, largest=97)

The sieve marks odd numbers only (2 is counted apart), one segment of ``segment_numbers`` at a
time so the marks stay in cache; ``PrimeScan`` walks an item segment by segment and can stop
and resume between segments: the state a worker's ``Checkpoint`` carries.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from math import isqrt

import numpy as np

from mcc.errors import MccError

__all__ = [
    "DEFAULT_SEGMENT_NUMBERS",
    "PrimeCount",
    "PrimeScan",
    "base_primes",
    "count_primes",
    "isqrt",
    "split_range",
]

#: Numbers per sieve segment: 2^21 numbers are 2^20 odd flags, 1 MiB of bools (fits L2).
DEFAULT_SEGMENT_NUMBERS = 1 << 21


@dataclass(frozen=True)
class PrimeCount:
    """How many primes a range holds and the largest of them (0 when none)."""

    count: int = 0
    largest: int = 0

    def __add__(self, other: PrimeCount) -> PrimeCount:
        return PrimeCount(self.count + other.count, max(self.largest, other.largest))


def base_primes(limit: int) -> np.ndarray:
    """The primes ≤ ``limit`` (int64), by a plain sieve of Eratosthenes."""
    if limit < 2:
        return np.zeros(0, dtype=np.int64)
    flags = np.ones(limit + 1, dtype=bool)
    flags[:2] = False
    flags[4::2] = False
    for p in range(3, isqrt(limit) + 1, 2):
        if flags[p]:
            flags[p * p :: 2 * p] = False
    return np.flatnonzero(flags).astype(np.int64)


def _sieve_segment(lo: int, hi: int, odd_base: np.ndarray) -> PrimeCount:
    """Primes in [lo, hi) for odd ``lo`` ≥ 1, given the odd base primes up to √(hi-1)."""
    m = (hi - lo + 1) // 2  # odd numbers lo, lo+2, … < hi
    if m <= 0:
        return PrimeCount()
    flags = np.ones(m, dtype=bool)
    if lo == 1:
        flags[0] = False  # 1 is not prime
    for p in odd_base.tolist():
        pp = p * p
        if pp >= hi:
            break
        start = max(pp, -(-lo // p) * p)
        if start % 2 == 0:
            start += p
        flags[(start - lo) // 2 :: p] = False
    found = np.flatnonzero(flags)
    if found.size == 0:
        return PrimeCount()
    return PrimeCount(int(found.size), lo + 2 * int(found[-1]))


def count_primes(
    lo: int, hi: int, base: np.ndarray, *, segment_numbers: int = DEFAULT_SEGMENT_NUMBERS
) -> PrimeCount:
    """Primes in [``lo``, ``hi``); ``base`` must hold every prime ≤ √(hi-1) (``base_primes``)."""
    scan = PrimeScan(lo, hi, segment_numbers=segment_numbers)
    for _ in scan.run(base):
        pass
    return scan.total


@dataclass
class PrimeScan:
    """A resumable scan of [lo, hi): ``next_lo`` is where it stands, ``total`` what it found.

    ``run`` yields after each segment, so the caller can checkpoint (``pack``) or stop; a
    scan rebuilt with ``unpack`` continues where the packed one stood.
    """

    lo: int
    hi: int
    next_lo: int = -1
    total: PrimeCount = PrimeCount()
    segment_numbers: int = DEFAULT_SEGMENT_NUMBERS

    _FORMAT = "<qqqqq"  # lo, hi, next_lo, count, largest

    def __post_init__(self) -> None:
        if self.lo < 0 or self.hi < self.lo:
            raise MccError(f"prime scan [{self.lo}, {self.hi}): need 0 <= lo <= hi")
        if self.segment_numbers < 2:
            raise MccError(f"segment_numbers = {self.segment_numbers}: must be >= 2")
        if self.next_lo < 0:
            self.next_lo = self.lo

    @property
    def finished(self) -> bool:
        return self.next_lo >= self.hi

    def run(self, base: np.ndarray) -> Iterator[PrimeScan]:
        """Sieve segment after segment, yielding ``self`` after each one."""
        odd_base = base[base > 2]
        while not self.finished:
            start = self.next_lo
            end = min(start + self.segment_numbers, self.hi)
            found = PrimeCount(1, 2) if start <= 2 < end else PrimeCount()
            odd_lo = max(start | 1, 1)
            found = found + _sieve_segment(odd_lo, end, odd_base)
            self.total = self.total + found
            self.next_lo = end
            yield self

    def pack(self) -> bytes:
        """The scan's state as 40 bytes (a ``Checkpoint.state``)."""
        return struct.pack(
            self._FORMAT, self.lo, self.hi, self.next_lo, self.total.count, self.total.largest
        )

    @classmethod
    def unpack(cls, data: bytes, *, segment_numbers: int = DEFAULT_SEGMENT_NUMBERS) -> PrimeScan:
        """The scan ``pack`` wrote; ``MccError`` if ``data`` is not one."""
        if len(data) != struct.calcsize(cls._FORMAT):
            raise MccError(f"prime scan state: {len(data)} bytes, expected 40")
        lo, hi, next_lo, count, largest = struct.unpack(cls._FORMAT, data)
        # A state read back from the bus is checked like any input: a resumed scan must be
        # one that this code could have packed.
        if not (0 <= lo <= next_lo <= hi and 0 <= count <= next_lo - lo):
            raise MccError(
                f"prime scan state [{lo}, {hi}) at {next_lo} with {count} primes: impossible"
            )
        if (largest != 0) if count == 0 else not lo <= largest < next_lo:
            raise MccError(f"prime scan state: largest prime {largest} outside [{lo}, {next_lo})")
        return cls(lo, hi, next_lo, PrimeCount(count, largest), segment_numbers=segment_numbers)


def split_range(n: int, items: int) -> list[tuple[int, int]]:
    """[1, n] cut into ``items`` contiguous half-open ranges [lo, hi) of near-equal length."""
    if n < 1:
        raise MccError(f"n = {n}: the search range is [1, n], give n >= 1")
    if items < 1:
        raise MccError(f"items = {items}: give at least 1 work item")
    items = min(items, n)
    edges = [1 + (n * k) // items for k in range(items + 1)]
    return [(edges[k], edges[k + 1]) for k in range(items)]
