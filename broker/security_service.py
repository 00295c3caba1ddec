"""Credentials, ACLs and the authorizer inside the trio shell.

Opens the security log, replays it into ``security.state``, applies the bootstrap file,
and serves the ACL and SCRAM admin APIs: each change is appended as one batch and
answered only once it is fsynced (group commit, as the coordinator's replies). The
authorizer is rebuilt from the ACLs whenever they change. Also counts logins per
mechanism and denials per API, and writes the audit log (``kcoord.audit``): one line per
denied operation and per ACL or credential change, never a password or a key.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from broker.metrics import Family, counter, gauge
from broker.slots import Slot, set_all
from protocol.codec import Request, encode_response
from protocol.errors import ErrorCode
from security import management
from security.acl import AclOperation, ResourceType
from security.authorizer import Authorizer
from security.scram import ScramCredential
from security.state import SecurityState
from storage.fs import REAL_FS, FileSystem
from storage.group_commit import GroupCommit
from storage.journal import Journal
from storage.security_log import SecurityLog

log = logging.getLogger("kcoord.security")
audit = logging.getLogger("kcoord.audit")

AUTHORIZERS = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer", "kafka.security.authorizer.AclAuthorizer")


def _raise(what: str, error: OSError) -> None:
    log.error("%s failed: %s", what, error)
    raise error


class SecurityService:
    def __init__(self, config: Any, security_log: SecurityLog, durable: bool = True,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.config = config
        self.log = security_log
        self.durable = durable
        self.clock_ms = clock_ms
        self.state = SecurityState()
        self.enabled_mechanisms = tuple(m.strip() for m in config["sasl.enabled.mechanisms"].split(",") if m.strip())
        self.authorizer: Authorizer | None = None
        if config["authorizer.class.name"] in AUTHORIZERS:
            self.authorizer = Authorizer(
                super_users=[p.strip() for p in config["super.users"].split(";") if p.strip()],
                allow_everyone_if_no_acl_found=config["allow.everyone.if.no.acl.found"])
        self._acl_version = -1
        self.on_storage_failure: Callable[[str, OSError], None] = _raise
        self.stopped = False
        self._journal = Journal()
        self.commit = GroupCommit(self._journal, durable=durable, on_failure=self._sync_failed,
                                  name="security log", release=set_all)
        # Metrics: plain counters, read at scrape time.
        self.logins: dict[tuple[str, str], int] = {}  # (mechanism, "success" | "failure") -> count
        self.denials: dict[str, int] = {}  # API name -> denied requests

    @classmethod
    def open(cls, config: Any, data_dir: Path, fs: FileSystem = REAL_FS) -> SecurityService:
        service = cls(config, SecurityLog(data_dir, fs), durable=config["log.flush.policy"] == "durable")
        count = 0
        for key, value in service.log.replay():
            service.state.replay(key, value)
            count += 1
        bootstrap = config["scram.credentials.bootstrap.file"]
        if bootstrap:
            try:
                text = Path(bootstrap).read_text()
                records, users = management.bootstrap_credentials(service.state, text)
            except (OSError, ValueError) as exc:
                raise RuntimeError(f"scram.credentials.bootstrap.file {bootstrap}: {exc}") from None
            if records:
                service.log.append(records, service.clock_ms())
                service.log.flush()
                service.state.apply(records)
                for user in users:
                    audit.info("SCRAM credential bootstrapped from the configuration: user=%s", user)
        service._refresh_authorizer()
        log.info("loaded %d security records: %d users, %d ACLs", count, len(service.state.credentials),
                 len(service.state.acls))
        return service

    # ---------------------------------------------------------------- what the shell asks

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.state.credential(user, mechanism)

    def login(self, mechanism: str, ok: bool) -> None:
        key = (mechanism, "success" if ok else "failure")
        self.logins[key] = self.logins.get(key, 0) + 1

    def denied(self, api: str, principal: str, host: str, denied: list[tuple[AclOperation, ResourceType, str]]
               ) -> None:
        """One denied request: count it, and one audit line per operation refused."""
        self.denials[api] = self.denials.get(api, 0) + 1
        for op, rtype, name in denied:
            audit.info("authorization denied", extra={
                "principal": principal, "host": host, "api": api, "operation": op.name,
                "resource": f"{rtype.name}:{name}"})

    def _refresh_authorizer(self) -> None:
        if self.authorizer is not None and self._acl_version != self.state.acl_version:
            self.authorizer.replace(self.state.acls)
            self._acl_version = self.state.acl_version

    # ---------------------------------------------------------------- admin APIs

    def _write(self, request: Request, outcome: management.Outcome) -> Slot | dict[str, Any] | None:
        """Append the outcome's records, replay them, and answer once they are durable."""
        if self.stopped:
            return None
        if not outcome.records:
            return outcome.body
        try:
            self.log.append(outcome.records, self.clock_ms())
        except OSError as exc:
            self.stopped = True
            self.on_storage_failure("appending to the security log", exc)
            return None
        self.state.apply(outcome.records)
        self._refresh_authorizer()
        for line in outcome.audit:
            audit.info(line)
        seq = self._journal.mark(self.log)
        self.commit.appended()
        header = request.header
        slot = Slot(header.api_key, header.api_version, header.correlation_id)
        slot.frame = encode_response(header.api_key, header.api_version, header.correlation_id, outcome.body)
        self.commit.reply_when_durable(seq, slot)
        return slot

    def _disabled(self, request: Request, field: str, count: int) -> dict[str, Any]:
        error = {"error_code": int(ErrorCode.SECURITY_DISABLED), "error_message": "No Authorizer is configured."}
        if field == "resources":
            return {"throttle_time_ms": 0, **error, "resources": []}
        extra: dict[str, Any] = {"matching_acls": []} if field == "filter_results" else {}
        return {"throttle_time_ms": 0, field: [{**error, **extra} for _ in range(count)]}

    def create_acls(self, request: Request, principal: str) -> Slot | dict[str, Any] | None:
        if self.authorizer is None:
            return self._disabled(request, "results", len(request.body.creations))
        return self._write(request, management.create_acls(self.state, request.body, principal))

    def describe_acls(self, request: Request) -> dict[str, Any]:
        if self.authorizer is None:
            return self._disabled(request, "resources", 0)
        return management.describe_acls(self.state, request.body)

    def delete_acls(self, request: Request, principal: str) -> Slot | dict[str, Any] | None:
        if self.authorizer is None:
            return self._disabled(request, "filter_results", len(request.body.filters))
        return self._write(request, management.delete_acls(self.state, request.body, principal))

    def describe_user_scram_credentials(self, request: Request) -> dict[str, Any]:
        return management.describe_user_scram_credentials(self.state, request.body)

    def alter_user_scram_credentials(self, request: Request, principal: str) -> Slot | dict[str, Any] | None:
        return self._write(request, management.alter_user_scram_credentials(self.state, request.body, principal))

    # ---------------------------------------------------------------- lifecycle

    def _sync_failed(self, exc: OSError) -> None:
        self.stopped = True
        self.on_storage_failure("fsync of the security log", exc)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.commit.run)
            task_status.started()

    async def close(self) -> None:
        if self.durable and not self.stopped:
            await self.commit.sync_now()
        self.log.close()

    def metrics(self) -> list[Family]:
        """Logins per mechanism and outcome, denied requests per API, users and ACLs held."""
        logins = counter("kcoord_authentications_total",
                         "SASL logins by mechanism and result (success, failure).")
        for mechanism in self.enabled_mechanisms:
            for result in ("success", "failure"):
                logins.add(self.logins.get((mechanism, result), 0), mechanism=mechanism, result=result)
        denials = counter("kcoord_authorization_denials_total",
                          "Requests the authorizer refused in whole or in part, by API.")
        for api, count in sorted(self.denials.items()):
            denials.add(count, api=api)
        return [
            logins, denials,
            gauge("kcoord_scram_users", "Users with at least one SCRAM credential.", len(self.state.credentials)),
            gauge("kcoord_acls", "ACL bindings held.", len(self.state.acls)),
        ]
