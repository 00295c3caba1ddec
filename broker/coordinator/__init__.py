"""The group coordinator: a deterministic, sans-IO state machine with an injected clock.

Nothing here awaits, reads a clock or touches a file. Each call takes ``now`` (epoch
milliseconds) and returns ``Effects``: the records to append (as one batch per group)
and the replies to release once those records are durable. Parked requests are answered
in the ``Effects`` of a later call.
"""

from broker.coordinator.coordinator import CoordinatorConfig, Effects, GroupCoordinator
from broker.coordinator.state import GroupState, IllegalTransition

__all__ = ["CoordinatorConfig", "Effects", "GroupCoordinator", "GroupState", "IllegalTransition"]
