"""The credentials and ACLs in memory, as the replay of their log records.

Changes never touch the maps directly: a change is a list of records, and ``apply``
replays them, the same path the start-up load takes, so memory always equals the replay
of the log. ``acl_version`` grows with every ACL change (the authorizer is rebuilt then).
"""

from __future__ import annotations

from collections.abc import Iterable

from security.acl import AclBinding
from security.records import CredentialKey, Record, decode
from security.scram import ScramCredential


class SecurityState:
    def __init__(self) -> None:
        self.credentials: dict[str, dict[str, ScramCredential]] = {}
        self.acls: set[AclBinding] = set()
        self.acl_version = 0

    def replay(self, key: bytes, value: bytes | None) -> None:
        what, data = decode(key, value)
        if isinstance(what, CredentialKey):
            assert data is None or isinstance(data, ScramCredential)
            if data is None:
                mechanisms = self.credentials.get(what.user, {})
                mechanisms.pop(what.mechanism, None)
                if not mechanisms:
                    self.credentials.pop(what.user, None)
            else:
                self.credentials.setdefault(what.user, {})[what.mechanism] = data
            return
        if data:
            self.acls.add(what)
        else:
            self.acls.discard(what)
        self.acl_version += 1

    def apply(self, records: Iterable[Record]) -> None:
        for key, value in records:
            self.replay(key, value)

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.credentials.get(user, {}).get(mechanism)
