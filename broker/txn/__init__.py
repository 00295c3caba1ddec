"""The transaction coordinator, sans-IO (Kafka's TransactionCoordinator and TransactionStateManager).

``coordinator.TransactionCoordinator`` holds every transactional id and the rules that move
it through Kafka's states; ``records`` is its ``__transaction_state`` log; ``api`` adapts
the wire versions; ``markers`` describes the COMMIT and ABORT markers a decision needs
written. ``broker.txn_service`` runs it inside the trio shell. docs/transactions.md has the
rules.
"""

from broker.txn.config import TransactionConfig
from broker.txn.coordinator import TransactionCoordinator
from broker.txn.effects import TxnEffects
from broker.txn.state import TransactionMetadata, TransactionState

__all__ = ["TransactionConfig", "TransactionCoordinator", "TransactionMetadata", "TransactionState", "TxnEffects"]
