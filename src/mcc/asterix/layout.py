"""Record layouts of ASTERIX category editions, compiled from libasterix's specifications.

libasterix (``asterix.generated``, MIT) holds every category edition as classes: the UAP, each
item's variation (element, group, extended, repetitive, explicit, compound), bit sizes, LSBs,
units and signedness, generated from EUROCONTROL's specifications (asterix-specs). Its own
parser builds an object per bit string and decodes about 5 000 CAT048 reports per second on
one core (`mcc bench asterix` measures it). A radar gateway must do better than 20 000, so
this module reads libasterix's specification once and compiles it into

- `RecordLayout`: how long each item of a record is (the six ASTERIX variations, the FSPEC
  chain and its edition limit), walked over the bytes with no object per item, and
- `Field`: where one subitem sits in its item (byte, shift, mask, signedness, LSB, unit),
  checked against the unit the caller expects, so an edition with another scale fails loudly.

Nothing here knows a category by heart: the layout is libasterix's. The structural rules are
libasterix's strict parsing rules (an FSPEC longer than the edition's is refused, a bit for a
spare item is refused, an explicit item of length 0 is refused, an extended item whose last
defined extent has its FX bit set is refused), and tests/asterix check record for record that
this walker and libasterix's parser accept and reject the same blocks and read the same values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Field", "FormatProblem", "RecordLayout", "compile_layout", "variation_of"]

FIXED, EXTENDED, REPETITIVE, REPETITIVE_FX, EXPLICIT, COMPOUND = range(6)

# The FRN offsets (0..6) whose bits are set in an FSPEC octet, most significant first.
_FSPEC_BITS = tuple(tuple(j for j in range(7) if octet & (0x80 >> j)) for octet in range(256))


class FormatProblem(Exception):
    """Why bytes are not a record of the layout: ``cause`` (a short key counted in the
    gateway's metrics: truncated, fspec, item, malformed) and a detail for the log."""

    def __init__(self, cause: str, detail: str) -> None:
        super().__init__(f"{cause}: {detail}")
        self.cause = cause
        self.detail = detail


def variation_of(non_spare: Any) -> Any:
    """The variation class of a libasterix ``NonSpare`` (a context-dependent rule: its default
    structure, as libasterix parses it)."""
    rule = non_spare.cv_rule
    variation = getattr(rule, "cv_variation", None)
    return variation if variation is not None else rule.cv_default_variation


def _shape(variation: Any) -> tuple[Any, ...]:
    """The length rule of one variation: a tuple whose first element is its kind."""
    from asterix import base

    if issubclass(variation, base.Element | base.Group):
        bits = variation.cv_bit_size
        if bits % 8:
            raise ValueError(f"{variation.__name__}: {bits} bits is not whole octets")
        return (FIXED, bits // 8)
    if issubclass(variation, base.Extended):
        sizes = []
        for group in variation.cv_items_list:
            bits = sum(entry[1] for entry in group if entry is not None) + (group[-1] is None)
            if bits % 8:
                raise ValueError(f"{variation.__name__}: an extent of {bits} bits")
            sizes.append(bits // 8)
        last_has_fx = variation.cv_items_list[-1][-1] is None
        return (EXTENDED, tuple(sizes), last_has_fx)
    if issubclass(variation, base.Repetitive):
        element = variation.cv_variation
        if not issubclass(element, base.Element | base.Group):
            raise ValueError(f"{variation.__name__}: a repetition of a variable-size item")
        if variation.cv_rep_bytes is None:  # each element followed by its FX bit
            bits = element.cv_bit_size + 1
            if bits % 8:
                raise ValueError(f"{variation.__name__}: FX repetition of {bits} bits")
            return (REPETITIVE_FX, bits // 8)
        return (REPETITIVE, variation.cv_rep_bytes, _shape(element)[1])
    if issubclass(variation, base.Explicit):
        return (EXPLICIT,)
    if issubclass(variation, base.Compound):
        subs = tuple(
            None if nsp is None else _shape(variation_of(nsp)) for nsp in variation.cv_items_list
        )
        return (COMPOUND, variation.cv_fspec_max_bytes, subs)
    raise ValueError(f"{variation.__name__}: a variation this walker does not know")


def _end(shape: tuple[Any, ...], data: bytes, pos: int, end: int) -> int:
    """Where the item of ``shape`` starting at ``pos`` ends (``FormatProblem`` when it does not
    fit before ``end`` or breaks its variation's rules)."""
    kind = shape[0]
    if kind == FIXED:
        pos += shape[1]
        if pos > end:
            raise FormatProblem("truncated", "an item past the end of its record's block")
        return pos
    if kind == EXTENDED:
        sizes = shape[1]
        last = len(sizes) - 1
        for k, size in enumerate(sizes):
            pos += size
            if pos > end:
                raise FormatProblem("truncated", "an extended item past the end of its block")
            if k == last:
                if shape[2] and data[pos - 1] & 1:
                    raise FormatProblem("malformed", "FX set in an extended item's last extent")
                return pos
            if not data[pos - 1] & 1:
                return pos
        return pos
    if kind == REPETITIVE:
        count_bytes, size = shape[1], shape[2]
        if pos + count_bytes > end:
            raise FormatProblem("truncated", "a repetition count past the end of its block")
        count = int.from_bytes(data[pos : pos + count_bytes], "big")
        pos += count_bytes + count * size
        if pos > end:
            raise FormatProblem("truncated", f"{count} repetitions past the end of the block")
        return pos
    if kind == REPETITIVE_FX:
        size = shape[1]
        while True:
            pos += size
            if pos > end:
                raise FormatProblem("truncated", "a repetitive item past the end of its block")
            if not data[pos - 1] & 1:
                return pos
    if kind == EXPLICIT:
        if pos >= end:
            raise FormatProblem("truncated", "an explicit item's length past the block")
        length = data[pos]
        if length == 0:
            raise FormatProblem("malformed", "an explicit item of length 0")
        pos += length
        if pos > end:
            raise FormatProblem("truncated", f"an explicit item of {length} octets past the block")
        return pos
    return _compound_end(shape, data, pos, end)  # COMPOUND


def _compound_fspec(
    shape: tuple[Any, ...], data: bytes, pos: int, end: int
) -> tuple[list[int], int]:
    """The subitem indices a compound's FSPEC sets, and where its first subitem starts."""
    fspec_max, subs = shape[1], shape[2]
    present: list[int] = []
    start = pos
    while True:
        if pos >= end:
            raise FormatProblem("truncated", "a compound item's FSPEC past the block")
        octet = data[pos]
        base = 7 * (pos - start)
        pos += 1
        for j in _FSPEC_BITS[octet]:
            index = base + j
            if index >= len(subs) or subs[index] is None:
                raise FormatProblem("item", f"a compound subitem {index + 1} the edition lacks")
            present.append(index)
        if not octet & 1:
            return present, pos
        if pos - start >= fspec_max:
            raise FormatProblem("fspec", f"a compound FSPEC longer than {fspec_max} octets")


def _compound_items(
    shape: tuple[Any, ...], data: bytes, pos: int, end: int
) -> list[tuple[int, int]]:
    """``(subitem index, start)`` of each subitem of the compound item at ``pos``."""
    present, pos = _compound_fspec(shape, data, pos, end)
    out = []
    subs = shape[2]
    for index in present:
        out.append((index, pos))
        pos = _end(subs[index], data, pos, end)
    return out


def _compound_end(shape: tuple[Any, ...], data: bytes, pos: int, end: int) -> int:
    present, pos = _compound_fspec(shape, data, pos, end)
    subs = shape[2]
    for index in present:
        pos = _end(subs[index], data, pos, end)
    return pos


@dataclass(frozen=True)
class Field:
    """One subitem of a record: where it sits and how its bits read.

    ``item`` is the UAP index (FRN − 1); ``sub`` the compound subitem index (−1: none);
    ``offset``/``size`` the octets holding it from the start of its item (or subitem);
    ``shift``/``mask`` its bits there; ``signed_bits`` its two's-complement width (0:
    unsigned); ``lsb`` its scale in ``unit``.
    """

    name: str
    item: int
    sub: int
    offset: int
    size: int
    shift: int
    mask: int
    signed_bits: int
    lsb: float
    unit: str

    def raw(self, data: bytes, start: int) -> int:
        """The subitem's integer at item start ``start`` (sign applied)."""
        p = start + self.offset
        value = (int.from_bytes(data[p : p + self.size], "big") >> self.shift) & self.mask
        if self.signed_bits and value >> (self.signed_bits - 1):
            value -= 1 << self.signed_bits
        return value

    def value(self, data: bytes, start: int) -> float:
        """The subitem as a quantity in ``unit``."""
        return self.raw(data, start) * self.lsb


class RecordLayout:
    """The record structure of one libasterix category edition (single UAP), compiled.

    `walk` splits one record into item start offsets; `field` compiles a subitem reader. Both
    raise nothing but `FormatProblem` on any bytes.
    """

    def __init__(self, spec: Any) -> None:
        from asterix import base

        self.spec = spec
        self.category: int = spec.cv_category
        self.edition: tuple[int, int] = (spec.cv_edition[0], spec.cv_edition[1])
        uap = spec.cv_uap
        if not issubclass(uap, base.UapSingle):
            raise ValueError(f"CAT{self.category:03d}: several UAPs are not supported")
        record = uap.cv_record
        self.fspec_max: int = record.cv_fspec_max_bytes
        self.names: list[str | None] = []
        self.shapes: list[tuple[Any, ...] | None] = []
        self._variations: dict[str, Any] = {}
        for entry in record.cv_items_list:
            if issubclass(entry, base.UapItem):
                nsp = entry.cv_non_spare
                variation = variation_of(nsp)
                self.names.append(nsp.cv_name)
                self.shapes.append(_shape(variation))
                self._variations[nsp.cv_name] = variation
            else:  # a spare FRN (or random field sequencing, which these categories lack)
                self.names.append(None)
                self.shapes.append(None)
        self.index = {name: i for i, name in enumerate(self.names) if name is not None}

    @property
    def size(self) -> int:
        return len(self.shapes)

    def walk(self, data: bytes, pos: int, end: int, starts: list[int], ends: list[int]) -> int:
        """Read the record at ``pos`` (its block ends at ``end``): ``starts[i]`` and
        ``ends[i]`` become the bounds of item ``i`` (both must come in as ``[-1] * size``);
        returns where the record ends. `FormatProblem` when it is not a whole, well-formed
        record of this edition."""
        shapes = self.shapes
        fspec_start = pos
        fspec_max = self.fspec_max
        frns: list[int] = []
        while True:
            if pos >= end:
                raise FormatProblem("truncated", "an FSPEC past the end of its block")
            octet = data[pos]
            base = 7 * (pos - fspec_start)
            pos += 1
            for j in _FSPEC_BITS[octet]:
                frns.append(base + j)
            if not octet & 1:
                break
            if pos - fspec_start >= fspec_max:
                raise FormatProblem("fspec", f"an FSPEC longer than the {fspec_max} octets")
        n = len(shapes)
        for index in frns:
            shape = shapes[index] if index < n else None
            if shape is None:
                raise FormatProblem("item", f"FRN {index + 1}, an item the edition lacks")
            starts[index] = pos
            pos = ends[index] = _end(shape, data, pos, end)
        return pos

    def sub_start(self, shape_index: int, sub: int, data: bytes, start: int, end: int) -> int:
        """Where compound subitem ``sub`` of item ``shape_index`` starts (−1: absent)."""
        shape = self.shapes[shape_index]
        assert shape is not None and shape[0] == COMPOUND
        for index, pos in _compound_items(shape, data, start, end):
            if index == sub:
                return pos
        return -1

    def field(self, path: str, unit: str = "") -> Field:
        """A reader of subitem ``path`` ("040/RHO", "130/PAM", "020/FOEFRI", "140") whose
        quantity is in ``unit`` ("" for a raw, table or string content); ``ValueError`` when
        the edition has no such subitem or gives it another unit."""
        from asterix import base

        item_name, *rest = path.split("/")
        if item_name not in self.index:
            raise ValueError(f"CAT{self.category:03d}: no item {item_name}")
        item = self.index[item_name]
        variation = self._variations[item_name]
        sub = -1
        if rest and issubclass(variation, base.Compound):
            names = [None if n is None else n.cv_name for n in variation.cv_items_list]
            if rest[0] not in names:
                raise ValueError(f"I{self.category:03d}/{item_name}: no subitem {rest[0]}")
            sub = names.index(rest[0])
            variation = variation_of(variation.cv_items_list[sub])
            rest = rest[1:]
        bit, bits, element = _locate(variation, rest, path)
        rule = element.cv_rule
        content = getattr(rule, "cv_content", None) or rule.cv_default_content
        lsb, found_unit, signed_bits = 1.0, "", 0
        if issubclass(content, base.ContentQuantity):
            lsb, found_unit = float(content.cv_lsb), content.cv_unit
            signed_bits = bits if issubclass(content.cv_signedness, base.Signed) else 0
        elif issubclass(content, base.ContentInteger):
            signed_bits = bits if issubclass(content.cv_signedness, base.Signed) else 0
        if found_unit != unit:
            raise ValueError(f"{path}: libasterix gives it in {found_unit!r}, not {unit!r}")
        first, last = bit // 8, (bit + bits - 1) // 8
        size = last - first + 1
        return Field(
            name=path,
            item=item,
            sub=sub,
            offset=first,
            size=size,
            shift=8 * size - (bit - 8 * first) - bits,
            mask=(1 << bits) - 1,
            signed_bits=signed_bits,
            lsb=lsb,
            unit=found_unit,
        )


def _locate(variation: Any, path: list[str], full: str) -> tuple[int, int, Any]:
    """(bit offset from the item's first bit, bit size, the Element) of ``path`` inside
    ``variation`` (groups and extended items; an element is its own path)."""
    from asterix import base

    if issubclass(variation, base.Element):
        if path:
            raise ValueError(f"{full}: {path[0]} inside an element")
        return 0, variation.cv_bit_size, variation
    if not path:
        raise ValueError(f"{full}: name a subitem of this {variation.__mro__[1].__name__}")
    name = path[0]
    if issubclass(variation, base.Group):
        entries = [(entry, size) for entry, size in variation.cv_items_list]
    elif issubclass(variation, base.Extended):
        entries = []
        for group in variation.cv_items_list:
            for entry in group:
                entries.append((None, 1) if entry is None else entry)  # FX: one bit
    else:
        raise ValueError(f"{full}: a {variation.__mro__[1].__name__} is not read by field")
    bit = 0
    for entry, size in entries:
        if entry is not None and issubclass(entry, base.Item):
            nsp = entry.cv_non_spare
            if nsp.cv_name == name:
                inner = variation_of(nsp)
                sub_bit, sub_bits, element = _locate(inner, path[1:], full)
                return bit + sub_bit, sub_bits, element
        bit += size
    raise ValueError(f"{full}: no subitem {name}")


def compile_layout(spec: Any) -> RecordLayout:
    """`RecordLayout` of libasterix category edition ``spec`` (e.g. ``Cat_048_1_32``)."""
    return RecordLayout(spec)
