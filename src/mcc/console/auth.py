"""Operator accounts and sessions of the console.

Accounts live in a JSON file (``<MCC_HOME>/console/users.json`` unless told otherwise), one
salted scrypt hash per operator, written with mode 0600; ``mcc console adduser NAME --role
observer|commander`` creates or replaces one. A login gives a random session token (256 bits)
in an HttpOnly, SameSite=Strict cookie; the server keeps only the token's SHA-256, in a sessions
file beside the accounts, so a restarted console still knows its operators' sessions. The role
is read from the accounts file at every request: demoting an operator takes effect at once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import re
import secrets
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcc import files
from mcc.errors import MccError

ROLES = ("observer", "commander")
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_.-]{0,31}$")
MIN_PASSWORD_CHARS = 8
# scrypt cost: 2**14 × 8 × 128 B = 16 MiB and ~50 ms per hash (OWASP's minimum for scrypt).
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
SESSION_TTL_S = 12 * 3600.0


class AuthError(MccError):
    """An account or a password is refused (bad name, short password, unknown role)."""


def default_dir() -> Path:
    """``<MCC_HOME>/console``: accounts, sessions and the audit log of `mcc console`."""
    from mcc.orchestrate.registry import home

    return home() / "console"


# -- passwords ------------------------------------------------------------------------------


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """``scrypt$N$r$p$salt$hash`` (base64): a salted scrypt hash of ``password``."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.scrypt(
        password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32
    )
    b64 = base64.b64encode
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${b64(salt).decode()}${b64(digest).decode()}"


def verify_password(password: str, encoded: str) -> bool:
    """Whether ``password`` matches ``encoded`` (from `hash_password`); constant-time compare."""
    try:
        scheme, n, r, p, salt, digest = encoded.split("$")
        if scheme != "scrypt":
            return False
        expected = base64.b64decode(digest)
        got = hashlib.scrypt(
            password.encode(),
            salt=base64.b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(expected),
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, expected)


_DUMMY_HASH = hash_password("not a password", salt=b"\0" * 16)


def check_new_account(name: str, password: str, role: str) -> None:
    """``AuthError`` naming what is wrong with a new account."""
    if not NAME_PATTERN.match(name):
        raise AuthError(
            f"operator name {name!r}: use 1-32 lower-case letters, digits, '.', '_' or '-', "
            "starting with a letter"
        )
    if role not in ROLES:
        raise AuthError(f"role {role!r}: expected one of {', '.join(ROLES)}")
    if len(password) < MIN_PASSWORD_CHARS:
        raise AuthError(
            f"the password of {name!r} has {len(password)} characters; use at least "
            f"{MIN_PASSWORD_CHARS}"
        )


