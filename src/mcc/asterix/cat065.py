"""CAT065 SDPS service status messages (edition 1.4), written with libasterix and read back.

MCC sends an SDPS status (I065/000 = 1) every status period, with I065/040's NOGO saying
whether the picture is operational (0) or degraded (1: no air picture for a while), and an end
of batch (I065/000 = 2, batch number I065/020) after the CAT062 records of each update.
"""

from __future__ import annotations

from typing import Any

from mcc.asterix.editions import spec

__all__ = ["END_OF_BATCH", "NOGO_DEGRADED", "NOGO_OPERATIONAL", "SDPS_STATUS", "decode_status",
           "encode_status"]  # fmt: skip

SDPS_STATUS, END_OF_BATCH = 1, 2
NOGO_OPERATIONAL, NOGO_DEGRADED = 0, 1


def encode_status(
    *,
    sac: int,
    sic: int,
    service_id: int,
    tod_units: int,
    kind: int = SDPS_STATUS,
    batch: int | None = None,
    nogo: int = NOGO_OPERATIONAL,
    overload: bool = False,
) -> bytes:
    """One CAT065 block: an SDPS status (``kind`` 1, with I065/040) or an end of batch
    (``kind`` 2, with ``batch`` modulo 256)."""
    cat = spec(65)
    items: dict[str, Any] = {
        "010": (("SAC", sac), ("SIC", sic)),
        "000": kind,
        "015": service_id,
        "030": tod_units,
    }
    if kind == SDPS_STATUS:
        # NOGO, OVL, TSV (time source valid), PSS (SDPS-1 selected), STTN, spare
        items["040"] = (("NOGO", nogo), ("OVL", int(overload)), ("TSV", 0), ("PSS", 1), 0, 0)
    if batch is not None:
        items["020"] = batch % 256
    return bytes(cat.create([cat.cv_record.create(items)]).unparse().to_bytes())


def decode_status(data: bytes) -> list[dict[str, Any]]:
    """The CAT065 records of a datagram as plain values (libasterix's own parser)."""
    from asterix.base import Bits, RawDatablock

    cat = spec(65)
    blocks = RawDatablock.parse(Bits.from_bytes(data))
    if isinstance(blocks, ValueError):
        raise blocks
    out = []
    for block in blocks:
        if block.get_category() != 65:
            continue
        records = cat.cv_uap.parse(block.get_raw_records())
        if isinstance(records, ValueError):
            raise records
        for rec in records:
            values: dict[str, Any] = {"kind": rec.get_item("000").as_uint()}
            i010 = rec.get_item("010").variation
            values["sac"] = i010.get_item("SAC").as_uint()
            values["sic"] = i010.get_item("SIC").as_uint()
            for name, key in (("015", "service_id"), ("020", "batch")):
                found = rec.get_item(name)
                values[key] = None if found is None else found.as_uint()
            found = rec.get_item("030")
            values["tod_s"] = None if found is None else found.variation.content.as_quantity("s")
            found = rec.get_item("040")
            values["nogo"] = None if found is None else found.variation.get_item("NOGO").as_uint()
            out.append(values)
    return out
