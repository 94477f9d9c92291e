"""Performance-model speed: microseconds per estimate, as a simulator calls it.

Run: .venv/bin/python benchmarks/perfmodel.py [--requests N] [--smoke]

Seeded random jobs (model, 1-8 GPUs, random neighbours) on one or two DGX-1 nodes: first on a
fresh PerfModel (every question new), then the same questions again (answered from its memo),
then speed_ratio (estimate plus the memoised ideal). `--smoke` (CI): 200 requests.
"""

from __future__ import annotations

import argparse
import random
import time

from toposched.perf import PerfModel
from toposched.topology import preset
from toposched.topology.cluster import Tier

MODELS = ("vgg16", "resnet50", "inception3", "alexnet", "bert-large", "gpt2", "lstm")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--smoke", action="store_true", help="200 requests (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.requests = 200
    node = preset("dgx1-v100")
    rng = random.Random(0)
    jobs = []
    for _ in range(args.requests):
        gpus = tuple(sorted(rng.sample(range(8), rng.choice((1, 2, 4, 8)))))
        others = tuple(sorted(set(rng.sample(range(8), rng.randint(0, 4))) - set(gpus)))
        nodes = rng.choice((1, 1, 2))
        jobs.append((rng.choice(MODELS), [(node, gpus)] * nodes, [others] * nodes))
    model = PerfModel()

    def timed(label: str, call: str) -> None:
        start = time.perf_counter()
        for name, placement, others in jobs:
            if call == "estimate":
                model.estimate(name, "V100", placement, tier=Tier.RACK, neighbours=others)
            else:
                model.speed_ratio(name, "V100", placement, neighbours=others)
        per = (time.perf_counter() - start) / len(jobs) * 1e6
        print(f"{label:34} {per:8.1f} us per call ({len(jobs)} calls)")

    timed("estimate, fresh model", "estimate")
    timed("estimate, same questions again", "estimate")
    model = PerfModel(model.catalog)
    timed("speed_ratio, fresh model", "speed_ratio")


if __name__ == "__main__":
    main()
