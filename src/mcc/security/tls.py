"""TLS server certificates from a mission keystore, for the web console (`mcc console
--tls-cert --tls-key`).

``server_certificate(KEYSTORE, ["toc.example", "10.0.0.5"])`` writes::

    KEYSTORE/tls/NAME/cert.pem     the server certificate, signed by the keystore's identity CA
    KEYSTORE/tls/NAME/key.pem      its private key (ECDSA P-256, 0600, in a 0700 folder)

The certificate names every host in its subjectAltName (DNS names and IP addresses, as
browsers require), is for server authentication only (extendedKeyUsage serverAuth, not a CA)
and its subject (``CN=tls:NAME, OU=console TLS``) is one no DDS permissions document grants
anything to. Browsers trust it once ``KEYSTORE/ca/identity_ca.pem`` is installed as an
authority. The CA key and certificate are read by `mcc.security.keystore.Keystore`; keys and
certificates come from the ``cryptography`` package.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mcc.security.keystore import (
    Keystore,
    SecurityError,
    certificate_builder,
    private_dir,
    write_key,
)

__all__ = ["ServerCertificate", "server_certificate"]

_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class ServerCertificate:
    """The files of a TLS server certificate made by `server_certificate`."""

    cert: Path
    key: Path
    ca: Path
    hosts: tuple[str, ...]
    not_after: dt.datetime


def server_certificate(
    keystore: str | Path,
    hosts: Sequence[str],
    *,
    name: str = "console",
    days: int = 365,
) -> ServerCertificate:
    """Create (or replace) the TLS server certificate ``name`` of ``keystore`` for ``hosts``
    (host names and IP addresses), valid ``days`` days; `SecurityError` naming what is wrong."""
    ks = Keystore(keystore)
    if not _NAME.fullmatch(name):
        raise SecurityError(
            f"certificate name {name!r}: use letters, digits, '_', '.', '-' (e.g. console)"
        )
    if not hosts:
        raise SecurityError("a TLS certificate needs at least one host (--host NAME)")
    if not 1 <= days <= 3650:
        raise SecurityError(f"days = {days}: use 1 to 3650")
    alt_names = [_alt_name(host) for host in hosts]
    ca_cert, ca_key = ks._ca("identity_ca")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, f"tls:{name}"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "console TLS"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "MCC"),
        ]
    )
    cert = (
        certificate_builder(subject, ca_cert.subject, key.public_key(), days)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    folder = ks.path / "tls" / name
    private_dir(ks.path / "tls")
    private_dir(folder)
    write_key(folder / "key.pem", key)
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return ServerCertificate(
        cert=folder / "cert.pem",
        key=folder / "key.pem",
        ca=ks.path / "ca" / "identity_ca.pem",
        hosts=tuple(hosts),
        not_after=cert.not_valid_after_utc,
    )


def _alt_name(host: str) -> x509.GeneralName:
    text = host.strip().removeprefix("[").removesuffix("]")
    try:
        return x509.IPAddress(ipaddress.ip_address(text))
    except ValueError:
        pass
    if not _HOSTNAME.fullmatch(text):
        raise SecurityError(
            f"host {host!r}: use a host name (e.g. toc.example) or an IP address (no port, "
            "no wildcard)"
        )
    return x509.DNSName(text.lower())
