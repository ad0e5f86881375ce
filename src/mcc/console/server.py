"""The console's web server: FastAPI routes, the websocket bridge to browsers, the static UI.

Routes (all JSON unless said):

- ``GET /`` the console (a login page until the operator has a session), ``GET /login``;
- ``POST /api/login`` ``{"name", "password"}`` → session cookie; ``POST /api/logout``;
- ``GET /api/me``, ``GET /api/state`` (one snapshot), ``GET /api/layout``, ``GET /api/audit``;
- ``POST /api/command`` ``{"verb", "target", "size"?}`` (commander only): ``phase``, ``start``,
  ``stop``, ``restart``, ``scale`` (with ``size``) go to the supervisor, ``approve`` and
  ``reject`` (target: the order id) to TEWA, all through the ``Command`` topic. 401 without a
  session, 403 for an observer or another origin, 415 when not JSON, 422 for a malformed
  request (``detail`` says why), 409 when the mission refuses it, 504 when nobody answers.
  Every attempt is audited;
- ``WS /ws``: ``hello`` (user, role, layout, whether the bus is secured), then ``state``
  snapshots at most ``update_hz`` per second, only when something changed (and at least once
  a second);
- ``GET /metrics``: Prometheus text (no session needed; the console binds to 127.0.0.1);
- ``GET /healthz``.

Every request must name an allowed host (``Host``: loopback names, the bound address and
``ConsoleConfig.allowed_hosts``; 400 otherwise, so a DNS-rebound page cannot read the
console). Every ``POST`` must be JSON (``Content-Type: application/json``, 415 otherwise)
and, when the browser sends an ``Origin``, come from this console's origin or one of
``ConsoleConfig.allowed_origins`` (403 otherwise): a page of another site can neither log in,
nor log out, nor command, nor use up the commander's login tries.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import json
import logging
import re
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from starlette.concurrency import run_in_threadpool
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.middleware.trustedhost import TrustedHostMiddleware

from mcc.bus.transport import Transport
from mcc.console import metrics
from mcc.console.auth import SESSION_TTL_S, LoginThrottle, SessionStore, User, UserStore
from mcc.console.bridge import BusBridge
from mcc.console.layout import Layout
from mcc.console.limits import StateLimits
from mcc.console.state import LiveState
from mcc.errors import MccError, RequestTimeoutError
from mcc.observe.audit import AuditLog

log = logging.getLogger("mcc.console")

STATIC_DIR = Path(__file__).resolve().parent / "static"
COOKIE = "mcc_session"
WS_UNAUTHORIZED = 4401
WS_FORBIDDEN = 4403
WS_ROLE_CHANGED = 4000
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
#: Host names every console answers to, beside its bound address and ``allowed_hosts``.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*\.?")


@dataclass
class ConsoleConfig:
    """How a console runs.

    Args:
        domain: the mission's DDS domain.
        users_path: operator accounts (`mcc console adduser`); sessions go beside it.
        audit_path: the audit log (JSON lines).
        mission: the mission name (None: whichever runs on the domain).
        layout: phases, assets, radar coverage, weapon specs (from files; may be empty).
        truth: also show the simulation's ``Truth`` (debugging).
        update_hz: the most state updates per second per browser.
        command_timeout_s: how long a command waits for the mission's answer.
        static_dir: the UI's files.
        allowed_hosts: host names (or addresses) the console answers to besides the loopback
            ones (``LOOPBACK_HOSTS``); `serve` adds the address it binds.
        allowed_origins: origins (``scheme://host[:port]``) allowed to send requests besides
            the console's own, e.g. a TLS proxy's ``https://toc.example``.
        limits: what the live state keeps and ships (`StateLimits`).
        transport: the bus transport (`mcc.console.commands.resolve_domain` finds the
            mission's); None: this process's environment.
    """

    domain: int
    users_path: Path
    audit_path: Path
    mission: str | None = None
    layout: Layout = field(default_factory=Layout)
    truth: bool = False
    update_hz: float = 10.0
    command_timeout_s: float = 5.0
    static_dir: Path = STATIC_DIR
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    limits: StateLimits = field(default_factory=StateLimits)
    transport: Transport | None = None

    def __post_init__(self) -> None:
        if not 0 < self.update_hz <= 10:
            raise MccError(f"update_hz = {self.update_hz}: use 0 < update_hz <= 10")
        self.allowed_hosts = tuple(host_pattern(h) for h in self.allowed_hosts)
        self.allowed_origins = tuple(origin_of(o) for o in self.allowed_origins)

    def host_allow_list(self) -> list[str]:
        """What the ``Host`` header may name (as Starlette's TrustedHostMiddleware takes it)."""
        hosts = [host_pattern(h) for h in LOOPBACK_HOSTS] + list(self.allowed_hosts)
        return list(dict.fromkeys(hosts))

    @property
    def sessions_path(self) -> Path:
        return self.users_path.with_name(self.users_path.stem + "-sessions.json")


class CommandRequest(BaseModel):
    """A control request from the browser."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    verb: Literal["phase", "start", "stop", "restart", "scale", "approve", "reject"]
    target: Annotated[str, Field(min_length=1, max_length=100)]
    size: Annotated[int, Field(ge=0, le=100_000)] | None = None

    @field_validator("target")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_./-]+", value):
            raise ValueError(
                "a phase, system, cluster or order id: letters, digits, '_', '.', '/', '-' only"
            )
        return value

    @model_validator(mode="after")
    def _verb_arguments(self) -> CommandRequest:
        if self.verb == "scale" and self.size is None:
            raise ValueError("scale needs 'size', the new number of workers")
        if self.verb != "scale" and self.size is not None:
            raise ValueError(f"{self.verb} takes no 'size'; only scale does")
        if self.verb in ("approve", "reject") and not self.target.isdigit():
            raise ValueError(f"{self.verb}: target must be the order id (a number)")
        return self

    def args(self) -> dict[str, Any]:
        return {"size": self.size} if self.verb == "scale" else {}


def _reason(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "body"
        message = str(err["msg"]).removeprefix("Value error, ")
        got = f" (got {err['input']!r})" if where != "body" and "input" in err else ""
        parts.append(f"{where}: {message}{got}")
    return "; ".join(parts)


class _SecurityHeaders(BaseHTTPMiddleware):
    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        if request.url.path.startswith("/api/"):
            response.headers.setdefault("Cache-Control", "no-store")
        return response


class Console:
    """The state of one console server (store, bridge, accounts, sessions, audit, figures)."""

    def __init__(self, config: ConsoleConfig, *, bridge: BusBridge | None = None) -> None:
        self.config = config
        self.state = LiveState(
            mission=config.mission,
            interceptor_speed_mps=config.layout.interceptor_speeds(),
            limits=config.limits,
        )
        self.bridge = bridge or BusBridge(
            self.state,
            domain=config.domain,
            mission=config.mission,
            truth=config.truth,
            command_timeout_s=config.command_timeout_s,
            transport=config.transport,
        )
        self.users = UserStore(config.users_path)
        self.sessions = SessionStore(config.sessions_path)
        self.throttle = LoginThrottle()
        self.audit = AuditLog(config.audit_path)
        self.figures = metrics.ServerFigures()
        self._lags_ms: deque[float] = deque(maxlen=2000)

    # -- sessions ----------------------------------------------------------------------------

    def user(self, token: str | None) -> User | None:
        name = self.sessions.lookup(token)
        return self.users.get(name) if name else None

    def _audit(
        self, request: Request, user: User | None, action: str, result: str, status: int, **kw: Any
    ) -> None:
        who = kw.pop("who", "anonymous")
        self.audit.record(
            who=user.name if user else who,
            role=user.role if user else "",
            action=action,
            result=result,
            status=status,
            remote=request.client.host if request.client else "",
            **kw,
        )

    # -- routes ------------------------------------------------------------------------------

    def _foreign(self, request: Request) -> tuple[int, str] | None:
        """``(status, why)`` when a state-changing request is refused before anything else:
        403 from another origin, 415 when its body is not declared JSON; else None."""
        if not _origin_allowed(
            request.headers.get("origin"), request.headers.get("host"), self.config
        ):
            return 403, "cross-origin request refused"
        if not _is_json(request):
            return 415, "send JSON (Content-Type: application/json)"
        return None

    async def login(self, request: Request) -> Response:
        remote = request.client.host if request.client else ""
        foreign = self._foreign(request)
        if foreign is not None:
            status, why = foreign
            result = "refused" if status == 403 else "invalid"
            self._count("logins", result)
            self._audit(request, None, "login", result, status, message=why)
            return _error(status, why)
        body = await _json_object(request)
        name, password = (body or {}).get("name"), (body or {}).get("password")
        if not isinstance(name, str) or not isinstance(password, str):
            self._count("logins", "invalid")
            return _error(422, 'send JSON {"name": ..., "password": ...}')
        # Reserved before the hash is computed: concurrent guesses count as they start.
        attempt = self.throttle.reserve(name, remote)
        if attempt is None:
            self._count("logins", "throttled")
            self._audit(request, None, "login", "refused", 429, who=name[:64], message="throttled")
            return _error(
                429,
                "too many failed logins for this operator or from this address; wait 5 minutes",
            )
        try:
            user = await run_in_threadpool(self.users.authenticate, name, password)
        except BaseException:
            attempt.failed()
            raise
        if user is None:
            attempt.failed()
            self._count("logins", "refused")
            self._audit(request, None, "login", "refused", 401, who=name[:64], message="bad login")
            return _error(401, "wrong operator name or password")
        attempt.succeeded()
        token = self.sessions.create(user.name)
        self._count("logins", "ok")
        self._audit(request, user, "login", "ok", 200)
        response = JSONResponse({"name": user.name, "role": user.role})
        response.set_cookie(
            COOKIE,
            token,
            max_age=int(SESSION_TTL_S),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        return response

    async def logout(self, request: Request) -> Response:
        token = request.cookies.get(COOKIE)
        user = self.user(token)
        foreign = self._foreign(request)
        if foreign is not None:
            status, why = foreign
            self._audit(request, user, "logout", "refused", status, message=why)
            return _error(status, why)
        self.sessions.revoke(token)
        if user is not None:
            self._audit(request, user, "logout", "ok", 200)
        response = JSONResponse({"ok": True})
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response

    async def command(self, request: Request) -> Response:
        user = self.user(request.cookies.get(COOKIE))
        body = await _json_object(request)
        attempted = _attempted(body)
        if user is None:
            return self._refuse(request, None, attempted, 401, "log in first")
        if not user.may_command:
            return self._refuse(
                request,
                user,
                attempted,
                403,
                f"{user.name} is an observer: commands need the commander role",
            )
        foreign = self._foreign(request)
        if foreign is not None:
            status, why = foreign
            result = "refused" if status == 403 else "invalid"
            return self._refuse(request, user, attempted, status, why, result)
        if body is None:
            return self._refuse(
                request, user, attempted, 422, "the body must be a JSON object", "invalid"
            )
        try:
            req = CommandRequest.model_validate(body)
        except ValidationError as exc:
            return self._refuse(request, user, attempted, 422, _reason(exc), "invalid")
        what: dict[str, Any] = {"action": req.verb, "target": req.target, "args": req.args()}
        try:
            result = await run_in_threadpool(
                self.bridge.command, req.verb, req.target, req.args(), user=user.name
            )
        except RequestTimeoutError as exc:
            self._count("commands", "timeout")
            self._audit(request, user, result="timeout", status=504, message=str(exc), **what)
            return _error(504, str(exc))
        except MccError as exc:
            self._count("commands", "failed")
            self._audit(request, user, result="failed", status=409, message=str(exc), **what)
            return _error(409, str(exc))
        message = f"{req.verb} {req.target}" + (f" {req.size}" if req.size is not None else "")
        self._count("commands", "ok")
        self._audit(request, user, result="ok", status=200, message=message, **what)
        return JSONResponse({"ok": True, "message": message, "result": result})

    def _refuse(
        self,
        request: Request,
        user: User | None,
        attempted: dict[str, Any],
        status: int,
        detail: str,
        result: str = "refused",
    ) -> Response:
        self._count("commands", result)
        self._audit(request, user, result=result, status=status, message=detail, **attempted)
        return _error(status, detail)

    def _count(self, kind: str, result: str) -> None:
        table = getattr(self.figures, kind)
        table[result] = table.get(result, 0) + 1

    def metrics_text(self) -> str:
        self.figures.bus_to_client_ms = list(self._lags_ms)
        self.figures.bus_secured = self.bridge.secured
        self.figures.snapshot_bytes = self.state.snapshot_bytes
        return metrics.render(
            self.state.snapshot(),
            dict(self.state.samples),
            self.figures,
            dropped=dict(self.state.dropped),
            left_out=dict(self.state.left_out_total),
        )

    # -- websocket ---------------------------------------------------------------------------

    async def websocket(self, ws: WebSocket) -> None:
        if not _origin_allowed(ws.headers.get("origin"), ws.headers.get("host"), self.config):
            await ws.close(code=WS_FORBIDDEN)
            return
        token = ws.cookies.get(COOKIE)
        user = self.user(token)
        await ws.accept()
        if user is None:
            await ws.send_text(json.dumps({"type": "error", "status": 401, "detail": "log in"}))
            await ws.close(code=WS_UNAUTHORIZED)
            return
        hello = {
            "type": "hello",
            "user": user.name,
            "role": user.role,
            "layout": self.config.layout.to_json(),
            "update_hz": self.config.update_hz,
            "domain": self.config.domain,
            "secured": self.bridge.secured,
        }
        await ws.send_text(json.dumps(hello))
        self.figures.clients += 1
        sender = asyncio.create_task(self._send_loop(ws, token, user.role))
        try:
            while True:
                await ws.receive_text()  # nothing to do with what the page says: pings
        except WebSocketDisconnect:
            pass
        finally:
            sender.cancel()
            self.figures.clients -= 1

    async def _send_loop(self, ws: WebSocket, token: str | None, role: str) -> None:
        """Send the latest snapshot at most ``update_hz`` times a second (skipping the ones a
        slow browser could not take: each send is of the newest state). A logout or a removed
        account ends the feed (4401: to the login page); a changed role closes it with 4000,
        and the page reconnects with its new role."""
        period_s = 1.0 / self.config.update_hz
        sent_version, sent_at, sent_picture = -1, 0.0, 0
        checked_at = time.monotonic()
        try:
            while True:
                await asyncio.sleep(period_s)
                now = time.monotonic()
                if now - checked_at >= 1.0:
                    checked_at = now
                    user = self.user(token)
                    if user is None:
                        await ws.send_text(json.dumps({"type": "error", "status": 401}))
                        await ws.close(code=WS_UNAUTHORIZED)
                        return
                    if user.role != role:
                        await ws.close(code=WS_ROLE_CHANGED)
                        return
                if self.state.version == sent_version and now - sent_at < 1.0:
                    continue
                version, text = self.state.snapshot_json()
                await ws.send_text(text)
                self.figures.updates_sent += 1
                sent_version, sent_at = version, now
                picture = self.state.latest_picture()
                if picture is not None and picture["publish_ns"] != sent_picture:
                    sent_picture = picture["publish_ns"]
                    self._lags_ms.append((time.time_ns() - sent_picture) / 1e6)
        except (WebSocketDisconnect, RuntimeError):
            return  # the page went away mid-send


MAX_BODY_BYTES = 16_384


async def _json_object(request: Request) -> dict[str, Any] | None:
    """The request's JSON object; None when it is not one (or is too large to be one of ours)."""
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        return None
    try:
        body = json.loads(raw or b"null")
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _attempted(body: dict[str, Any] | None) -> dict[str, Any]:
    """What a request asked for, as far as it can be told (for the audit log)."""
    body = body or {}
    args = {"size": body["size"]} if "size" in body else {}
    return {
        "action": str(body.get("verb", "?"))[:40],
        "target": str(body.get("target", ""))[:100],
        "args": args,
    }


def _origin_allowed(origin: str | None, host: str | None, config: ConsoleConfig) -> bool:
    """No Origin (not a browser, or a same-origin GET), one naming this host (the ``Host``
    header, itself checked against the allow-list) or an allowed one (``Origin: null`` is
    none of these)."""
    if origin is None:
        return True
    if origin.strip().lower() in config.allowed_origins:
        return True
    netloc = urlsplit(origin.strip()).netloc.lower()
    return bool(netloc) and netloc == (host or "").strip().lower()


def _is_json(request: Request) -> bool:
    """Whether the body is declared JSON: a page of another site cannot send that type
    without the browser asking first (a CORS preflight this server never allows)."""
    media_type = request.headers.get("content-type", "").split(";", 1)[0]
    return media_type.strip().lower() == "application/json"


def host_pattern(host: str) -> str:
    """``host`` as the ``Host`` header names it: lower case, IPv6 addresses in brackets;
    ``MccError`` for a wildcard or something that is not a host name or address."""
    text = host.strip().lower()
    bare = text.removeprefix("[").removesuffix("]")
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        if not _HOSTNAME.fullmatch(text):
            raise MccError(
                f"allowed host {host!r}: use a host name or an address, e.g. toc.example or "
                "10.0.0.5 (no wildcards, no port)"
            ) from None
        return text
    return f"[{address}]" if address.version == 6 else str(address)


def origin_of(origin: str) -> str:
    """``origin`` (``scheme://host[:port]``) as browsers send it; ``MccError`` otherwise."""
    parts = urlsplit(origin.strip().lower())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
        raise MccError(
            f"allowed origin {origin!r}: use scheme://host[:port], e.g. https://toc.example"
        )
    return f"{parts.scheme}://{parts.netloc}"


def _error(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status)


def create_app(config: ConsoleConfig, *, bridge: BusBridge | None = None) -> FastAPI:
    """The ASGI app; the bus bridge opens at startup and closes at shutdown."""
    console = Console(config, bridge=bridge)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(console.bridge.start)
        try:
            yield
        finally:
            await run_in_threadpool(console.bridge.close)
            console.audit.close()

    app = FastAPI(
        title="MCC tactical console",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.console = console
    app.add_middleware(_SecurityHeaders)
    # Outermost: a request naming another host (DNS rebinding) gets 400 and nothing else.
    app.add_middleware(
        TrustedHostMiddleware, allowed_hosts=config.host_allow_list(), www_redirect=False
    )
    static = config.static_dir

    @app.get("/", include_in_schema=False)
    async def index(request: Request) -> Response:
        if console.user(request.cookies.get(COOKIE)) is None:
            return RedirectResponse("/login", status_code=303)
        return FileResponse(static / "index.html")

    @app.get("/login", include_in_schema=False)
    async def login_page() -> Response:
        return FileResponse(static / "login.html")

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"ok": True, "bus_samples": sum(console.state.samples.values())}

    @app.get("/metrics")
    async def metrics_page() -> Response:
        return Response(console.metrics_text(), media_type=metrics.CONTENT_TYPE)

    def authed(request: Request) -> User | None:
        return console.user(request.cookies.get(COOKIE))

    @app.get("/api/me")
    async def me(request: Request) -> Response:
        user = authed(request)
        if user is None:
            return _error(401, "log in first")
        return JSONResponse({"name": user.name, "role": user.role})

    @app.get("/api/state")
    async def state(request: Request) -> Response:
        if authed(request) is None:
            return _error(401, "log in first")
        return Response(console.state.snapshot_json()[1], media_type="application/json")

    @app.get("/api/layout")
    async def layout(request: Request) -> Response:
        if authed(request) is None:
            return _error(401, "log in first")
        return JSONResponse(config.layout.to_json())

    @app.get("/api/audit")
    async def audit(request: Request, limit: int = 50) -> Response:
        if authed(request) is None:
            return _error(401, "log in first")
        return JSONResponse(console.audit.recent(max(1, min(limit, 200))))

    app.add_api_route("/api/login", console.login, methods=["POST"])
    app.add_api_route("/api/logout", console.logout, methods=["POST"])
    app.add_api_route("/api/command", console.command, methods=["POST"])
    app.add_api_websocket_route("/ws", console.websocket)
    app.mount("/static", StaticFiles(directory=static), name="static")
    return app


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket on ``host:port`` (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise MccError(
            f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port "
            "(0 = any free port)"
        ) from None
    sock.set_inheritable(True)
    return sock


def serve(
    config: ConsoleConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    tls_cert: str | Path | None = None,
    tls_key: str | Path | None = None,
    on_ready: Callable[[str, bool | None], None] | None = None,
) -> None:
    """Serve the console until SIGINT/SIGTERM: HTTPS with ``tls_cert`` and ``tls_key`` (PEM
    files, e.g. from `mcc.security.tls.server_certificate`), else plain HTTP. ``on_ready(url,
    secured)`` once it accepts requests (``secured``: whether its bus joined with DDS Security).
    The address it binds is added to the hosts it answers to."""
    import uvicorn

    if (tls_cert is None) != (tls_key is None):
        raise MccError("TLS needs both --tls-cert and --tls-key (PEM files)")
    if tls_cert is not None and tls_key is not None:
        check_tls_files(tls_cert, tls_key)
    if host not in ("0.0.0.0", "::", ""):
        config = dataclasses.replace(config, allowed_hosts=(*config.allowed_hosts, host))
    sock = bind_socket(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"{'https' if tls_cert else 'http'}://{shown}:{bound}/"
    app = create_app(config)
    console: Console = app.state.console

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if on_ready is not None and not self.should_exit:
                on_ready(url, console.bridge.secured)

    uv_config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="on",
        ws="websockets-sansio",
        timeout_graceful_shutdown=2,
        proxy_headers=False,
        ssl_certfile=str(tls_cert) if tls_cert else None,
        ssl_keyfile=str(tls_key) if tls_key else None,
    )
    _Server(uv_config).run(sockets=[sock])


def check_tls_files(cert: str | Path, key: str | Path) -> None:
    """``MccError`` naming the file and the fix unless ``cert`` and ``key`` are a PEM
    certificate (chain) and its private key."""
    import ssl

    for what, path in (("--tls-cert", cert), ("--tls-key", key)):
        if not Path(path).is_file():
            raise MccError(
                f"{what} {path}: no such file; make one with "
                "`mcc security tls KEYSTORE --host NAME` (docs/console.md)"
            )
    try:
        # An empty password: an encrypted key fails here rather than prompt on the terminal.
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(cert), str(key), password="")
    except (ssl.SSLError, ValueError) as exc:
        raise MccError(
            f"--tls-cert {cert} / --tls-key {key}: not a PEM certificate and its private key "
            f"({exc}); make them with `mcc security tls KEYSTORE --host NAME`"
        ) from None
