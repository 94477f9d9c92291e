"""Trace readers (Philly, Helios/Acme, Tiresias, Alibaba openb) and the synthetic generator."""

from toposched.sim.traces.catalog import DEFAULT_MODEL_MIX, MODEL_NAMES
from toposched.sim.traces.job import DEFAULT_QUEUE, Trace, TraceError, TraceJob
from toposched.sim.traces.reader import read_trace
from toposched.sim.traces.registry import FORMATS, detect_format, known_formats
from toposched.sim.traces.rows import TraceFormat
from toposched.sim.traces.synthetic import (
    ACME_SEREN,
    SEREN_SPAN_S,
    SyntheticCalibration,
    calibrate,
    synthetic_trace,
)

__all__ = [
    "ACME_SEREN",
    "DEFAULT_MODEL_MIX",
    "DEFAULT_QUEUE",
    "FORMATS",
    "MODEL_NAMES",
    "SEREN_SPAN_S",
    "SyntheticCalibration",
    "Trace",
    "TraceError",
    "TraceFormat",
    "TraceJob",
    "calibrate",
    "detect_format",
    "known_formats",
    "read_trace",
    "synthetic_trace",
]
