"""Adapters that read the machine they run on (NVML, nvidia-smi, the OS), outside the pure core."""
