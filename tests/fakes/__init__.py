"""Fakes of external systems (NVML) that the CI machines do not have."""
