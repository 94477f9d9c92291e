"""How noisy measured step times are: one placement measured with its nodes in other orders.

The model, and the protocol of docs/perfmodel.md, see a placement up to the order of its nodes
(`1122` and `1212` are one shape). Where the measurements hold a shape in several node orders at
one batch, those rows measure the same thing; this prints, per job:
- how far apart they are (the median of max/min - 1), and how often by more than the pair gap
  (`--gap`, the protocol's 10% by default);
- how often one node order's times order a pair of shapes (same GPU count, same batch, times
  differing by more than the gap in another node order of each) as that other order does: the
  data predicting itself, with no model.

    .venv/bin/python benchmarks/perf_noise.py data/measurements/pollux-t4/{bert,cifar10,imagenet}

`--smoke` (CI, seconds): those three directories when none are named (they take a second).
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from itertools import combinations, permutations, product
from pathlib import Path

from toposched.perf.measurements import parse_measurements
from toposched.perf.protocol import PAIR_GAP

Key = tuple[tuple[int, ...], int]  # (shape, batch)
POLLUX_T4 = Path(__file__).resolve().parents[1] / "data" / "measurements" / "pollux-t4"


def by_shape(directory: Path) -> dict[Key, list[float]]:
    """Each shape's times at each batch, one per node order measured."""
    path = directory / "placements.csv"
    rows = parse_measurements(path.read_text(), source=str(path), job=directory.name)
    times: dict[Key, list[float]] = defaultdict(list)
    for row in rows:
        times[(row.shape, row.batch)].append(row.step_s)
    return times


def apart(a: float, b: float) -> float:
    return max(a, b) / min(a, b) - 1.0


def replicate_pairs(times: dict[Key, list[float]], gap: float) -> tuple[int, int]:
    """(pairs, ordered alike): every choice of one order of each shape as the prediction and
    another as the measurement."""
    pairs = alike = 0
    repeated = {key: values for key, values in times.items() if len(values) > 1}
    for (key_a, a), (key_b, b) in combinations(sorted(repeated.items()), 2):
        if key_a[1] != key_b[1] or sum(key_a[0]) != sum(key_b[0]):
            continue
        for (guess_a, seen_a), (guess_b, seen_b) in product(permutations(a, 2), permutations(b, 2)):
            if apart(seen_a, seen_b) <= gap:
                continue
            pairs += 1
            alike += guess_a != guess_b and (guess_a < guess_b) == (seen_a < seen_b)
    return pairs, alike


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directories", nargs="*", type=Path, help="As `perf fit` reads them.")
    parser.add_argument("--gap", type=float, default=PAIR_GAP, help="As `perf fit --pair-gap`.")
    parser.add_argument(
        "--smoke", action="store_true", help="data/measurements/pollux-t4's jobs if none named"
    )
    args = parser.parse_args()
    if args.smoke and not args.directories:
        args.directories = [POLLUX_T4 / job for job in ("bert", "cifar10", "imagenet")]
    if not args.directories:
        parser.error("name at least one directory")
    over_gap = f"over {100 * args.gap:g}%"
    print(
        f"job        shapes x batches in 2+ orders  median apart  {over_gap:>8}  pairs"
        "  ordered alike"
    )
    for directory in args.directories:
        times = by_shape(directory)
        spreads = [apart(min(v), max(v)) for v in times.values() if len(v) > 1]
        if not spreads:
            print(f"{directory.name:<10} no shape measured in two node orders")
            continue
        over = sum(s > args.gap for s in spreads) / len(spreads)
        pairs, alike = replicate_pairs(times, args.gap)
        share = f"{alike / pairs:.0%}" if pairs else "-"
        print(
            f"{directory.name:<10} {len(spreads):>29}  {statistics.median(spreads):>12.1%}"
            f"  {over:>8.0%}  {pairs:>5}  {share:>13}"
        )


if __name__ == "__main__":
    main()
