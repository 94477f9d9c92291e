"""Adapters that read the topology of the machine they run on (NVML), outside the pure core."""
