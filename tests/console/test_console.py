"""The console's rules without a broker: access, login, forms, strategies, and pages rendered
from canned answers (a KIP-848 consumer group among them)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import pytest
import trio

from admin.errors import GroupStateError, UsageError
from admin.plan import BY_DURATION, EARLIEST, SHIFT_BY, TO_DATETIME, TO_OFFSET
from broker import http
from broker.config import Config
from broker.metrics import registry
from console import actions, data
from console.access import (
    Credentials,
    Sessions,
    broker_sasl_mechanisms,
    csrf_ok,
    is_loopback,
    policy,
)
from console.app import Console
from console.data import GroupDetail, MemberView, PartitionView
from console.rates import CommitRate

# --- access ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("host", "loopback"), [("127.0.0.1", True), ("127.3.4.5", True), ("::1", True),
                                                ("localhost", True), ("0.0.0.0", False), ("10.1.2.3", False),
                                                ("kcoord.example", False)])
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_who_may_change_what() -> None:
    assert policy("127.0.0.1", ()) .read_only_reason is None
    open_wide = policy("0.0.0.0", ())
    assert not open_wide.login_required and "changes nothing" in (open_wide.read_only_reason or "")
    with_sasl = policy("0.0.0.0", ("SCRAM-SHA-256",))
    assert with_sasl.login_required and with_sasl.read_only_reason is None


def test_the_broker_config_says_whether_clients_authenticate() -> None:
    assert broker_sasl_mechanisms(Config(), "PLAINTEXT") == ()
    assert broker_sasl_mechanisms(Config(), "SSL") == ()
    assert broker_sasl_mechanisms({"sasl.enabled.mechanisms": "plain, SCRAM-SHA-512"}, "SASL_SSL") == (
        "PLAIN", "SCRAM-SHA-512")
    assert broker_sasl_mechanisms({"sasl.enabled.mechanisms": ["PLAIN"]}, "SASL_PLAINTEXT") == ("PLAIN",)


def test_sessions_expire_and_hide_passwords() -> None:
    sessions = Sessions(seconds=60)
    alice = Credentials("PLAIN", "alice", "s3cret")
    token = sessions.create(alice)
    assert sessions.get(token) == alice and sessions.get("guess") is None and sessions.get(None) is None
    assert "s3cret" not in repr(alice)
    sessions.drop(token)
    assert sessions.get(token) is None
    expired = Sessions(seconds=-1)
    assert expired.get(expired.create(alice)) is None


def test_form_tokens_must_match_the_cookie() -> None:
    assert csrf_ok("abc", "abc")
    assert not csrf_ok("abc", "abd") and not csrf_ok(None, "abc") and not csrf_ok("", "")


# --- strategies ------------------------------------------------------------------------------


def test_the_form_strategies_are_the_cli_strategies() -> None:
    assert [name for name, _, _ in actions.STRATEGIES] == [
        "to-earliest", "to-latest", "to-offset", "shift-by", "to-datetime", "by-duration", "to-nearest",
        "restore-as-of"]
    assert actions.parse_strategy(EARLIEST, "")[0].name == EARLIEST
    assert actions.parse_strategy(TO_OFFSET, " 42 ")[0].value == 42
    assert actions.parse_strategy(SHIFT_BY, "-5")[0].value == -5
    assert actions.parse_strategy(TO_DATETIME, "2026-01-05T10:00:00Z")[0].value == 1767607200000
    strategy, action = actions.parse_strategy(BY_DURATION, "PT15M", now_ms=1767607200000)
    assert strategy.value == 1767607200000 - 15 * 60_000 and "PT15M" in action
    restore, action = actions.parse_strategy(actions.RESTORE_AS_OF, "1767607200000")
    assert restore.value == 1767607200000 and action == "restore as of 2026-01-05T10:00:00.000Z"


@pytest.mark.parametrize(("name", "value"), [("to-offset", "-1"), ("to-offset", "x"), ("shift-by", "1.5"),
                                             ("to-datetime", "yesterday"), ("by-duration", "15m"),
                                             ("delete-everything", "")])
def test_bad_strategy_input_is_a_usage_error(name: str, value: str) -> None:
    with pytest.raises(UsageError):
        actions.parse_strategy(name, value)


def test_the_commit_rate_is_per_second_between_samples() -> None:
    counts = iter([0, 10, 10, 40])
    rate = CommitRate(lambda: next(counts))
    for t in (100.0, 105.0, 110.0, 120.0):
        rate.sample(t)
    assert rate.points() == [(105000, 2.0), (110000, 0.0), (120000, 3.0)]


# --- pages from canned answers ---------------------------------------------------------------


CONSUMER_GROUP = GroupDetail(
    group="kip848-group", state="Reconciling", group_type="consumer", protocol_type="consumer",
    protocol="uniform", coordinator=None,
    members=[MemberView("m-1", None, "app-1", "/10.0.0.1", ["orders"], [("orders", 0)],
                        [("orders", 0), ("orders", 1)], 7)],
    partitions=[PartitionView("orders", 0, 5, 9, 4, "m-1", "app-1", "/10.0.0.1")],
    epochs={"group_epoch": 8, "assignment_epoch": 8, "assignor": "uniform"},
)


@dataclass
class FakeClient:
    credentials: Credentials | None
    calls: list[str] = field(default_factory=list)

    def close(self) -> None:
        pass

    def metadata(self, topics: Any = None) -> None:
        if self.credentials is not None and self.credentials.password != "right":
            from admin.errors import BrokerError

            raise BrokerError("SaslAuthenticate failed: SASL_AUTHENTICATION_FAILED (58)")


@dataclass
class Served:
    base: str
    console: Console
    connected: list[Credentials | None]

    def client(self) -> Browserless:
        return Browserless(self.base)


class Browserless:
    """urllib with cookies and without following redirects."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = CookieJar()

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: Any) -> None:
                return None

        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar), NoRedirect)

    def request(self, path: str, form: dict[str, Any] | None = None) -> tuple[int, dict[str, str], str]:
        body = None if form is None else urllib.parse.urlencode(form, doseq=True).encode()
        try:
            with self.opener.open(self.base + path, data=body, timeout=10) as response:
                return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read().decode()

    def csrf(self) -> str:
        return next(c.value for c in self.jar if c.name == "kcoord_console_csrf")


