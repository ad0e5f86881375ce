"""A mission keystore for DDS Security: certificate authorities, identities, signed documents.

Shaped like ROS 2's sros2 keystore::

    KEYSTORE/
      ca/identity_ca.pem, ca/identity_ca.key        signs every identity certificate
      ca/permissions_ca.pem, ca/permissions_ca.key  signs governance and permissions documents
      governance.xml, governance.p7s                the domain rules (signed, S/MIME)
      identities/NAME/cert.pem, key.pem             one per participant identity
      identities/NAME/permissions.xml, .p7s         what NAME may publish and subscribe (signed)

Keys are ECDSA P-256, private keys 0600 in 0700 folders. Documents are the OMG DDS Security XML
formats, signed as S/MIME with a detached signature, as Cyclone's access-control plugin reads
them. Keys and certificates come from the ``cryptography`` package.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs7
from cryptography.x509.oid import NameOID

from mcc.errors import MccError
from mcc.security.documents import Grant, governance_xml, permissions_xml

_CA_NAMES = ("identity_ca", "permissions_ca")


class SecurityError(MccError):
    """A keystore, identity or document that is missing, invalid or does not match."""


#: An identity's name: ``MISSION/NAME`` (or one part), each a letter or digit then letters,
#: digits, ``_``, ``.``, ``-``. The last part becomes a DDS partition (``cmd/NAME``,
#: ``src/NAME``) that permissions match as a pattern, and a folder of the keystore: a name
#: with ``*``, ``?``, ``[`` or a path step would grant every partition or write elsewhere.
_IDENTITY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,63})?")


def check_identity_name(name: str) -> str:
    """``name`` when it is a valid identity name; `SecurityError` saying why otherwise."""
    if not _IDENTITY_NAME.fullmatch(name):
        raise SecurityError(
            f"identity name {name[:80]!r}: use MISSION/NAME, each part a letter or digit then "
            "letters, digits, '_', '.' or '-' (at most 64); no wildcards or path steps"
        )
    return name


@dataclass(frozen=True)
class Identity:
    """The files of one participant identity, and the Cyclone configuration that uses them."""

    name: str
    folder: Path
    keystore: Path

    @property
    def subject(self) -> str:
        return _subject(self.name)

    def files(self) -> tuple[Path, ...]:
        """Every file a participant with this identity reads: the two CA certificates, the
        governance, its certificate, key and permissions (nothing else of the keystore)."""
        ca, me = self.keystore / "ca", self.folder
        return (
            ca / "identity_ca.pem", ca / "permissions_ca.pem", self.keystore / "governance.p7s",
            me / "cert.pem", me / "key.pem", me / "permissions.p7s",
        )  # fmt: skip

    def security_xml(self) -> str:
        """The ``<Security>`` element of Cyclone's ``<Domain>`` configuration for this
        identity (for ``Transport(extra_xml=...)``)."""
        ca, ks, me = self.keystore / "ca", self.keystore, self.folder

        def uri(path: Path) -> str:
            return f"file:{path.resolve()}"

        return (
            "<Security>"
            "<Authentication>"
            f"<IdentityCA>{uri(ca / 'identity_ca.pem')}</IdentityCA>"
            f"<IdentityCertificate>{uri(me / 'cert.pem')}</IdentityCertificate>"
            f"<PrivateKey>{uri(me / 'key.pem')}</PrivateKey>"
            "</Authentication>"
            "<AccessControl>"
            f"<PermissionsCA>{uri(ca / 'permissions_ca.pem')}</PermissionsCA>"
            f"<Governance>{uri(ks / 'governance.p7s')}</Governance>"
            f"<Permissions>{uri(me / 'permissions.p7s')}</Permissions>"
            "</AccessControl>"
            "<Cryptographic/>"
            "</Security>"
        )


class Keystore:
    """An existing keystore folder (``Keystore.init`` makes one)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        for name in _CA_NAMES:
            for suffix in (".pem", ".key"):
                if not (self.path / "ca" / f"{name}{suffix}").exists():
                    raise SecurityError(
                        f"{self.path}: no ca/{name}{suffix}; create the keystore with "
                        f"`mcc security init {self.path}`"
                    )

    @classmethod
    def init(cls, path: str | Path, *, mission: str = "mcc", days: int = 3650) -> Keystore:
        """Create the two certificate authorities in a new folder ``path``."""
        root = Path(path)
        if (root / "ca").exists():
            raise SecurityError(f"{root}: a keystore is there already (ca/); use another folder")
        _private_dir(root / "ca")
        for name in _CA_NAMES:
            key = ec.generate_private_key(ec.SECP256R1())
            subject = _name(f"MCC {mission} {name.replace('_', ' ')}")
            cert = (
                _builder(subject, subject, key.public_key(), days)
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(  # what strict verifiers (openssl -x509_strict) ask of a CA
                    x509.KeyUsage(
                        digital_signature=True,
                        content_commitment=False,
                        key_encipherment=False,
                        data_encipherment=False,
                        key_agreement=False,
                        key_cert_sign=True,
                        crl_sign=True,
                        encipher_only=False,
                        decipher_only=False,
                    ),
                    critical=True,
                )  # fmt: skip
                .add_extension(
                    x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
                )
                .sign(key, hashes.SHA256())
            )
            _write_key(root / "ca" / f"{name}.key", key)
            (root / "ca" / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cls(root)

    # -- documents ------------------------------------------------------------------------
    def write_governance(
        self,
        domains: tuple[int, ...],
        *,
        protect: str = "ENCRYPT",
        topics: Mapping[str, str] | None = None,
    ) -> Path:
        """Sign and write the governance document for ``domains`` (`governance_xml`)."""
        xml = governance_xml(domains, protect=protect, topics=topics)
        (self.path / "governance.xml").write_text(xml)
        path = self.path / "governance.p7s"
        path.write_bytes(self._sign(xml.encode()))
        return path

    def identity(
        self, name: str, grants: tuple[Grant, ...], *, domains: tuple[int, ...], days: int = 365
    ) -> Identity:
        """Create (or replace) identity ``name``: key, certificate signed by the identity CA,
        and its permissions document (``grants`` on ``domains``) signed by the permissions CA."""
        folder = self.path / "identities" / check_identity_name(name)
        _private_dir(folder)
        key = ec.generate_private_key(ec.SECP256R1())
        ca_cert, ca_key = self._ca("identity_ca")
        cert = _builder(_name(name), ca_cert.subject, key.public_key(), days).sign(
            ca_key, hashes.SHA256()
        )
        _write_key(folder / "key.pem", key)
        (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        now = dt.datetime.now(dt.UTC)
        xml = permissions_xml(
            _subject(name), grants, domains=domains, not_before=now, not_after=now + _days(days)
        )
        (folder / "permissions.xml").write_text(xml)
        (folder / "permissions.p7s").write_bytes(self._sign(xml.encode()))
        return Identity(name, folder, self.path)

    def existing(self, name: str) -> Identity:
        """Identity ``name`` as created before; `SecurityError` if it is missing."""
        folder = self.path / "identities" / check_identity_name(name)
        for file in ("cert.pem", "key.pem", "permissions.p7s"):
            if not (folder / file).exists():
                raise SecurityError(f"{folder}: no {file}; create the identity first")
        if not (self.path / "governance.p7s").exists():
            raise SecurityError(f"{self.path}: no governance.p7s; write the governance first")
        return Identity(name, folder, self.path)

    def check(self, name: str) -> list[str]:
        """What is wrong with identity ``name`` (empty when it is usable): missing files, a
        certificate not issued by this keystore's identity CA or outside its validity, a
        permissions document for another subject."""
        try:
            ident = self.existing(name)
        except SecurityError as exc:
            return [str(exc)]
        problems = []
        ca_cert, _ = self._ca("identity_ca")
        cert = x509.load_pem_x509_certificate((ident.folder / "cert.pem").read_bytes())
        try:
            cert.verify_directly_issued_by(ca_cert)
        except (ValueError, TypeError, InvalidSignature):
            problems.append(f"{ident.folder}/cert.pem: not issued by {self.path}/ca/identity_ca")
        now = dt.datetime.now(dt.UTC)
        if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
            problems.append(
                f"{ident.folder}/cert.pem: valid {cert.not_valid_before_utc:%Y-%m-%d} to "
                f"{cert.not_valid_after_utc:%Y-%m-%d}, not now"
            )
        xml = (ident.folder / "permissions.xml").read_text()
        written = (ident.subject, f"CN={name},O=MCC")  # the order keystores used before
        if not any(f"<subject_name>{subject}</subject_name>" in xml for subject in written):
            problems.append(
                f"{ident.folder}/permissions.xml: not the permissions of {ident.subject}"
            )
        signed = (ident.folder / "permissions.p7s").read_bytes().replace(b"\r\n", b"\n")
        if xml.encode() not in signed:
            problems.append(f"{ident.folder}/permissions.p7s: does not sign permissions.xml")
        return problems

    def grants_match(self, name: str, rules: str) -> bool:
        """Whether identity ``name``'s permissions allow exactly ``rules`` (`allow_rules`)."""
        xml = (self.path / "identities" / name / "permissions.xml").read_text()
        return "".join(re.findall(r"<allow_rule>.*?</allow_rule>", xml, re.S)) == rules

    def _ca(self, name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        cert = x509.load_pem_x509_certificate((self.path / "ca" / f"{name}.pem").read_bytes())
        key = serialization.load_pem_private_key(
            (self.path / "ca" / f"{name}.key").read_bytes(), password=None
        )
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise SecurityError(f"{self.path}/ca/{name}.key: not an EC private key")
        return cert, key

    def _sign(self, data: bytes) -> bytes:
        """``data`` as S/MIME signed by the permissions CA (detached signature, text mode)."""
        cert, key = self._ca("permissions_ca")
        return (
            pkcs7.PKCS7SignatureBuilder()
            .set_data(data)
            .add_signer(cert, key, hashes.SHA256())
            .sign(
                serialization.Encoding.SMIME,
                [pkcs7.PKCS7Options.Text, pkcs7.PKCS7Options.DetachedSignature],
            )
        )


def _subject(name: str) -> str:
    """The subject as the certificate writes it (RFC 4514: last attribute first). Fast DDS
    compares a permissions document's subject with the certificate's in order; Cyclone
    compares them as names, so either order passes there."""
    return _name(name).rfc4514_string()


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "MCC"),
        ]
    )


def _days(days: int) -> dt.timedelta:
    return dt.timedelta(days=days)


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, days: int
) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _days(days))
    )


def _private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(path, 0o600)
