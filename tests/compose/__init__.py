"""A harness that runs compose topologies in real containers (tests/compose/harness.py)."""
