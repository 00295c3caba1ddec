"""Group types of the modern protocol (KIP-848): the server computes assignments and members reconcile.

``consumer/`` is the consumer group; what any modern group shares (assignments, the topic
metadata a group is computed from, the target assignment) lives beside it, as in Kafka's
``modern`` package.
"""