async def _serve(nursery: trio.Nursery, tmp_path: Path, http_host: str = "127.0.0.1",
                 config: Any = None, security_protocol: str = "PLAINTEXT") -> Served:
    connected: list[Credentials | None] = []

    def connect(bootstrap: str, credentials: Credentials | None) -> Any:
        connected.append(credentials)
        return FakeClient(credentials)

    context = http.HttpContext(bootstrap="127.0.0.1:9", http_host=http_host, data_dir=tmp_path,
                               config=config if config is not None else Config(), registry=registry(list),
                               healthy=lambda: True, offsets_committed=lambda: 0,
                               security_protocol=security_protocol)
    console = Console(context, connect)
    sock = http.bind("127.0.0.1", 0)
    await nursery.start(http.serve, http.build_app(context, console.routes()), sock)
    return Served(f"http://127.0.0.1:{sock.getsockname()[1]}", console, connected)


@pytest.fixture
def canned(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    answers: dict[str, Any] = {"detail": CONSUMER_GROUP, "commit": None}

    def group_detail(client: Any, group: str) -> GroupDetail:
        return answers["detail"]  # type: ignore[no-any-return]

    def commit_plan(client: Any, group: str, offsets: Any) -> None:
        if answers["commit"] is not None:
            raise answers["commit"]

    monkeypatch.setattr(data, "group_detail", group_detail)
    monkeypatch.setattr(actions, "commit_plan", commit_plan)
    return answers


async def _run(work: Callable[[], Any]) -> Any:
    return await trio.to_thread.run_sync(work)


async def test_a_kip848_consumer_group_shows_epochs_and_target_assignments(
        nursery: trio.Nursery, tmp_path: Path, canned: dict[str, Any]) -> None:
    served = await _serve(nursery, tmp_path)
    status, _, page = await _run(lambda: served.client().request("/groups/kip848-group"))
    assert status == 200
    assert re.search(r'id="group-type">consumer<', page) and re.search(r'id="group-epoch">8<', page)
    assert "target assignment" in page and "reconciling" in page
    assert '<span class="tp">orders-1</span>' in page  # in the target, not yet owned


async def test_changes_need_the_form_token_and_a_group_without_members(
        nursery: trio.Nursery, tmp_path: Path, canned: dict[str, Any]) -> None:
    served = await _serve(nursery, tmp_path)
    client = served.client()
    offsets = json.dumps([{"topic": "orders", "partition": 0, "offset": 1, "leader_epoch": -1, "metadata": ""}])
    await _run(lambda: client.request("/groups/g"))  # sets the token cookie
    status, _, page = await _run(lambda: client.request("/groups/g/reset/commit",
                                                        {"csrf": "forged", "offsets": offsets}))
    assert status == 403 and "token did not match" in page
    canned["commit"] = GroupStateError("group 'g' is Stable with 1 member: offsets can only be reset while it is Empty")
    status, _, page = await _run(lambda: client.request("/groups/g/reset/commit",
                                                        {"csrf": client.csrf(), "offsets": offsets}))
    assert status == 409 and "while it is Empty" in page
    canned["commit"] = None
    status, headers, _ = await _run(lambda: client.request("/groups/g/reset/commit",
                                                           {"csrf": client.csrf(), "offsets": offsets,
                                                            "action": "reset to-offset 1"}))
    assert status == 303 and headers["location"].startswith("/groups/g?notice=Committed%201%20offset")


async def test_off_loopback_without_authentication_the_console_only_shows(
        nursery: trio.Nursery, tmp_path: Path, canned: dict[str, Any]) -> None:
    served = await _serve(nursery, tmp_path, http_host="0.0.0.0")
    client = served.client()
    status, _, page = await _run(lambda: client.request("/groups/kip848-group"))
    assert status == 200 and "changes nothing" in page and "reset-link" not in page
    status, _, page = await _run(lambda: client.request("/groups/g/delete", {"csrf": client.csrf(),
                                                                            "confirm_name": "g"}))
    assert status == 403 and "changes nothing" in page


async def test_with_broker_authentication_the_console_logs_in_and_acts_as_that_principal(
        nursery: trio.Nursery, tmp_path: Path, canned: dict[str, Any]) -> None:
    served = await _serve(nursery, tmp_path, config={"sasl.enabled.mechanisms": "PLAIN"},
                          security_protocol="SASL_PLAINTEXT")
    client = served.client()
    status, headers, _ = await _run(lambda: client.request("/groups/kip848-group"))
    assert status == 303 and headers["location"] == "/login?next=/groups/kip848-group"
    status, _, page = await _run(lambda: client.request("/login?next=/groups/kip848-group"))
    assert status == 200 and 'name="password"' in page
    form = {"csrf": client.csrf(), "mechanism": "PLAIN", "username": "alice"}
    status, _, page = await _run(lambda: client.request("/login?next=/groups/kip848-group",
                                                        {**form, "password": "wrong"}))
    assert status == 401 and "SASL_AUTHENTICATION_FAILED" in page
    status, headers, _ = await _run(lambda: client.request("/login?next=/groups/kip848-group",
                                                           {**form, "password": "right"}))
    assert status == 303 and headers["location"] == "/groups/kip848-group"
    status, _, page = await _run(lambda: client.request("/groups/kip848-group"))
    assert status == 200 and "alice" in page and "reset-link" in page
    assert served.connected[-1] == Credentials("PLAIN", "alice", "right")
    assert None not in served.connected  # never as nobody
