"""MCC topic types, generated from ``idl/mcc.idl`` (see ``mcc.types.generate``)."""

from mcc.types.octets import describe_bytes_as_octets

describe_bytes_as_octets()  # before the generated types: their topics need it

from mcc.types._mcc import *  # noqa: E402, F403
from mcc.types._mcc import __all__ as __all__  # noqa: E402
