"""Fit the performance model's free parameters to the seed measurements; print every residual.

Run: .venv/bin/python benchmarks/perfmodel_fit.py [--check] [--separate-overlap] [--loo] [--smoke]

The fitted parameters (docs/perfmodel.md lists them) are the V100 throughput of VGG16 and
ResNet-50, PyTorch's compute scale, the NCCL link efficiency shared by all frameworks, the
overlap of Horovod (one value for TensorFlow and PyTorch) and of TensorFlow's parameter servers,
the `ack` and `msr-p100` network rates, and the PCIe-switch interference of TensorFlow and CNTK.
Everything else comes from the shipped catalog. The objective is the sum over the calibration
cases of (residual / tolerance)^2, so each case counts in units of its own tolerance; it is
minimised by Nelder-Mead from a few seeded starts, then polished one coordinate at a time.

--check      evaluate the shipped catalog only (seconds).
--separate-overlap   give PyTorch and TensorFlow Horovod an overlap each (one more parameter).
--loo        held-out check: refit without each case in turn (and without the two
             without-topology medians, and without the two CNTK ratios, together) and print how
             far the model then misses what it never saw (minutes).
--smoke      CI, seconds: one start of 40 Nelder-Mead iterations polished to steps of 0.01 (a
             poor fit, its residuals printed all the same), and --loo of the first two groups.
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from types import MappingProxyType

from toposched.perf.calibration import Case, Kind, cases
from toposched.perf.model import PerfModel
from toposched.perf.registry import Catalog
from toposched.topology.cluster import Tier

# Socket and node penalties keep the shape of Xiao et al.'s Figure 2b (further away is milder);
# the paper's text gives no values for them, so they are fixed fractions of the switch penalty.
SOCKET_SHARE, NODE_SHARE = 0.4, 0.15
TF_LIKE = ("tensorflow-horovod", "pytorch-horovod", "tensorflow-ps")
LAMBDA_V100 = {"resnet50": 432, "alexnet": 5132, "resnet152": 167, "inception3": 273}
LAMBDA_V100 |= {"inception4": 122}

Params = dict[str, float]
Objective = Callable[[list[float]], float]
BOUNDS: dict[str, tuple[float, float]] = {
    "vgg16_v100": (100.0, 600.0),
    "resnet50_v100": (150.0, 800.0),
    "pytorch_compute_scale": (0.5, 2.0),
    "link_efficiency": (0.05, 1.0),
    "overlap_tensorflow_horovod": (0.0, 1.0),
    "overlap_pytorch_horovod": (0.0, 1.0),
    "overlap_tensorflow_ps": (0.0, 1.0),
    "ack_gbps": (0.05, 20.0),
    "msr_p100_gbps": (0.05, 20.0),
    "switch_penalty_tensorflow": (0.0, 2.0),
    "switch_penalty_cntk": (0.0, 2.0),
}


def with_params(base: Catalog, p: Params) -> Catalog:
    """The base catalog with the fitted fields replaced."""
    models = dict(base.models)
    for key, name in (("vgg16", "vgg16_v100"), ("resnet50", "resnet50_v100")):
        models[key] = replace(models[key], throughput={**models[key].throughput, "V100": p[name]})
    frameworks = dict(base.frameworks)
    for key, spec in frameworks.items():
        overlap = p.get("overlap_" + key.replace("-", "_"), spec.overlap)
        scale = p["pytorch_compute_scale"] if key == "pytorch-horovod" else spec.compute_scale
        switch = p["switch_penalty_cntk" if key == "cntk" else "switch_penalty_tensorflow"]
        penalties = {"switch": switch, "socket": SOCKET_SHARE * switch, "node": NODE_SHARE * switch}
        frameworks[key] = replace(
            spec,
            overlap=overlap,
            compute_scale=scale,
            link_efficiency=p["link_efficiency"],
            interference=penalties if key in (*TF_LIKE, "cntk") else spec.interference,
        )
    networks = dict(base.networks)
    tiers = (Tier.RACK, Tier.POD, Tier.CLUSTER)
    for key, name in (("ack", "ack_gbps"), ("msr-p100", "msr_p100_gbps")):
        networks[key] = replace(networks[key], bandwidth_gbps=dict.fromkeys(tiers, p[name]))
    return replace(
        base,
        models=MappingProxyType(models),
        frameworks=MappingProxyType(frameworks),
        networks=MappingProxyType(networks),
    )


def evaluate(catalog: Catalog, targets: Sequence[Case]) -> list[float]:
    model = PerfModel(catalog)
    return [case.evaluate(model) for case in targets]


def cost(values: Sequence[float], targets: Sequence[Case]) -> float:
    pairs = zip(values, targets, strict=True)
    return sum((case.residual(v) / case.tolerance) ** 2 for v, case in pairs)


def nelder_mead(
    f: Objective, start: list[float], step: float, iters: int
) -> tuple[list[float], float]:
    """Plain Nelder-Mead (parameters are rescaled to the unit cube)."""
    n = len(start)
    simplex = [start] + [
        [s + (step if i == j else 0.0) for j, s in enumerate(start)] for i in range(n)
    ]
    scores = [f(x) for x in simplex]
    for _ in range(iters):
        order = sorted(range(n + 1), key=scores.__getitem__)
        simplex, scores = [simplex[i] for i in order], [scores[i] for i in order]
        centroid = [sum(x[j] for x in simplex[:-1]) / n for j in range(n)]
        worst = simplex[-1]
        reflected = [c + (c - w) for c, w in zip(centroid, worst, strict=True)]
        r = f(reflected)
        if r < scores[0]:
            expanded = [c + 2.0 * (c - w) for c, w in zip(centroid, worst, strict=True)]
            e = f(expanded)
            simplex[-1], scores[-1] = (expanded, e) if e < r else (reflected, r)
        elif r < scores[-2]:
            simplex[-1], scores[-1] = reflected, r
        else:
            contracted = [c + 0.5 * (w - c) for c, w in zip(centroid, worst, strict=True)]
            c = f(contracted)
            if c < scores[-1]:
                simplex[-1], scores[-1] = contracted, c
            else:
                best = simplex[0]
                simplex = [best] + [
                    [b + 0.5 * (x - b) for b, x in zip(best, xs, strict=True)] for xs in simplex[1:]
                ]
                scores = [scores[0]] + [f(x) for x in simplex[1:]]
    i = min(range(n + 1), key=scores.__getitem__)
    return simplex[i], scores[i]


def pattern_search(
    f: Objective, x: list[float], score: float, finest: float = 1e-5
) -> tuple[list[float], float]:
    """Polish a Nelder-Mead result one coordinate at a time, halving the step to `finest`."""
    step = 0.05
    while step > finest:
        improved = True
        while improved:
            improved = False
            for i in range(len(x)):
                for delta in (step, -step):
                    trial = list(x)
                    trial[i] += delta
                    value = f(trial)
                    if value < score:
                        x, score, improved = trial, value, True
                        break
        step /= 2
    return x, score


def fit(
    base: Catalog,
    targets: Sequence[Case],
    names: list[str],
    tied: dict[str, str],
    starts: int,
    warm: Params | None = None,
    effort: tuple[int, float] = (1500, 1e-5),
) -> Params:
    """`effort`: Nelder-Mead's iterations per run, and the pattern search's finest step."""
    iters, finest = effort

    def decode(x: Sequence[float]) -> Params:
        p = {}
        for name, u in zip(names, x, strict=True):
            low, high = BOUNDS[name]
            p[name] = low + min(max(u, 0.0), 1.0) * (high - low)
        for name, source in tied.items():
            p[name] = p[source]
        return p

    def objective(x: list[float]) -> float:
        outside = sum((u - min(max(u, 0.0), 1.0)) ** 2 for u in x)
        return cost(evaluate(with_params(base, decode(x)), targets), targets) + 1e3 * outside

    rng = random.Random(0)
    first = [0.5] * len(names)
    if warm is not None:
        first = [(warm[n] - BOUNDS[n][0]) / (BOUNDS[n][1] - BOUNDS[n][0]) for n in names]
    best_x, best_score = first, math.inf
    for attempt in range(starts):
        start = [rng.random() for _ in names] if attempt else first
        x, score = nelder_mead(objective, start, 0.2, iters)
        x, score = nelder_mead(objective, x, 0.05, iters)  # a restart: Nelder-Mead stalls
        x, score = pattern_search(objective, x, score, finest)
        if score < best_score:
            best_x, best_score = x, score
    return decode(best_x)


def cells(case: Case, value: float) -> str:
    res = case.residual(value)
    if case.kind is Kind.THROUGHPUT:
        return f"{case.measured:g} | {value:.1f} | {100 * res:+.1f}% | ±{100 * case.tolerance:g}%"
    return f"{case.measured:g}% | {value:.1f}% | {res:+.1f} pts | ±{case.tolerance:g} pts"


def report(values: Sequence[float], targets: Sequence[Case]) -> None:
    print("| source | case | measured | model | residual | tolerance |")
    print("|---|---|---|---|---|---|")
    for case, value in zip(targets, values, strict=True):
        mark = "" if case.within(value) else "  <-- OUTSIDE TOLERANCE"
        print(f"| {case.source} | {case.case} | {cells(case, value)} |{mark}")
    print(f"\nobjective, sum of (residual / tolerance)^2: {cost(values, targets):.4f}")


def derived(base: Catalog, p: Params) -> None:
    """Catalog values that follow from the fit (models.yaml and gpus.yaml say how)."""
    scale = p["resnet50_v100"] / LAMBDA_V100["resnet50"]
    v100 = {name: value * scale for name, value in LAMBDA_V100.items() if name != "resnet50"}
    flops = {name: base.models[name].forward_gflops for name in base.models}
    v100["vgg11"] = p["vgg16_v100"] * flops["vgg16"] / flops["vgg11"]
    v100["vgg19"] = p["vgg16_v100"] * flops["vgg16"] / flops["vgg19"]
    v100["resnet101"] = p["resnet50_v100"] * flops["resnet50"] / flops["resnet101"]
    v100["googlenet"] = v100["inception3"] * flops["inception3"] / flops["googlenet"]
    p100 = math.sqrt(
        base.models["vgg16"].throughput["P100"]
        / p["vgg16_v100"]
        * base.models["resnet50"].throughput["P100"]
        / p["resnet50_v100"]
    )
    print("derived catalog values (V100 samples/s):")
    for name, value in sorted(v100.items()):
        print(f"  {name:12} {value:.0f}")
    print(f"  P100 speed, geometric mean of P100/V100 over vgg16 and resnet50: {p100:.3f}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="evaluate the shipped catalog")
    parser.add_argument("--separate-overlap", action="store_true", help="overlap per Horovod")
    parser.add_argument("--loo", action="store_true", help="leave-one-out residuals too")
    parser.add_argument("--starts", type=int, default=4, help="Nelder-Mead starts")
    parser.add_argument(
        "--smoke", action="store_true", help="1 short start, --loo of 2 groups (CI)"
    )
    args = parser.parse_args()
    effort = (40, 1e-2) if args.smoke else (1500, 1e-5)
    if args.smoke:
        args.starts, args.loo = 1, True
    base = Catalog.load()
    targets = cases()
    if args.check:
        report(evaluate(base, targets), targets)
        return
    names = list(BOUNDS)
    tied: dict[str, str] = {}
    if not args.separate_overlap:
        names.remove("overlap_pytorch_horovod")
        tied["overlap_pytorch_horovod"] = "overlap_tensorflow_horovod"
    params = fit(base, targets, names, tied, args.starts, effort=effort)
    print(f"fitted {len(names)} parameters to {len(targets)} cases:")
    for name in names:
        print(f"  {name:28} {params[name]:.4g}")
    print()
    derived(base, params)
    report(evaluate(with_params(base, params), targets), targets)
    if not args.loo:
        return
    # Refits start from the full fit (a warm start, as leave-one-out usually does): every
    # parameter stays pinned by other cases, except each interference penalty, which only its
    # own case pins, so those two cases are left out of this check.
    groups = [[i] for i, case in enumerate(targets) if "LSTM" not in case.case]
    groups.append([i for i, case in enumerate(targets) if "without topology" in case.case])
    groups.append([i for i, case in enumerate(targets) if case.source.endswith("CNTK")][:2])
    if args.smoke:
        groups = groups[:2]
    print("\nheld out: refit without the case(s), then predict them")
    print("| held out | source | case | measured | predicted | residual | tolerance |")
    print("|---|---|---|---|---|---|---|")
    for group in groups:
        rest = [case for j, case in enumerate(targets) if j not in group]
        refit = fit(base, rest, names, tied, 1, warm=params, effort=effort)
        model = PerfModel(with_params(base, refit))
        label = "this case" if len(group) == 1 else f"these {len(group)}"
        for i in group:
            case = targets[i]
            print(
                f"| {label} | {case.source} | {case.case} | {cells(case, case.evaluate(model))} |"
            )


if __name__ == "__main__":
    main()
