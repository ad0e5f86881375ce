"""The tactical console: a web MMI for the air picture, threats, engagements and health.

>>> from mcc.console import ConsoleConfig, serve
>>> serve(ConsoleConfig(domain=10, users_path=..., audit_path=...), port=8080)

`mcc console` serves it (docs/console.md). The server (FastAPI + uvicorn) bridges the bus to
browsers over a websocket, at most 10 updates a second per browser, and sends operator
commands through the orchestrator's ``Command`` topic; the UI is plain JavaScript modules in
``static/`` (no build step, nothing fetched from the internet). Names are imported on first
use, so `mcc --help` does not pay for the web stack.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AuditLog": "mcc.observe.audit",
    "read_audit": "mcc.observe.audit",
    "ROLES": "mcc.console.auth",
    "AuthError": "mcc.console.auth",
    "SessionStore": "mcc.console.auth",
    "User": "mcc.console.auth",
    "UserStore": "mcc.console.auth",
    "hash_password": "mcc.console.auth",
    "verify_password": "mcc.console.auth",
    "BusBridge": "mcc.console.bridge",
    "Layout": "mcc.console.layout",
    "load_layout": "mcc.console.layout",
    "StateLimits": "mcc.console.limits",
    "LiveState": "mcc.console.state",
    "ConsoleConfig": "mcc.console.server",
    "create_app": "mcc.console.server",
    "serve": "mcc.console.server",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mcc.console' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
