"""Benchmarks: kcoord side by side with a peer broker (Tansu), same load generator."""
