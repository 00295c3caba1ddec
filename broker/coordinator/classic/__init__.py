"""The classic rebalance protocol: its group model, states and rules."""
