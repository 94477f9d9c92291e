"""A synthetic trace calibrated to the Acme (Seren) summary statistics, deterministic per seed.

Calibration (`calibrate`, from the Seren row of `data/traces/acme/cluster_summary.csv`; the
test `test_acme_seren_is_the_fit_of_the_summary` re-fits it from that file):

| summary figure (Seren, GPU jobs)           | value            | fitted parameter              |
|--------------------------------------------|------------------|-------------------------------|
| gpu_job_num over 2023-03-01..08-31 (184 d) | 663,813 jobs     | rate 0.0417555 jobs/s         |
| med_gpu_num, avg_gpu_num, max_gpu          | 1, 5.68, 1024    | P(1) 0.5, ratio r 0.504880    |
| (complete+cancel+fail)_gpu_time / jobs     | 32,404.6 GPU-s   | beta 0.288883                 |
| med_run_time_gpu, avg_run_time_gpu         | 122 s, 1,414.3 s | mu 4.51827, sigma 2.16757     |
| max_run_time_gpu                           | 1,209,604 s      | durations clipped to [1 s, max] |

The model:

- Arrivals: a Poisson process (exponential gaps) at `rate_per_s`; the first job at 0.
  The summary has no time span; the 184 days are the Acme README's "March 2023 to August
  2023", an assumption stated here rather than a figure of the summary.
- GPUs: powers of two 1..max_gpu. A one-parameter geometric law on log2(gpus) fitted to the
  mean gives P(1) = 0.496, just short of what median 1 demands, so P(1) is pinned at 0.5 and
  the rest is geometric, P(2^k) proportional to r^k for k >= 1, with r fitted to the mean.
- Duration: lognormal given the GPU count, ln d = mu + beta * log2(gpus) + sigma * Z, then
  clipped to [1 s, max]. Big jobs run longer: the summary's GPU time per job (32,405 GPU-s)
  is 4x what independent draws would give (5.68 x 1,414 = 8,033). The fit is exact for the
  clipped law: mu puts the median at 122 s, sigma the mean at 1,414.3 s, beta the GPU time.
- Queue: drawn uniformly from `queues`; model: drawn from the model mix (catalog.py).
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate

from toposched.sim.traces.catalog import ModelMix
from toposched.sim.traces.job import DEFAULT_QUEUE, Trace, TraceError, TraceJob

# Acme README: the traces span March 2023 to August 2023 (the summary itself has no span).
SEREN_SPAN_S = 184 * 86_400.0


@dataclass(frozen=True)
class SyntheticCalibration:
    """The generator's parameters: GPU-count law, duration law given GPUs, arrival rate."""

    name: str
    gpu_sizes: tuple[int, ...]
    gpu_probs: tuple[float, ...]
    mu: float
    beta: float
    sigma: float
    min_duration_s: float
    max_duration_s: float
    rate_per_s: float


# The fit of the Seren row (see the module docstring); rounded to 6 significant digits.
ACME_SEREN = SyntheticCalibration(
    name="acme-seren",
    gpu_sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
    gpu_probs=(
        0.5,
        0.247827,
        0.125123,
        0.0631720,
        0.0318943,
        0.0161028,
        0.00812999,
        0.00410467,
        0.00207237,
        0.00104630,
        0.000528255,
    ),
    mu=4.51827,
    beta=0.288883,
    sigma=2.16757,
    min_duration_s=1.0,
    max_duration_s=1_209_604.0,
    rate_per_s=0.0417555,
)


# Bisection halvings: 48 narrow a bracket of width 100 to below 1e-12, far past the
# 6 digits kept, and keep the three nested solves of `calibrate` under a second.
_STEPS = 48


def _phi(z: float) -> float:
    """The standard normal CDF."""
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def _solve(f: Callable[[float], float], low: float, high: float, what: str) -> float:
    """The root of increasing `f` in [low, high], by bisection (exact enough, and plain)."""
    if not f(low) < 0 < f(high):
        raise ValueError(f"cannot fit {what}: the summary is outside this model's reach")
    for _ in range(_STEPS):
        middle = (low + high) / 2
        if f(middle) < 0:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def _gpu_law(mean: float, max_gpu: float) -> tuple[tuple[int, ...], tuple[float, ...]]:
    sizes = tuple(1 << k for k in range(int(math.log2(max_gpu)) + 1))

    def geometric(ratio: float, first: int) -> list[float]:
        weights = [ratio ** (k - first) for k in range(first, len(sizes))]
        total = sum(weights)
        return [w / total for w in weights]

    def mean_of(probs: Sequence[float]) -> float:
        return sum(p * g for p, g in zip(probs, sizes, strict=True))

    ratio = _solve(lambda r: mean_of(geometric(r, 0)) - mean, 1e-9, 1.0, "the GPU mix")
    probs = geometric(ratio, 0)
    if probs[0] < 0.5:
        # The median GPU count is 1, so at least half the jobs must be 1-GPU jobs.
        def rest(r: float) -> list[float]:
            return [0.5] + [0.5 * p for p in geometric(r, 1)]

        ratio = _solve(lambda r: mean_of(rest(r)) - mean, 1e-9, 1.0, "the GPU mix")
        probs = rest(ratio)
    return sizes, tuple(probs)


