"""Server-side assignors of the consumer group protocol (KIP-848): ``uniform`` and ``range``.

An assignor is a pure function of the group's members (their subscriptions and current
target assignments) and the subscribed topics' partition counts. It must give every
partition of every subscribed topic to exactly one member subscribed to that topic.
``group.consumer.assignors`` names the ones a broker offers; the first is the default.
"""

from __future__ import annotations

from broker.coordinator.assignor.range import RangeAssignor
from broker.coordinator.assignor.spec import Assignor, GroupSpec, MemberSpec
from broker.coordinator.assignor.uniform import UniformAssignor

ASSIGNORS: dict[str, Assignor] = {"uniform": UniformAssignor(), "range": RangeAssignor()}

__all__ = ["ASSIGNORS", "Assignor", "GroupSpec", "MemberSpec", "RangeAssignor", "UniformAssignor"]