# -- files ----------------------------------------------------------------------------------


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by its owner only (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_private(path, text)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise AuthError(f"{path}: cannot read it ({exc}); fix or remove the file") from None
    if not isinstance(data, dict):
        raise AuthError(f"{path}: expected a JSON object; fix or remove the file")
    return data


# -- accounts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class User:
    """An operator: name and role (``observer`` reads, ``commander`` also commands)."""

    name: str
    role: str

    @property
    def may_command(self) -> bool:
        return self.role == "commander"


class UserStore:
    """The operator accounts in ``path`` (re-read when the file changes)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._mtime_ns: int | None = None
        self._users: dict[str, dict[str, Any]] = {}

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            mtime = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            mtime = None
        with self._lock:
            if mtime != self._mtime_ns:
                data = _read_json(self.path) if mtime is not None else {}
                self._users = dict(data.get("users", {}))
                self._mtime_ns = mtime
            return self._users

    def add(self, name: str, password: str, role: str) -> User:
        """Create or replace the account ``name`` (``AuthError`` when refused)."""
        check_new_account(name, password, role)
        users = dict(self._load())
        users[name] = {
            "role": role,
            "hash": hash_password(password),
            "created_ns": time.time_ns(),
        }
        write_private(self.path, json.dumps({"users": users}, indent=2) + "\n")
        return User(name, role)

    def get(self, name: str) -> User | None:
        record = self._load().get(name)
        if record is None or record.get("role") not in ROLES:
            return None
        return User(name, str(record["role"]))

    def authenticate(self, name: str, password: str) -> User | None:
        """The user when ``password`` is theirs; None otherwise (same cost either way)."""
        record = self._load().get(name)
        encoded = str(record.get("hash", "")) if record else _DUMMY_HASH
        ok = verify_password(password, encoded)
        return self.get(name) if ok and record else None

    def users(self) -> list[User]:
        return [u for name in sorted(self._load()) if (u := self.get(name)) is not None]


# -- sessions -------------------------------------------------------------------------------


class SessionStore:
    """Random session tokens → operator names; only SHA-256 digests are stored (in ``path``,
    0600, so sessions survive a restart of the console; in memory when ``path`` is None)."""

    def __init__(self, path: str | Path | None, *, ttl_s: float = SESSION_TTL_S) -> None:
        self.path = Path(path) if path is not None else None
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._sessions: dict[str, dict[str, Any]] = {}
        if self.path is not None:
            self._sessions = dict(_read_json(self.path).get("sessions", {}))
        self._prune(time.time())

    @staticmethod
    def _digest(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    def create(self, name: str) -> str:
        """A new session for ``name``; the token to put in the cookie."""
        token = secrets.token_urlsafe(32)
        now = time.time()
        with self._lock:
            self._sessions[self._digest(token)] = {"name": name, "expires": now + self.ttl_s}
            self._prune(now)
            self._save()
        return token

    def lookup(self, token: str | None) -> str | None:
        """The operator name of a live session, or None."""
        if not token:
            return None
        with self._lock:
            record = self._sessions.get(self._digest(token))
        if record is None or record["expires"] < time.time():
            return None
        return str(record["name"])

    def revoke(self, token: str | None) -> None:
        if not token:
            return
        with self._lock:
            if self._sessions.pop(self._digest(token), None) is not None:
                self._save()

    def _prune(self, now: float) -> None:
        self._sessions = {k: v for k, v in self._sessions.items() if v["expires"] >= now}

    def _save(self) -> None:
        if self.path is not None:
            write_private(self.path, json.dumps({"sessions": self._sessions}) + "\n")


class LoginThrottle:
    """At most ``max_failures`` failed logins per client address, and per account from one
    address, within ``window_s``; past ``max_failures`` failures of an account from all
    addresses together, only addresses that logged in to it before get tries.

    So a guesser gets ``max_failures`` tries per address, and a distributed one
    ``max_failures`` per account from new addresses, while the account's owner, at a
    workstation that logged in before, is not locked out by someone else's failures. A login
    reserves its tries before the password is hashed (`reserve`, atomic): a try in progress
    counts as a failure until it ends, so concurrent guesses cannot slip through together.
    Addresses count per host (IPv4) or per /64 network (IPv6). At most ``max_keys`` accounts
    and addresses are remembered (and ``MAX_TRUSTED`` addresses per account): a flood of new
    names is refused, not stored.
    """

    MAX_TRUSTED = 16

    def __init__(
        self, *, max_failures: int = 10, window_s: float = 300.0, max_keys: int = 10_000
    ) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.max_keys = max_keys
        self._failures: dict[str, deque[float]] = {}
        self._pending: dict[str, int] = {}
        self._trusted: dict[str, OrderedDict[str, None]] = {}  # account → addresses it used
        self._lock = threading.Lock()

    @staticmethod
    def _keys(account: str, client: str) -> tuple[str, str, str]:
        name, address = account.strip().lower()[:64], client_key(client)
        return f"login:{name}@{address}", f"address:{address}", f"account:{name}"

    def _refused(self, keys: tuple[str, str, str], now: float) -> bool:
        pair, address, account = keys
        if any(self._used(key, now) >= self.max_failures for key in (pair, address)):
            return True
        trusted = self._trusted.get(account)
        over = self._used(account, now) >= self.max_failures
        return over and (trusted is None or address not in trusted)

    def reserve(self, account: str, client: str) -> LoginTry | None:
        """A try for ``account`` from ``client``; None when it has no tries left. End it
        with `LoginTry.failed` or `LoginTry.succeeded`."""
        keys = self._keys(account, client)
        now = time.monotonic()
        with self._lock:
            if self._refused(keys, now):
                return None
            new = sum(key not in self._failures and key not in self._pending for key in keys)
            if new and len(self._failures) + len(self._pending) + new > self.max_keys:
                self._forget(now)
                if len(self._failures) + len(self._pending) + new > self.max_keys:
                    return None
            for key in keys:
                self._pending[key] = self._pending.get(key, 0) + 1
        return LoginTry(self, keys)

    def blocked(self, account: str, client: str) -> bool:
        """Whether a login for ``account`` from ``client`` would be refused now."""
        with self._lock:
            return self._refused(self._keys(account, client), time.monotonic())

    def _used(self, key: str, now: float) -> int:
        """Failures of ``key`` within the window plus its tries in progress."""
        times = self._failures.get(key)
        if times is not None:
            while times and now - times[0] >= self.window_s:
                times.popleft()
            if not times:
                del self._failures[key]
                times = None
        return (len(times) if times else 0) + self._pending.get(key, 0)

    def _forget(self, now: float) -> None:
        for key in list(self._failures):
            self._used(key, now)

    def _end(self, keys: tuple[str, ...], *, ok: bool) -> None:
        now = time.monotonic()
        with self._lock:
            for key in keys:
                left = self._pending.get(key, 0) - 1
                if left > 0:
                    self._pending[key] = left
                else:
                    self._pending.pop(key, None)
                if ok and not key.startswith("account:"):
                    # the account's failures stay: others' guesses are not forgiven by one login
                    self._failures.pop(key, None)
                elif not ok:
                    self._failures.setdefault(key, deque()).append(now)
            if ok:
                _, address, account = keys
                if account in self._trusted or len(self._trusted) < self.max_keys:
                    trusted = self._trusted.setdefault(account, OrderedDict())
                    trusted[address] = None
                    trusted.move_to_end(address)
                    while len(trusted) > self.MAX_TRUSTED:
                        trusted.popitem(last=False)


@dataclass
class LoginTry:
    """A reserved login try (`LoginThrottle.reserve`); ends once, failed or succeeded."""

    throttle: LoginThrottle
    keys: tuple[str, ...]
    ended: bool = False

    def failed(self) -> None:
        if not self.ended:
            self.ended = True
            self.throttle._end(self.keys, ok=False)

    def succeeded(self) -> None:
        """A right password: this address's failures are forgotten and it is trusted for the
        account (the account's failures from elsewhere stay)."""
        if not self.ended:
            self.ended = True
            self.throttle._end(self.keys, ok=True)


def client_key(client: str) -> str:
    """What the throttle counts a client address as: the address (IPv4, or an IPv4-mapped
    IPv6 one), the /64 network of an IPv6 address, or the text as given."""
    try:
        address = ipaddress.ip_address(client.split("%", 1)[0])
    except ValueError:
        return client[:100]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)
