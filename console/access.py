"""Who may use the console, as whom, and the admin clients it acts through.

The console acts on the broker as a Kafka admin client, so the broker decides what each
request may do. Three cases:

- **Loopback listener, broker without authentication**: no login; whoever can reach the
  port can already reach the Kafka port with the same rights.
- **Any other listener, broker without authentication**: the pages are shown, but changes
  (reset, delete) are refused: nothing would tell who asked for them.
- **Broker with authentication** (SASL): the console asks for SASL credentials, keeps them
  in a server-side session (the browser holds only a random token), and connects as that
  principal, so ACLs apply to what it shows and does.

The console reaches its broker through the broker's first listener. When that listener is a
SASL one (SASL_PLAINTEXT or SASL_SSL), the broker's ``sasl.enabled.mechanisms`` are offered
at login and ``connect`` authenticates the admin client as the logged-in principal. Over TLS
the console trusts the broker's ``ssl.truststore.location`` when one is set; without one it
does not verify the certificate, since the connection never leaves this machine.

Forms that change something carry a token that must equal a cookie (double submit), so
another site cannot post them from a visitor's browser.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from admin.client import AdminClient
from admin.errors import AdminError, UnreachableError, UsageError
from admin.security import ClientSecurity

T = TypeVar("T")

SESSION_COOKIE = "kcoord_console_session"
CSRF_COOKIE = "kcoord_console_csrf"
SESSION_SECONDS = 8 * 3600
ADMIN_TIMEOUT = 10.0


@dataclass(frozen=True)
class Credentials:
    """A SASL principal's credentials, held only in the server's memory."""

    mechanism: str
    username: str
    password: str

    def __repr__(self) -> str:
        return f"Credentials({self.mechanism!r}, {self.username!r}, password=...)"


@dataclass(frozen=True)
class Policy:
    login_required: bool
    mechanisms: tuple[str, ...]
    #: Without a login: why changes are refused (None: they are allowed).
    read_only_reason: str | None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def broker_sasl_mechanisms(config: Mapping[str, Any], security_protocol: str) -> tuple[str, ...]:
    """The SASL mechanisms the console's Kafka listener requires; () when it is not a SASL one."""
    if security_protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return ()
    raw = config.get("sasl.enabled.mechanisms") if "sasl.enabled.mechanisms" in config else None
    if not raw:
        return ()
    items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
    return tuple(str(m).strip().upper() for m in items if str(m).strip())


def policy(http_host: str, mechanisms: tuple[str, ...]) -> Policy:
    if mechanisms:
        return Policy(True, mechanisms, None)
    if is_loopback(http_host):
        return Policy(False, (), None)
    return Policy(False, (), f"this console listens on {http_host}, not a loopback address, and the broker "
                             "has no authentication: it shows, but changes nothing. Listen on 127.0.0.1 (or "
                             "turn on the broker's authentication) to reset or delete from here.")


def connect(bootstrap: str, credentials: Credentials | None, *, security_protocol: str = "PLAINTEXT",
            truststore: str | None = None) -> AdminClient:
    """An admin client of the broker over its listener's protocol, as ``credentials`` when given."""
    if security_protocol == "PLAINTEXT":
        return AdminClient(bootstrap, ADMIN_TIMEOUT)
    sasl = security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")
    if sasl and credentials is None:
        raise UsageError("the broker's listener asks for SASL credentials: log in first")
    security = ClientSecurity(
        protocol=security_protocol,
        mechanism=credentials.mechanism if sasl and credentials else "PLAIN",
        username=credentials.username if sasl and credentials else None,
        password=credentials.password if sasl and credentials else None,
        cafile=truststore, verify=truststore is not None)
    return AdminClient(bootstrap, ADMIN_TIMEOUT, security=security)


def connector(security_protocol: str, config: Mapping[str, Any]) -> Callable[[str, Credentials | None], AdminClient]:
    """``connect`` for the broker's own listener of ``security_protocol``."""
    truststore = config.get("ssl.truststore.location") if "ssl.truststore.location" in config else None

    def connect_to_broker(bootstrap: str, credentials: Credentials | None) -> AdminClient:
        return connect(bootstrap, credentials, security_protocol=security_protocol,
                       truststore=str(truststore) if truststore else None)

    return connect_to_broker


class Sessions:
    """Logged-in principals by random token, expiring ``SESSION_SECONDS`` after login."""

    def __init__(self, seconds: float = SESSION_SECONDS) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._by_token: dict[str, tuple[float, Credentials]] = {}

    def create(self, credentials: Credentials) -> str:
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._by_token[token] = (time.monotonic() + self.seconds, credentials)
        return token

    def get(self, token: str | None) -> Credentials | None:
        if not token:
            return None
        with self._lock:
            found = self._by_token.get(token)
            if found is None:
                return None
            if found[0] < time.monotonic():
                del self._by_token[token]
                return None
            return found[1]

    def drop(self, token: str | None) -> None:
        with self._lock:
            self._by_token.pop(token or "", None)


class Clients:
    """Admin clients kept per principal and reused, each used by one thread at a time."""

    def __init__(self, bootstrap: str,
                 connect: Callable[[str, Credentials | None], AdminClient] = connect) -> None:
        self.bootstrap = bootstrap
        self.connect = connect
        self._lock = threading.Lock()
        self._idle: dict[Credentials | None, list[AdminClient]] = {}

    def run(self, credentials: Credentials | None, work: Callable[[AdminClient], T]) -> T:
        """``work`` with a client of this principal.

        A kept client whose connection broke while idle (the broker restarted) is dropped
        and ``work`` runs once more on a new one.
        """
        while True:
            client, kept = self._take(credentials)
            try:
                result = work(client)
            except UnreachableError:
                client.close()
                if kept:
                    continue
                raise
            except AdminError:
                self._give_back(credentials, client)  # the broker answered: the client is fine
                raise
            except BaseException:
                client.close()
                raise
            self._give_back(credentials, client)
            return result

    def _take(self, credentials: Credentials | None) -> tuple[AdminClient, bool]:
        with self._lock:
            idle = self._idle.get(credentials)
            if idle:
                return idle.pop(), True
        return self.connect(self.bootstrap, credentials), False

    def _give_back(self, credentials: Credentials | None, client: AdminClient) -> None:
        with self._lock:
            idle = self._idle.setdefault(credentials, [])
            if len(idle) < 4:
                idle.append(client)
                return
        client.close()

    def close(self) -> None:
        with self._lock:
            clients = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for client in clients:
            client.close()


def new_csrf_token() -> str:
    return secrets.token_urlsafe(24)


def csrf_ok(cookie: str | None, submitted: str | None) -> bool:
    return bool(cookie) and bool(submitted) and hmac.compare_digest(str(cookie), str(submitted))
