"""The compiled record layouts against libasterix's own parser: on random records of every
variation and on thousands of corrupted blocks, they accept and refuse the same bytes, split
them into the same items and read the same values."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from asterix import base
from asterix.base import Bits, RawDatablock

from mcc.asterix.editions import EDITIONS, layout, spec
from mcc.asterix.layout import FormatProblem, RecordLayout, variation_of

CATEGORIES = sorted(EDITIONS)


def random_value(variation: Any, rng: random.Random) -> Any:
    """A random value libasterix's ``create`` takes for ``variation`` (raw integers)."""
    if issubclass(variation, base.Element):
        return rng.getrandbits(variation.cv_bit_size)
    if issubclass(variation, base.Group):
        return tuple(
            rng.getrandbits(size) if issubclass(entry, base.Item) else 0
            for entry, size in variation.cv_items_list
        )
    if issubclass(variation, base.Extended):
        groups = variation.cv_items_list[: rng.randint(1, len(variation.cv_items_list))]
        return tuple(
            tuple(
                0 if e is None else rng.getrandbits(e[1]) if issubclass(e[0], base.Item) else 0
                for e in group
            )  # fmt: skip
            for group in groups
        )
    if issubclass(variation, base.Repetitive):
        return [random_value(variation.cv_variation, rng) for _ in range(rng.randint(1, 3))]
    if issubclass(variation, base.Explicit):
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 6)))
    if issubclass(variation, base.Compound):
        subs = [nsp for nsp in variation.cv_items_list if nsp is not None]
        chosen = rng.sample(subs, rng.randint(1, len(subs)))
        return {nsp.cv_name: random_value(variation_of(nsp), rng) for nsp in chosen}
    raise AssertionError(variation)


def random_record(category: int, rng: random.Random, p_item: float = 0.5) -> Any:
    cat = spec(category)
    items = {}
    for entry in cat.cv_record.cv_items_list:
        if issubclass(entry, base.UapItem) and rng.random() < p_item:
            nsp = entry.cv_non_spare
            items[nsp.cv_name] = random_value(variation_of(nsp), rng)
    return cat.cv_record.create(items)


def random_block(category: int, rng: random.Random, records: int) -> bytes:
    cat = spec(category)
    return bytes(
        cat.create([random_record(category, rng) for _ in range(records)]).unparse().to_bytes()
    )


def ours(lay: RecordLayout, body: bytes) -> list[dict[str, bytes]] | None:
    """Each record's items as ``{name: octets}`` by the compiled layout; None: refused."""
    out = []
    pos = 0
    try:
        while pos < len(body):
            starts, ends = [-1] * lay.size, [-1] * lay.size
            pos = lay.walk(body, pos, len(body), starts, ends)
            out.append(
                {lay.names[i]: body[s : ends[i]] for i, s in enumerate(starts) if s >= 0}  # type: ignore[misc]
            )
    except FormatProblem:
        return None
    return out


def theirs(category: int, body: bytes) -> list[dict[str, bytes]] | None:
    """The same by libasterix's strict parser; None: refused."""
    try:
        records = spec(category).cv_uap.parse(Bits.from_bytes(body))
    except Exception:  # an FRN past its list: libasterix raises where it should refuse
        return None
    if isinstance(records, ValueError):
        return None
    return [
        {name: item.unparse().to_bytes() for name, item in rec.items_regular.items()}
        for rec in records
    ]


@pytest.mark.parametrize("category", CATEGORIES)
def test_random_records_split_into_libasterix_items(category: int) -> None:
    rng = random.Random(category)
    lay = layout(category)
    for _ in range(150):
        block = random_block(category, rng, rng.randint(1, 4))
        body = block[3:]
        expected = theirs(category, body)
        assert expected is not None
        assert ours(lay, body) == expected


def _mutations(block: bytes, rng: random.Random) -> list[bytes]:
    body = bytearray(block[3:])
    out = []
    for _ in range(12):
        mutated = bytearray(body)
        kind = rng.randrange(5)
        if kind == 0 and mutated:  # a flipped octet
            mutated[rng.randrange(len(mutated))] ^= 1 << rng.randrange(8)
        elif kind == 1 and mutated:  # cut short
            del mutated[rng.randrange(len(mutated)) :]
        elif kind == 2:  # an octet inserted
            mutated.insert(rng.randrange(len(mutated) + 1), rng.getrandbits(8))
        elif kind == 3 and mutated:  # every FX of the first FSPEC set
            for k in range(min(len(mutated), 8)):
                mutated[k] |= 1
        else:  # random bytes
            mutated = bytearray(rng.getrandbits(8) for _ in range(rng.randint(1, 40)))
        out.append(bytes(mutated))
    return out