def calibrate(summary: Mapping[str, str], span_s: float, name: str) -> SyntheticCalibration:
    """Fit the generator to one row of an Acme `cluster_summary.csv` (pure: no I/O).

    `span_s` is the time the row's jobs were submitted over (the summary does not say).
    GPU counts are the powers of two up to `max_gpu`; the row needs a median of 1 GPU.
    """

    def value(column: str) -> float:
        try:
            return float(summary[column])
        except (KeyError, ValueError):
            raise ValueError(f"summary row {name!r}: no number in column {column}") from None

    if value("med_gpu_num") != 1:
        raise ValueError(f"summary row {name!r}: the GPU-mix fit needs a median of 1 GPU")
    jobs = value("gpu_job_num")
    sizes, probs = _gpu_law(value("avg_gpu_num"), value("max_gpu"))
    terms = [(p, g, math.log2(g)) for p, g in zip(probs, sizes, strict=True)]
    gpu_time = sum(value(f"{state}_gpu_time") for state in ("complete", "cancel", "fail"))
    avg_run, med_run = value("avg_run_time_gpu"), value("med_run_time_gpu")
    low, high = 1.0, value("max_run_time_gpu")
    at_median, ln_low, ln_high = math.log(med_run), math.log(low), math.log(high)

    def mu_for(beta: float, sigma: float) -> float:
        # Clipping to [1 s, max] leaves the median where it is, so mu comes from it alone.
        def above(mu: float) -> float:
            return 0.5 - sum(p * _phi((at_median - mu - beta * k) / sigma) for p, _, k in terms)

        return _solve(above, -50.0, 50.0, "mu")

    def moments(beta: float, sigma: float) -> tuple[float, float]:
        """E[d] and E[gpus * d] of the clipped law."""
        mu = mu_for(beta, sigma)
        mean = weighted = 0.0
        for p, g, k in terms:
            m = mu + beta * k
            below, over = _phi((ln_low - m) / sigma), 1 - _phi((ln_high - m) / sigma)
            inside = math.exp(m + sigma * sigma / 2) * (
                _phi((ln_high - m) / sigma - sigma) - _phi((ln_low - m) / sigma - sigma)
            )
            clipped = below * low + inside + over * high
            mean += p * clipped
            weighted += p * g * clipped
        return mean, weighted

    # For each beta, sigma makes the mean right; then beta makes the GPU time per job right
    # (big jobs running longer is what lifts it above avg_gpu_num * avg_run).
    def sigma_for(beta: float) -> float:
        return _solve(lambda s: moments(beta, s)[0] - avg_run, 0.05, 8.0, "sigma")

    def gpu_time_gap(beta: float) -> float:
        try:
            sigma = sigma_for(beta)
        except ValueError:
            # So steep a beta that big jobs alone outrun the mean: far past the target.
            return math.inf
        mean, weighted = moments(beta, sigma)
        return weighted / mean - gpu_time / jobs / avg_run

    beta = _solve(gpu_time_gap, 0.0, 2.0, "beta")
    sigma = sigma_for(beta)
    return SyntheticCalibration(
        name=name,
        gpu_sizes=sizes,
        gpu_probs=probs,
        mu=mu_for(beta, sigma),
        beta=beta,
        sigma=sigma,
        min_duration_s=low,
        max_duration_s=high,
        rate_per_s=jobs / span_s,
    )


def synthetic_trace(
    jobs: int,
    seed: int,
    *,
    calibration: SyntheticCalibration = ACME_SEREN,
    rate_per_s: float | None = None,
    max_gpus: int | None = None,
    queues: Sequence[str] = (DEFAULT_QUEUE,),
    model_mix: Mapping[str, float] | None = None,
) -> Trace:
    """`jobs` jobs drawn from `calibration` with `random.Random(seed)`: same seed, same trace.

    `rate_per_s` overrides the arrival rate (to load a smaller simulated cluster alike);
    `max_gpus` leaves out sizes above it (the rest keep their relative weights), for a
    cluster too small for the biggest jobs. Jobs are named `syn-<i>`; `source_line` is i + 1.
    """
    if jobs < 0:
        raise TraceError(f"synthetic trace: jobs must be >= 0, got {jobs}")
    rate = calibration.rate_per_s if rate_per_s is None else rate_per_s
    if not (math.isfinite(rate) and rate > 0):
        raise TraceError(f"synthetic trace: rate_per_s must be a number > 0, got {rate}")
    if not queues or any(not q for q in queues):
        raise TraceError("synthetic trace: queues must be one or more non-empty names")
    mix = ModelMix(model_mix)
    limit = max(calibration.gpu_sizes) if max_gpus is None else max_gpus
    law = zip(calibration.gpu_sizes, calibration.gpu_probs, strict=True)
    allowed = [(g, p) for g, p in law if g <= limit]
    if not allowed:
        raise TraceError(
            f"synthetic trace: max_gpus={max_gpus} is below the smallest size "
            f"{min(calibration.gpu_sizes)}"
        )
    sizes = [g for g, _ in allowed]
    cum = list(accumulate(p for _, p in allowed))
    logs = [math.log2(g) for g in sizes]
    rng = random.Random(seed)
    mu, beta, sigma = calibration.mu, calibration.beta, calibration.sigma
    low, high = calibration.min_duration_s, calibration.max_duration_s
    now = 0.0
    out: list[TraceJob] = []
    for i in range(jobs):
        if i:
            now += rng.expovariate(rate)
        pick = min(bisect_right(cum, rng.random() * cum[-1]), len(sizes) - 1)
        duration = math.exp(mu + beta * logs[pick] + sigma * rng.gauss(0.0, 1.0))
        queue = queues[rng.randrange(len(queues))]
        (model,) = mix.draw(rng, 1)
        out.append(
            TraceJob(
                f"syn-{i}", now, sizes[pick], min(max(duration, low), high), queue, model, i + 1
            )
        )
    return Trace(tuple(out), "synthetic", f"synthetic:{calibration.name}")
