"""Let ``bytes`` fields stand for IDL ``sequence<octet>`` in XTypes type objects.

cyclonedds-python (de)serialises a ``bytes`` field as one block (the fast path MCC relies
on for packed numeric arrays, docs/architecture.md) but its XTypes builder (11.0.1) cannot describe
``bytes`` and so refuses to create the topic. The wire encoding of ``bytes`` and of
``sequence<octet>`` is identical, so the builder is told to describe ``bytes`` as
``sequence<octet>``. ``tests/types/test_idl.py`` proves the resulting type hashes equal those
the C ``idlc`` computes for ``idl/mcc.idl``.
"""

from typing import Any

__all__ = ["describe_bytes_as_octets"]

import cyclonedds.idl.types as idl_types
from cyclonedds.idl._xt_builder import XTBuilder

_OCTET_SEQUENCE = idl_types.sequence[idl_types.byte].__metadata__[0]  # type: ignore[misc]
_original = XTBuilder._xt_type_identifier.__func__  # type: ignore[attr-defined]


def _type_identifier(cls: type, name: str, entity: Any, minimal: bool) -> Any:
    if entity is bytes:
        entity = _OCTET_SEQUENCE
    return _original(cls, name, entity, minimal)


def describe_bytes_as_octets() -> None:
    """Tell cyclonedds' XTypes builder that ``bytes`` is ``sequence<octet>`` (once per
    process; `mcc.types` does it before defining the topic types)."""
    if not getattr(XTBuilder, "_mcc_octets", False):
        XTBuilder._xt_type_identifier = classmethod(_type_identifier)  # type: ignore[method-assign,assignment]
        XTBuilder._mcc_octets = True  # type: ignore[attr-defined]
