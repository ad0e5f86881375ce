"""DDS Security for missions: keystore, identities, governance and permissions documents.

>>> ks = Keystore.init("keystore", mission="sam-toc")
>>> ks.write_governance(domains=(10,))
>>> radar = ks.identity("sam-toc/radar", (Grant(publish=("DetectionBatch",)),), domains=(10,))
>>> Transport(..., extra_xml=radar.security_xml())   # the radar's participant authenticates
"""

from mcc.security.documents import MAX_SECURE_DOMAIN, Grant, governance_xml, permissions_xml
from mcc.security.keystore import Identity, Keystore, SecurityError

__all__ = [
    "MAX_SECURE_DOMAIN",
    "Grant",
    "Identity",
    "Keystore",
    "SecurityError",
    "governance_xml",
    "permissions_xml",
]
