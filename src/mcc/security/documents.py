"""The OMG DDS Security governance and permissions documents (XML), generated.

Governance (one per mission): only authenticated participants join; discovery, liveliness and
every topic's data and metadata are protected (``ENCRYPT``, or ``SIGN`` where encryption is not
wanted); read and write access are checked against each participant's permissions.
Permissions (one per identity): the topics it may publish and subscribe, in which partitions,
for how long; everything else is denied.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from xml.sax.saxutils import escape

PROTECTIONS = ("NONE", "SIGN", "ENCRYPT")
#: Cyclone's access-control plugin refuses a governance document naming a domain id above 230
#: (measured: 0..230 parse, 231 and 232 do not), though DDS domain ids run to 232.
MAX_SECURE_DOMAIN = 230


@dataclass(frozen=True)
class Grant:
    """Topics an identity may publish and subscribe, in ``partitions`` (fnmatch patterns;
    ``""`` is the default partition)."""

    publish: tuple[str, ...] = ()
    subscribe: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ("", "*")


def _domains(domains: tuple[int, ...]) -> str:
    """``<domains>``: each run of consecutive ids as one ``<id_range>`` (Cyclone's parser
    refuses a long list of ``<id>``)."""
    ids = sorted({int(d) for d in domains})
    if ids and not 0 <= ids[0] <= ids[-1] <= MAX_SECURE_DOMAIN:
        raise ValueError(f"domains {ids}: DDS Security takes domain ids 0..{MAX_SECURE_DOMAIN}")
    parts, start = [], 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or ids[i] != ids[i - 1] + 1:
            lo, hi = ids[start], ids[i - 1]
            parts.append(
                f"<id>{lo}</id>"
                if lo == hi
                else f"<id_range><min>{lo}</min><max>{hi}</max></id_range>"
            )
            start = i
    return "<domains>" + "".join(parts) + "</domains>"


#: Topics whose samples are always encrypted, whatever a mission asks for the rest: who may
#: command, fire and answer must not be readable or forgeable on the wire.
ALWAYS_ENCRYPTED = (
    "Command", "CommandReply", "EngagementOrder", "EngagementOutcome", "WeaponStatus",
)  # fmt: skip


def _topic_rule(expression: str, kind: str) -> str:
    return f"""
        <topic_rule>
          <topic_expression>{escape(expression)}</topic_expression>
          <enable_discovery_protection>true</enable_discovery_protection>
          <enable_liveliness_protection>true</enable_liveliness_protection>
          <enable_read_access_control>true</enable_read_access_control>
          <enable_write_access_control>true</enable_write_access_control>
          <metadata_protection_kind>{kind}</metadata_protection_kind>
          <data_protection_kind>{kind}</data_protection_kind>
        </topic_rule>"""


def governance_xml(
    domains: tuple[int, ...], *, protect: str = "ENCRYPT", topics: Mapping[str, str] | None = None
) -> str:
    """The governance document for ``domains``: data and metadata protected with ``protect``,
    or per topic (name or pattern) with ``topics``; `ALWAYS_ENCRYPTED` topics encrypted."""
    overrides = {**(topics or {}), **dict.fromkeys(ALWAYS_ENCRYPTED, "ENCRYPT")}
    for what in (protect, *overrides.values()):
        if what not in PROTECTIONS:
            raise ValueError(f"protection {what!r}: use one of {', '.join(PROTECTIONS)}")
    with_origin = {"NONE": "NONE", "SIGN": "SIGN", "ENCRYPT": "ENCRYPT"}[protect]
    # Rules apply in order, the first match wins: named topics first, then everything else.
    rules = "".join(_topic_rule(t, k) for t, k in overrides.items()) + _topic_rule("*", protect)
    return f"""<?xml version="1.0" encoding="utf-8"?>
<dds xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
     xsi:noNamespaceSchemaLocation="http://www.omg.org/spec/DDS-SECURITY/20170901/omg_shared_ca_governance.xsd">
  <domain_access_rules>
    <domain_rule>
      {_domains(domains)}
      <allow_unauthenticated_participants>false</allow_unauthenticated_participants>
      <enable_join_access_control>true</enable_join_access_control>
      <discovery_protection_kind>{with_origin}</discovery_protection_kind>
      <liveliness_protection_kind>{with_origin}</liveliness_protection_kind>
      <rtps_protection_kind>NONE</rtps_protection_kind>
      <topic_access_rules>{rules}
      </topic_access_rules>
    </domain_rule>
  </domain_access_rules>
</dds>
"""


def _stamp(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _criteria(kind: str, topics: tuple[str, ...], partitions: tuple[str, ...]) -> str:
    if not topics:
        return ""
    names = "".join(f"<topic>{escape(t)}</topic>" for t in topics)
    parts = "".join(f"<partition>{escape(p)}</partition>" for p in partitions)
    return (
        f"<{kind}><topics>{names}</topics>"
        + (f"<partitions>{parts}</partitions>" if parts else "")
        + f"</{kind}>"
    )


def allow_rules(grants: tuple[Grant, ...], domains: tuple[int, ...]) -> str:
    """The ``<allow_rule>`` elements of a permissions document for ``grants`` on ``domains``
    (what `Keystore.grants_match` compares: the rest is subject and validity)."""
    return "".join(
        "<allow_rule>"
        + _domains(domains)
        + _criteria("publish", g.publish, g.partitions)
        + _criteria("subscribe", g.subscribe, g.partitions)
        + "</allow_rule>"
        for g in grants
        if g.publish or g.subscribe
    )


def permissions_xml(
    subject: str,
    grants: tuple[Grant, ...],
    *,
    domains: tuple[int, ...],
    not_before: dt.datetime,
    not_after: dt.datetime,
) -> str:
    """The permissions document of ``subject``: ``grants`` allowed on ``domains``, the rest
    denied."""
    rules = allow_rules(grants, domains)
    return f"""<?xml version="1.0" encoding="utf-8"?>
<dds xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
     xsi:noNamespaceSchemaLocation="http://www.omg.org/spec/DDS-SECURITY/20170901/omg_shared_ca_permissions.xsd">
  <permissions>
    <grant name="{escape(subject)}">
      <subject_name>{escape(subject)}</subject_name>
      <validity>
        <not_before>{_stamp(not_before)}</not_before>
        <not_after>{_stamp(not_after)}</not_after>
      </validity>
      {rules}
      <default>DENY</default>
    </grant>
  </permissions>
</dds>
"""