@pytest.mark.parametrize("category", CATEGORIES)
def test_corrupted_blocks_are_refused_exactly_when_libasterix_refuses_them(category: int) -> None:
    rng = random.Random(1000 + category)
    lay = layout(category)
    refused = accepted = 0
    for _ in range(120):
        for body in _mutations(random_block(category, rng, rng.randint(1, 3)), rng):
            expected = theirs(category, body)
            assert ours(lay, body) == expected, body.hex()
            refused += expected is None
            accepted += expected is not None
    assert refused > 200 and accepted > 100  # both outcomes were exercised


def test_each_refusal_names_its_cause() -> None:
    lay = layout(48)
    cases = {
        "fspec": bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x00]),  # an FX chain past the 4 octets
        "truncated": bytes([0x80, 0x01]),  # I048/010 needs 2 octets
        # I048/120 (FRN 20: octet 3, bit 0x04) with subitem 3 set: the edition has 2.
        "item": bytes([0x01, 0x01, 0x04, 0x20, 0x00]),
        # SP (FRN 27: octet 4, 0x04) of length 0
        "malformed": bytes([0x01, 0x01, 0x01, 0x04, 0x00]),
    }
    for cause, body in cases.items():
        with pytest.raises(FormatProblem) as info:
            lay.walk(body, 0, len(body), [-1] * lay.size, [-1] * lay.size)
        assert info.value.cause == cause, (cause, info.value)
        assert theirs(48, body) is None  # libasterix refuses it too


def _quantity(rec: Any, path: str, unit: str) -> float | int | None:
    """A subitem's value through libasterix's object API (None: absent)."""
    names = path.split("/")
    found = rec.get_item(names[0])
    if found is None:
        return None
    var = found.variation
    for name in names[1:]:
        found = var.get_item(name)
        if found is None:
            return None
        var = found.variation if hasattr(found, "variation") else found
    if unit:
        return float(var.content.as_quantity(unit))
    return int(found.as_uint())


FIELDS_048 = [
    ("010/SAC", ""), ("010/SIC", ""), ("140", "s"), ("020/TYP", ""), ("020/FOEFRI", ""),
    ("040/RHO", "NM"), ("040/THETA", "°"), ("070/MODE3A", ""), ("090/FL", "FL"),
    ("110/3DH", "ft"), ("220", ""), ("130/PAM", "dBm"), ("120/CAL/CAL", "m/s"),
]  # fmt: skip


def test_fields_read_what_libasterix_reads() -> None:
    rng = random.Random(7)
    lay = layout(48)
    fields = [(lay.field(path, unit), path, unit) for path, unit in FIELDS_048]
    compared = 0
    for _ in range(300):
        rec = random_record(48, rng, p_item=0.7)
        body = bytes(rec.unparse().to_bytes())
        starts, ends = [-1] * lay.size, [-1] * lay.size
        lay.walk(body, 0, len(body), starts, ends)
        for field, path, unit in fields:
            expected = _quantity(rec, path, unit)
            start = starts[field.item]
            if field.sub >= 0 and start >= 0:
                start = lay.sub_start(field.item, field.sub, body, start, ends[field.item])
            if start >= 0 and ends[field.item] - starts[field.item] < field.offset + field.size:
                start = -1  # an extent that is not there
            if expected is None:
                assert start < 0, path
                continue
            got = field.value(body, start) if unit else field.raw(body, start)
            assert math.isclose(got, expected, abs_tol=1e-9), (path, got, expected)
            compared += 1
    assert compared > 1500


def test_a_field_in_another_unit_is_refused() -> None:
    lay = layout(48)
    with pytest.raises(ValueError, match="040/RHO: libasterix gives it in 'NM', not 'm'"):
        lay.field("040/RHO", "m")
    with pytest.raises(ValueError, match="no subitem NOPE"):
        lay.field("040/NOPE")
    with pytest.raises(ValueError, match="no item 999"):
        lay.field("999")


def test_blocks_frame_as_libasterix_frames_them() -> None:
    from mcc.asterix.blocks import split_blocks

    rng = random.Random(3)
    data = b"".join(random_block(c, rng, 2) for c in (48, 34, 62, 65, 48))
    framing = split_blocks(data)
    raw = RawDatablock.parse(Bits.from_bytes(data))
    assert not isinstance(raw, ValueError) and framing.fault is None
    assert [(c, e - s) for c, s, e in framing.blocks] == [
        (b.get_category(), b.get_length() - 3) for b in raw
    ]
    for cut in (1, 2, len(data) - 1):
        framing = split_blocks(data[:cut] if cut < 3 else data[:-1])
        assert framing.fault is not None


def test_the_package_exports_what_it_names_and_imports_no_codec_until_used() -> None:
    import subprocess
    import sys

    import mcc.asterix

    assert all(hasattr(mcc.asterix, name) for name in mcc.asterix.__all__)
    # Importing MCC's ASTERIX costs nothing until a record is read or written: libasterix's
    # 190 000-line module stays out of processes that only import it (the radar app).
    code = "import sys, mcc.asterix, mcc.apps.radar; print('asterix.generated' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"
