"""The group coordinator: a deterministic, sans-IO state machine with an injected clock.

Nothing here awaits, reads a clock or touches a file. ``GroupCoordinatorShard`` takes typed
requests (``requests``; ``api`` turns wire bodies of any version into them) and ``now``
(epoch milliseconds), and returns ``Effects``: the records to append (one batch per group)
and the replies to release once those records are durable. Parked requests are answered in
the ``Effects`` of a later call.
"""

from broker.coordinator.classic.state import ClassicGroupState, IllegalTransition
from broker.coordinator.config import CoordinatorConfig
from broker.coordinator.effects import Effects
from broker.coordinator.shard import GroupCoordinatorShard

__all__ = ["ClassicGroupState", "CoordinatorConfig", "Effects", "GroupCoordinatorShard", "IllegalTransition"]
