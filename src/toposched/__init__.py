"""toposched: a topology-aware gang scheduler for deep-learning jobs on GPU servers and clusters."""

__version__ = "0.1.0"
