"""An identity carried to another host: one file that a workstation imports.

``mcc security export KEYSTORE MISSION/NAME --out FILE`` writes what a participant with identity
``MISSION/NAME`` reads (its certificate, key and permissions, the two CA certificates, the
revocation list and the signed governance), never a CA key, as one JSON file (0600: it holds a
private key, like an SSH key). ``mcc security import FILE`` checks it (the certificate issued by
the bundled identity CA, the key its certificate's, the permissions naming its subject) and
writes it into ``$MCC_HOME/imported/MISSION/`` in the keystore's own layout, so the bus reads it
as it reads a keystore identity (`Identity.security_xml`). Clients then reach the mission from
that host with ``--domain`` (`imported_for`).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from mcc.security.keystore import Identity, SecurityError, check_identity_name, granted_source

FORMAT = "mcc-identity/1"
#: Bundle member → its place in a keystore's layout.
_LAYOUT = {
    "identity_ca.pem": "ca/identity_ca.pem",
    "permissions_ca.pem": "ca/permissions_ca.pem",
    "identity_ca.crl": "ca/identity_ca.crl",
    "governance.p7s": "governance.p7s",
    "cert.pem": "identities/{name}/cert.pem",
    "key.pem": "identities/{name}/key.pem",
    "permissions.p7s": "identities/{name}/permissions.p7s",
    "permissions.xml": "identities/{name}/permissions.xml",
}
_OPTIONAL = {"identity_ca.crl"}
MAX_BUNDLE = 1 << 20  # a bundle is a few KiB


@dataclass(frozen=True)
class Imported:
    """An identity imported on this host: its mission, name, the domains its permissions
    grant, and the identity itself."""

    mission: str
    name: str
    domains: tuple[int, ...]
    identity: Identity

    @property
    def principal(self) -> str:
        return self.name.rsplit("/", 1)[-1]


def export_identity(keystore: Path, name: str) -> dict[str, object]:
    """The bundle of identity ``name`` of ``keystore`` (no CA key in it)."""
    check_identity_name(name)
    folder = keystore / "identities" / name
    files: dict[str, str] = {}
    for member, place in _LAYOUT.items():
        path = keystore / place.format(name=name)
        if not path.exists():
            if member in _OPTIONAL:
                continue
            raise SecurityError(f"{path}: missing; is {name!r} an identity of {keystore}?")
        files[member] = path.read_text()
    return {
        "format": FORMAT,
        "identity": name,
        "mission": name.split("/")[0] if "/" in name else "",
        "domains": _domains(files["permissions.xml"]),
        "files": files,
        "from": str(folder),
    }


def write_bundle(bundle: dict[str, object], out: Path) -> None:
    """``bundle`` as JSON in ``out``, readable by its owner only."""
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(bundle, f, indent=1)
    os.chmod(out, 0o600)


def read_bundle(path: Path) -> dict[str, object]:
    """A bundle file, checked; `SecurityError` saying what is wrong with it."""
    try:
        raw = path.read_bytes()[: MAX_BUNDLE + 1]
    except OSError as exc:
        raise SecurityError(f"{path}: cannot read the identity file ({exc.strerror})") from None
    if len(raw) > MAX_BUNDLE:
        raise SecurityError(f"{path}: over {MAX_BUNDLE} bytes: not an identity file")
    try:
        bundle = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SecurityError(f"{path}: not an identity file (JSON: {str(exc)[:80]})") from None
    if not isinstance(bundle, dict) or bundle.get("format") != FORMAT:
        got = bundle.get("format") if isinstance(bundle, dict) else type(bundle).__name__
        raise SecurityError(f"{path}: format: expected {FORMAT!r} (got {str(got)[:40]!r})")
    name = bundle.get("identity")
    files = bundle.get("files")
    if not isinstance(name, str) or not isinstance(files, dict):
        raise SecurityError(f"{path}: identity, files: missing")
    try:
        check_identity_name(name)
    except SecurityError as exc:
        raise SecurityError(f"{path}: identity: {exc}") from None
    for member in _LAYOUT:
        if member not in _OPTIONAL and not isinstance(files.get(member), str):
            raise SecurityError(f"{path}: files.{member}: missing")
    _check(path, name, files)
    return bundle


def _check(path: Path, name: str, files: dict[str, str]) -> None:
    """The certificate issued by the bundled identity CA, valid now and not on its revocation
    list, the key its certificate's, the permissions naming its subject and signed text of the
    same document."""
    try:
        ca = x509.load_pem_x509_certificate(files["identity_ca.pem"].encode())
        cert = x509.load_pem_x509_certificate(files["cert.pem"].encode())
        key = serialization.load_pem_private_key(files["key.pem"].encode(), password=None)
    except ValueError as exc:
        raise SecurityError(f"{path}: files: not PEM ({str(exc)[:80]})") from None
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        raise SecurityError(f"{path}: files.cert.pem: not issued by the bundled CA") from None
    mine = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    theirs = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    if mine != theirs:
        raise SecurityError(f"{path}: files.key.pem: not the key of files.cert.pem")
    cn = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    if not cn or cn[0].value != name:
        raise SecurityError(f"{path}: files.cert.pem: a certificate of another identity")
    now = dt.datetime.now(dt.UTC)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        # Expired, or this host's clock is off (an identity is valid from 5 minutes before
        # it was made): either way the mission's peers would refuse its handshake.
        raise SecurityError(
            f"{path}: files.cert.pem: valid from {cert.not_valid_before_utc:%Y-%m-%d %H:%M} "
            f"to {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC, and this host's clock says "
            f"{now:%Y-%m-%d %H:%M}: export the identity again, or set this host's clock right"
        )
    crl_pem = files.get("identity_ca.crl")
    if isinstance(crl_pem, str):
        try:
            crl = x509.load_pem_x509_crl(crl_pem.encode())
        except ValueError as exc:
            raise SecurityError(f"{path}: files.identity_ca.crl: not PEM ({exc})") from None
        issuer = ca.public_key()
        if not isinstance(issuer, ec.EllipticCurvePublicKey) or not crl.is_signature_valid(issuer):
            raise SecurityError(f"{path}: files.identity_ca.crl: not signed by the bundled CA")
        if crl.get_revoked_certificate_by_serial_number(cert.serial_number) is not None:
            raise SecurityError(
                f"{path}: files.cert.pem: revoked by the identity CA (serial "
                f"{cert.serial_number:x}): ask for a new export of {name}"
            )
    if (
        files["permissions.xml"].encode()
        not in files["permissions.p7s"].replace("\r\n", "\n").encode()
    ):
        raise SecurityError(f"{path}: files.permissions.p7s: does not sign permissions.xml")


def import_identity(bundle: dict[str, object], home: Path) -> Imported:
    """Write ``bundle`` (`read_bundle`) into ``home/imported/MISSION`` (0700 folders, 0600
    files), replacing an earlier import of the same identity."""
    name = str(bundle["identity"])
    files = bundle["files"]
    assert isinstance(files, dict)
    mission = name.split("/")[0] if "/" in name else name
    root = home / "imported" / mission
    for member, place in _LAYOUT.items():
        if member not in files:
            continue
        target = root / place.format(name=name)
        _private_folder(target.parent, stop=home)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(str(files[member]))
    return _load(root, name)


def imported(home: Path) -> Iterator[Imported]:
    """Every identity imported on this host (``home/imported``)."""
    top = home / "imported"
    if not top.is_dir():
        return
    for mission_root in sorted(top.iterdir()):
        for folder in sorted((mission_root / "identities").glob("*/*")):
            name = f"{folder.parent.name}/{folder.name}"
            try:
                yield _load(mission_root, name)
            except (SecurityError, OSError):
                continue  # half-written or damaged: `import` again


def imported_for(home: Path, domain: int, mission: str | None, name: str | None) -> Imported:
    """The imported identity to reach ``mission`` on ``domain`` with (``name``: its last part,
    or the whole ``MISSION/NAME``); `SecurityError` naming what there is when none or several
    fit."""
    fits = [
        i
        for i in imported(home)
        if domain in i.domains
        and (mission is None or i.mission == mission)
        and (name is None or name in (i.name, i.principal))
    ]
    if len(fits) == 1:
        return fits[0]
    have = ", ".join(f"{i.name} (domains {list(i.domains)})" for i in imported(home)) or "none"
    if not fits:
        raise SecurityError(
            f"no identity imported on this host for domain {domain}"
            + (f", mission {mission}" if mission else "")
            + (f", name {name}" if name else "")
            + f" (imported: {have}); on the mission's host run `mcc security export KEYSTORE "
            "MISSION/NAME --out FILE`, then here `mcc security import FILE`"
        )
    raise SecurityError(
        f"several identities fit domain {domain}: {have}; choose with --mission or --as"
    )


def _load(root: Path, name: str) -> Imported:
    folder = root / "identities" / name
    for needed in ("cert.pem", "key.pem", "permissions.p7s", "permissions.xml"):
        if not (folder / needed).exists():
            raise SecurityError(f"{folder}: no {needed}")
    domains = _domains((folder / "permissions.xml").read_text())
    mission = name.split("/")[0]
    return Imported(mission, name, domains, Identity(name, folder, root, granted_source(folder)))


def _domains(permissions_xml: str) -> tuple[int, ...]:
    """The domain ids a permissions document grants (``<id>N</id>`` and ranges)."""
    ids = {int(n) for n in re.findall(r"<id>(\d+)</id>", permissions_xml)}
    for low, high in re.findall(r"<min>(\d+)</min>\s*<max>(\d+)</max>", permissions_xml):
        ids.update(range(int(low), min(int(high), int(low) + 256) + 1))
    return tuple(sorted(ids))


def _private_folder(path: Path, *, stop: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    while path != stop and stop in path.parents:
        os.chmod(path, 0o700)
        path = path.parent
