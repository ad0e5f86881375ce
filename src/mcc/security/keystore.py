"""A mission keystore for DDS Security: certificate authorities, identities, signed documents.

Shaped like ROS 2's sros2 keystore::

    KEYSTORE/
      ca/identity_ca.pem, ca/identity_ca.key        signs every identity certificate
      ca/permissions_ca.pem, ca/permissions_ca.key  signs governance and permissions documents
      ca/identity_ca.crl                             certificates revoked (replaced identities)
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
_CRL = "identity_ca.crl"


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
    #: The source it writes sourced topics as (``PRINCIPAL#GENERATION`` for an instance's
    #: identity, `mcc.security.mission.instance_identity`); None: its principal.
    source: str | None = None

    @property
    def subject(self) -> str:
        return _subject(self.name)

    def files(self) -> tuple[Path, ...]:
        """Every file a participant with this identity reads: the two CA certificates, the
        governance, its certificate, key and permissions (nothing else of the keystore)."""
        return tuple(path for _, path in self._named_files())

    def _named_files(self) -> tuple[tuple[str, Path], ...]:
        """(name in a delivered folder, path in the keystore) of each file of `files`."""
        ca, me = self.keystore / "ca", self.folder
        return (
            ("identity_ca.pem", ca / "identity_ca.pem"),
            ("permissions_ca.pem", ca / "permissions_ca.pem"),
            (_CRL, ca / _CRL),
            ("governance.p7s", self.keystore / "governance.p7s"),
            ("cert.pem", me / "cert.pem"),
            ("key.pem", me / "key.pem"),
            ("permissions.p7s", me / "permissions.p7s"),
        )

    def bundle(self) -> dict[str, bytes]:
        """The identity as file name → content, what a backend writes into the instance's
        private folder on its host (`security_xml` with ``folder``): the CA certificates,
        the CRL when there is one, the governance, its certificate, key and permissions.
        No CA private key is ever part of it."""
        return {name: path.read_bytes() for name, path in self._named_files() if path.exists()}

    def security_xml(self, folder: str | None = None) -> str:
        """The ``<Security>`` element of Cyclone's ``<Domain>`` configuration for this
        identity (for ``Transport(extra_xml=...)``): its files in the keystore, or in
        ``folder``, where `bundle` was written (``${MCC_IDENTITY_DIR}``: Cyclone expands the
        variable in the process that reads the configuration)."""
        named = dict(self._named_files())

        def uri(name: str) -> str:
            return f"file:{folder}/{name}" if folder else f"file:{named[name].resolve()}"

        has_crl = (self.keystore / "ca" / _CRL).exists()
        return (
            "<Security>"
            "<Authentication>"
            f"<IdentityCA>{uri('identity_ca.pem')}</IdentityCA>"
            f"<IdentityCertificate>{uri('cert.pem')}</IdentityCertificate>"
            f"<PrivateKey>{uri('key.pem')}</PrivateKey>"
            + (f"<CRL>{uri(_CRL)}</CRL>" if has_crl else "")
            + "</Authentication>"
            "<AccessControl>"
            f"<PermissionsCA>{uri('permissions_ca.pem')}</PermissionsCA>"
            f"<Governance>{uri('governance.p7s')}</Governance>"
            f"<Permissions>{uri('permissions.p7s')}</Permissions>"
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
        private_dir(root / "ca")
        for name in _CA_NAMES:
            key = ec.generate_private_key(ec.SECP256R1())
            subject = _name(f"MCC {mission} {name.replace('_', ' ')}")
            cert = (
                certificate_builder(subject, subject, key.public_key(), days)
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
            write_key(root / "ca" / f"{name}.key", key)
            (root / "ca" / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        keystore = cls(root)
        keystore.revoke(())
        return keystore

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
        self,
        name: str,
        grants: tuple[Grant, ...],
        *,
        domains: tuple[int, ...],
        days: int = 365,
        revoke_replaced: bool = False,
    ) -> Identity:
        """Create (or replace) identity ``name``: key, certificate signed by the identity CA,
        and its permissions document (``grants`` on ``domains``) signed by the permissions CA.
        ``revoke_replaced``: the certificate it replaces goes on the revocation list (`revoke`;
        not for a supervisor's identity, which a standby reissues while the active one uses
        it)."""
        folder = self.path / "identities" / check_identity_name(name)
        private_dir(folder)
        replaced = _serial(folder / "cert.pem") if revoke_replaced else None
        if replaced is not None:
            self.revoke((replaced,))
        key = ec.generate_private_key(ec.SECP256R1())
        ca_cert, ca_key = self._ca("identity_ca")
        cert = certificate_builder(_name(name), ca_cert.subject, key.public_key(), days).sign(
            ca_key, hashes.SHA256()
        )
        write_key(folder / "key.pem", key)
        (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        now = dt.datetime.now(dt.UTC)
        xml = permissions_xml(
            _subject(name), grants, domains=domains, not_before=now, not_after=now + _days(days)
        )
        (folder / "permissions.xml").write_text(xml)
        (folder / "permissions.p7s").write_bytes(self._sign(xml.encode()))
        return Identity(name, folder, self.path)

    def revoke(self, serials: tuple[int, ...], *, keep_days: int = 366) -> Path:
        """Add certificate ``serials`` to the identity CA's revocation list (written even when
        empty, so that every participant loads one). A participant checks the list when it
        is created (Cyclone reads it once): from then on it refuses those certificates.
        Entries older than ``keep_days`` (past any certificate's validity) are dropped."""
        path = self.path / "ca" / _CRL
        ca_cert, ca_key = self._ca("identity_ca")
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateRevocationListBuilder()
            .issuer_name(ca_cert.subject)
            .last_update(now - dt.timedelta(minutes=5))
            .next_update(ca_cert.not_valid_after_utc)  # an expired list fails every check
        )
        kept: set[int] = set()
        if path.exists():
            for entry in x509.load_pem_x509_crl(path.read_bytes()):
                if now - entry.revocation_date_utc < _days(keep_days):
                    kept.add(entry.serial_number)
                    builder = builder.add_revoked_certificate(entry)
        for serial in set(serials) - kept:
            builder = builder.add_revoked_certificate(
                x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(now).build()
            )
        crl = builder.sign(ca_key, hashes.SHA256())
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(crl.public_bytes(serialization.Encoding.PEM))
        os.replace(tmp, path)  # a participant starting now reads the old or the new list
        return path

    def revoked(self) -> set[int]:
        """The serials on the identity CA's revocation list."""
        path = self.path / "ca" / _CRL
        if not path.exists():
            return set()
        return {entry.serial_number for entry in x509.load_pem_x509_crl(path.read_bytes())}

    def existing(self, name: str) -> Identity:
        """Identity ``name`` as created before; `SecurityError` if it is missing."""
        folder = self.path / "identities" / check_identity_name(name)
        for file in ("cert.pem", "key.pem", "permissions.p7s"):
            if not (folder / file).exists():
                raise SecurityError(f"{folder}: no {file}; create the identity first")
        if not (self.path / "governance.p7s").exists():
            raise SecurityError(f"{self.path}: no governance.p7s; write the governance first")
        return Identity(name, folder, self.path, granted_source(folder))

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
        if cert.serial_number in self.revoked():
            problems.append(f"{ident.folder}/cert.pem: revoked (replaced by a newer identity)")
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
        xml = _GENERATION.sub(r"\1", xml)  # each start's generation is not a declaration
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


#: ``src/PRINCIPAL#GENERATION`` in a permissions document (`mcc.bus.topics.split_source`).
_GENERATION = re.compile(r"(src/[A-Za-z0-9_.-]+)#[0-9]+")


def granted_source(folder: Path) -> str | None:
    """The source an identity's permissions grant (``PRINCIPAL[#GENERATION]`` of its
    ``src/`` partition); None when they grant none."""
    try:
        xml = (folder / "permissions.xml").read_text()
    except OSError:
        return None
    found = re.search(r"<partition>src/([^<*?\[\]]+)</partition>", xml)
    return found.group(1) if found else None


def _serial(cert_path: Path) -> int | None:
    """The serial number of the certificate at ``cert_path``; None when there is none."""
    try:
        return x509.load_pem_x509_certificate(cert_path.read_bytes()).serial_number
    except (OSError, ValueError):
        return None


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


def certificate_builder(
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


def private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)


def write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(path, 0o600)
