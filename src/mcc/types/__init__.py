"""MCC topic types, generated from ``idl/mcc.idl`` (see ``mcc.types.generate``)."""

from mcc.types import _octets  # noqa: F401  (must precede the generated types)
from mcc.types._mcc import *  # noqa: F403
from mcc.types._mcc import __all__ as __all__
