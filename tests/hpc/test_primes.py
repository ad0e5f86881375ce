"""The primes kernel against an independent reference: a plain-Python sieve."""

from __future__ import annotations

import pytest

from mcc.errors import MccError
from mcc.hpc.primes import PrimeCount, PrimeScan, base_primes, count_primes, isqrt, split_range


def reference(n: int) -> tuple[int, int]:
    """(count, largest) of the primes <= n: a plain-Python sieve of Eratosthenes, no NumPy."""
    if n < 2:
        return 0, 0
    flags = bytearray([1]) * (n + 1)
    flags[0] = flags[1] = 0
    i = 2
    while i * i <= n:
        if flags[i]:
            for multiple in range(i * i, n + 1, i):
                flags[multiple] = 0
        i += 1
    primes = [k for k in range(n + 1) if flags[k]]
    return len(primes), primes[-1]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 10, 97, 100, 1000, 7919, 65_536, 250_001])
@pytest.mark.parametrize("items", [1, 3, 16])
def test_farm_chunks_add_up_to_the_reference(n: int, items: int) -> None:
    base = base_primes(isqrt(n))
    total = PrimeCount()
    for lo, hi in split_range(n, items):
        total = total + count_primes(lo, hi, base, segment_numbers=4_096)
    assert (total.count, total.largest) == reference(n)


def test_split_range_covers_one_to_n_once() -> None:
    ranges = split_range(1_000_003, 7)
    assert ranges[0][0] == 1 and ranges[-1][1] == 1_000_004
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    assert max(hi - lo for lo, hi in ranges) - min(hi - lo for lo, hi in ranges) <= 1
    assert split_range(3, 10) == [(1, 2), (2, 3), (3, 4)]  # never an empty item


def test_a_scan_resumed_from_its_packed_state_finishes_like_an_uninterrupted_one() -> None:
    base = base_primes(isqrt(300_000))
    whole = count_primes(100_000, 300_001, base, segment_numbers=10_000)
    scan = PrimeScan(100_000, 300_001, segment_numbers=10_000)
    steps = scan.run(base)
    for _ in range(7):
        next(steps)
    state = scan.pack()  # a checkpoint after 7 segments; the process dies here
    resumed = PrimeScan.unpack(state, segment_numbers=10_000)
    assert resumed.next_lo == 170_000 and not resumed.finished
    for _ in resumed.run(base):
        pass
    assert resumed.total == whole
    assert whole.count == reference(300_000)[0] - reference(99_999)[0]


def test_bad_parameters_name_the_value() -> None:
    with pytest.raises(MccError, match="n = 0"):
        split_range(0, 4)
    with pytest.raises(MccError, match="items = 0"):
        split_range(10, 0)
    with pytest.raises(MccError, match=r"\[5, 3\)"):
        PrimeScan(5, 3)
    with pytest.raises(MccError, match="40"):
        PrimeScan.unpack(b"short")
