"""`toposched perf`: training throughput of a model on a placement, one request or a JSONL file."""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from toposched.cli.output import EXIT_BAD_INPUT, answer_requests, console, emit_json, fail
from toposched.discovery.catalog_files import load_catalog
from toposched.discovery.files import load_topology
from toposched.perf import (
    DEFAULT_BATCH,
    DEFAULT_FRAMEWORK,
    DEFAULT_NETWORK,
    Catalog,
    CatalogError,
    Estimate,
    PerfError,
    PerfModel,
)
from toposched.perf.fit import Fit, fit
from toposched.perf.loading import TIERS
from toposched.perf.measurements import Measurement, MeasurementError, parse_measurements
from toposched.perf.protocol import PAIR_GAP
from toposched.topology import NodeTopology, TopologyError
from toposched.topology.cluster import Tier

REQUEST_KEYS = (
    "model",
    "topology",
    "placement",
    "network",
    "framework",
    "batch",
    "gpu_type",
    "tier",
    "neighbours",
)


def parse_gpu_lists(text: str, field: str) -> list[list[int]]:
    """`0,1;0,1` -> [[0, 1], [0, 1]]: GPU indices per node, nodes separated by `;`."""
    nodes: list[list[int]] = []
    for part in text.split(";"):
        gpus: list[int] = []
        for item in part.split(","):
            item = item.strip()
            if not item:
                continue
            if not item.isdigit():
                raise PerfError(
                    f"takes GPU indices separated by commas, nodes by ';', got {item!r}",
                    field=field,
                )
            gpus.append(int(item))
        nodes.append(gpus)
    return nodes


def _gpu_lists(value: Any, field: str) -> list[list[int]]:
    """A placement or neighbour list as a request gives it: a string, [0, 1] or [[0, 1], [2]]."""
    if isinstance(value, str):
        return parse_gpu_lists(value, field)
    if isinstance(value, list) and all(_is_index(v) for v in value):
        return [list(value)]
    if isinstance(value, list) and all(
        isinstance(node, list) and all(_is_index(v) for v in node) for node in value
    ):
        return [list(node) for node in value]
    raise PerfError(
        'must be a string such as "0,1;0,1", a list of GPU indices, or one list per node',
        field=field,
    )


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _tier(value: Any) -> Tier:
    tier = TIERS.get(str(value).lower())
    if tier is None:
        raise PerfError(f"must be one of {', '.join(TIERS)}, got {value!r}", field="tier")
    return tier


def estimate_json(estimate: Estimate) -> dict[str, float]:
    """The stable JSON shape of one answer (docs/perfmodel.md documents it)."""
    return {
        "throughput": round(estimate.throughput, 3),
        "iteration_s": round(estimate.iteration_s, 6),
        "comm_exposed_s": round(estimate.comm_exposed_s, 6),
        "compute_s": round(estimate.compute_s, 6),
    }


class Batch:
    """Answers many requests in one process: topologies and the model's memo are shared."""

    def __init__(self, catalog: Catalog) -> None:
        self.model = PerfModel(catalog)
        self._topologies: dict[str, NodeTopology] = {}

    def topology(self, spec: Any) -> NodeTopology:
        if not isinstance(spec, str):
            raise PerfError("must be a preset name or a file path (a string)", field="topology")
        if spec not in self._topologies:
            try:
                self._topologies[spec] = load_topology(spec)
            except TopologyError as err:
                raise PerfError(str(err), field="topology") from None
        return self._topologies[spec]

    def gpu_type(self, topology: NodeTopology, given: str | None) -> str:
        """The GPU type asked for, else the one the topology names (else the catalog's default)."""
        return given or self.model.catalog.gpu_for(topology.name)

    def answer(self, request: Any) -> Estimate:
        if not isinstance(request, dict):
            raise PerfError("a request must be a JSON object")
        unknown = sorted(set(request) - set(REQUEST_KEYS))
        if unknown:
            raise PerfError(
                f"unknown key {unknown[0]!r}; valid keys: {', '.join(REQUEST_KEYS)}",
                field=unknown[0],
            )
        for key in ("model", "topology", "placement"):
            if key not in request:
                raise PerfError(f"missing key {key!r}", field=key)
        for key in ("model", "network", "framework", "gpu_type"):
            if key in request and not isinstance(request[key], str):
                raise PerfError(f"must be a name (a string), got {request[key]!r}", field=key)
        topology = self.topology(request["topology"])
        placement = _gpu_lists(request["placement"], "placement")
        neighbours = None
        if "neighbours" in request:
            neighbours = _gpu_lists(request["neighbours"], "neighbours")
        return self.run(
            model=request["model"],
            topology=topology,
            placement=placement,
            network=request.get("network", DEFAULT_NETWORK),
            framework=request.get("framework", DEFAULT_FRAMEWORK),
            batch=request.get("batch", DEFAULT_BATCH),
            gpu_type=request.get("gpu_type"),
            tier=_tier(request.get("tier", "rack")),
            neighbours=neighbours,
        )

    def run(
        self,
        *,
        model: str,
        topology: NodeTopology,
        placement: list[list[int]],
        network: str,
        framework: str,
        batch: Any,
        gpu_type: str | None,
        tier: Tier,
        neighbours: list[list[int]] | None,
    ) -> Estimate:
        return self.model.estimate(
            model,
            self.gpu_type(topology, gpu_type),
            [(topology, gpus) for gpus in placement],
            framework=framework,
            network=network,
            tier=tier if len(placement) > 1 else Tier.NODE,
            batch=batch,
            neighbours=neighbours,
        )


def run_batch(path: str, catalog: Catalog) -> int:
    """One JSON result per request line, in order; a bad line gets an error and exit status 2."""
    batch = Batch(catalog)
    return answer_requests(
        path, lambda request: estimate_json(batch.answer(request)), (PerfError,), _error
    )


def _error(line: int, err: Exception) -> tuple[dict[str, Any], int]:
    if isinstance(err, json.JSONDecodeError):
        field, message = None, f"not JSON: {err.msg}"
    elif isinstance(err, PerfError):
        field, message = err.field, err.reason
    else:
        field, message = None, str(err)
    where = f"line {line}" + (f", {field}" if field else "")
    error = {"code": "bad_request", "line": line, "field": field, "message": f"{where}: {message}"}
    return {"error": error}, EXIT_BAD_INPUT


def _aliases(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, model = pair.partition("=")
        if not sep or not name.strip() or not model.strip():
            fail(f"--alias takes NAME=MODEL, got {pair!r}")
        out[name.strip()] = model.strip()
    return out


def perf(
    action: list[str] | None = typer.Argument(
        None,
        metavar="[fit [PATH]...]",
        help="fit: fit the catalog to measured step times (see --measurements, --out).",
    ),
    model: str | None = typer.Option(None, "--model", "-m", help="Model name, e.g. resnet50."),
    topology: str | None = typer.Option(None, "--topology", "-t", help="Preset name or file."),
    placement: str | None = typer.Option(
        None, "--placement", "-p", help='GPUs per node: "0,1,2,3", or "0,1;0,1" for two nodes.'
    ),
    network: str = typer.Option(DEFAULT_NETWORK, "--network", help="Network profile."),
    framework: str = typer.Option(DEFAULT_FRAMEWORK, "--framework", help="Training framework."),
    batch: int = typer.Option(DEFAULT_BATCH, "--batch", help="Samples per GPU per iteration."),
    gpu_type: str | None = typer.Option(
        None, "--gpu-type", help="GPU type (default: named in the topology, else V100)."
    ),
    tier: str = typer.Option("rack", "--tier", help="Tier joining the nodes: rack, pod, cluster."),
    neighbours: str | None = typer.Option(
        None, "--neighbours", help='Other jobs\' GPUs per node: "1" (one node) or "1;" (two nodes).'
    ),
    catalogs: list[str] = typer.Option(
        [], "--catalog", help="Extra catalog YAML file (repeatable); its entries win."
    ),
    aliases: list[str] = typer.Option(
        [], "--alias", help="Map a model name to a catalog model: NAME=MODEL (repeatable)."
    ),
    requests: str | None = typer.Option(
        None, "--requests", help="JSONL file of requests, - for stdin."
    ),
    json_out: bool = typer.Option(False, "--json", help="JSON: throughput, iteration_s, ..."),
    list_models: bool = typer.Option(
        False, "--list", help="List the catalog's models (what a job's `model` may name)."
    ),
    measurements: list[str] = typer.Option(
        [],
        "--measurements",
        help="fit: a job's directory (placements.csv, named by the directory) or a CSV of "
        "model,gpu_type,placement,batch,step_time (repeatable, or several paths after it).",
    ),
    out: str | None = typer.Option(None, "--out", help="fit: the catalog file to write."),
    pair_gap: float = typer.Option(
        PAIR_GAP,
        "--pair-gap",
        help="fit: score pairs of placements whose measured times differ by more than this "
        "fraction (the protocol's 0.1 = 10%).",
    ),
) -> None:
    """Estimate training throughput of a data-parallel job on a placement, or (`perf fit`) fit
    the catalog to measured step times. Exit 2 on bad input."""
    try:
        catalog = load_catalog(catalogs, _aliases(aliases))
    except CatalogError as err:
        fail(str(err))
    if list_models:
        if action or model is not None or placement is not None or requests is not None:
            fail("--list takes no action, --model, --placement or --requests")
        _print_models(catalog, json_out)
        return
    if action:
        if action[0] != "fit":
            fail(f"unknown action {action[0]!r}; the only action is fit")
        if model is not None or placement is not None or requests is not None:
            fail("perf fit takes no --model, --placement or --requests")
        run_fit(
            catalog,
            [*measurements, *action[1:]],
            topology=topology,
            network=network,
            framework=framework,
            out=out,
            json_out=json_out,
            pair_gap=pair_gap,
        )
        return
    if measurements or out is not None or pair_gap != PAIR_GAP:
        fail("--measurements, --out and --pair-gap belong to `toposched perf fit`")
    if requests is not None:
        if model is not None or topology is not None or placement is not None:
            fail(
                "--requests takes every request from the file; drop --model/--topology/--placement"
            )
        raise typer.Exit(run_batch(requests, catalog))
    if model is None or topology is None or placement is None:
        fail("give --model, --topology and --placement (or --requests FILE)")
    batch_runner = Batch(catalog)
    try:
        node = batch_runner.topology(topology)
        gpus = parse_gpu_lists(placement, "--placement")
        others = None if neighbours is None else parse_gpu_lists(neighbours, "--neighbours")
        gpu = batch_runner.gpu_type(node, gpu_type)
        result = batch_runner.run(
            model=model,
            topology=node,
            placement=gpus,
            network=network,
            framework=framework,
            batch=batch,
            gpu_type=gpu,
            tier=_tier(tier),
            neighbours=others,
        )
        if json_out:
            emit_json(estimate_json(result))
            return
        total = sum(len(g) for g in gpus)
        best = batch_runner.model.ideal(
            model, gpu, total, node, framework=framework, network=network, batch=batch
        )
    except PerfError as err:
        fail(_flag_message(err))
    _print_table(catalog, model, gpu, framework, network, node, gpus, result, best)


def _print_models(catalog: Catalog, json_out: bool) -> None:
    """The catalog's models (the shipped one and any --catalog), each with its size, compute and
    the GPU types it was measured on, as `submit --model` and a job file's `model` name them."""
    aliases: dict[str, list[str]] = {}
    for name, target in sorted(catalog.aliases.items()):
        aliases.setdefault(target, []).append(name)
    models = [
        (m, sorted(m.throughput), aliases.get(m.name, []))
        for m in sorted(catalog.models.values(), key=lambda m: m.name)
    ]
    if json_out:
        emit_json(
            {
                "models": [
                    {
                        "name": m.name,
                        "params_m": m.params_m,
                        "forward_gflops": m.forward_gflops,
                        "measured_on": measured,
                        "aliases": names,
                    }
                    for m, measured, names in models
                ]
            }
        )
        return
    table = Table(title=f"{len(models)} models of the performance catalog")
    table.add_column("model")
    table.add_column("parameters", justify="right")
    table.add_column("forward GFLOPs", justify="right")
    table.add_column("measured on")
    table.add_column("also named")
    for m, measured, names in models:
        table.add_row(
            m.name,
            f"{m.params_m:g} M",
            f"{m.forward_gflops:g}",
            ", ".join(measured) or "-",
            ", ".join(names) or "-",
        )
    console.print(table)


def _flag_message(err: PerfError) -> str:
    """Errors name the flag a user typed, not the request key."""
    if err.field is None or err.field.startswith("--"):
        return str(err)
    return f"--{err.field.replace('_', '-')}: {err.reason}"


def _print_table(
    catalog: Catalog,
    model: str,
    gpu: str,
    framework: str,
    network: str,
    node: NodeTopology,
    gpus: list[list[int]],
    result: Estimate,
    best: Estimate,
) -> None:
    spec = catalog.model(model)
    where = " ; ".join(",".join(map(str, g)) for g in gpus)
    nodes = f"{len(gpus)} x {node.name or 'node'}" if len(gpus) > 1 else (node.name or "node")
    gpu_name = catalog.gpu(gpu).name
    table = Table(title=f"{spec.name} on {gpu_name}, {framework}", title_justify="left")
    table.add_column("")
    table.add_column("value", justify="right")
    table.add_row("placement", f"{where} of {nodes}" + (f" ({network})" if len(gpus) > 1 else ""))
    table.add_row("sample", spec.sample)
    table.add_row("throughput", f"{result.throughput:,.1f} samples/s")
    table.add_row("iteration", f"{1e3 * result.iteration_s:.1f} ms")
    table.add_row("  compute", f"{1e3 * result.compute_s:.1f} ms")
    table.add_row("  gradient sync (total)", f"{1e3 * result.comm_s:.1f} ms")
    table.add_row("  gradient sync (exposed)", f"{1e3 * result.comm_exposed_s:.1f} ms")
    if result.interference > 1.0:
        table.add_row("interference", f"x{result.interference:.3f} compute")
    share = result.throughput / best.throughput
    table.add_row("best placement of as many GPUs", f"{best.throughput:,.1f} ({share:.0%} of it)")
    console.print(table)


POLLUX_FILE = "placements.csv"


def read_measurements(paths: list[str]) -> list[Measurement]:
    """Rows of every path: a directory is one job (named by the directory) holding
    placements.csv; a file is a CSV of model,gpu_type,placement,batch,step_time."""
    rows: list[Measurement] = []
    for given in paths:
        path = Path(given)
        job = None
        if path.is_dir():
            job = path.resolve().name
            path = path / POLLUX_FILE
            if not path.is_file():
                raise MeasurementError(f"a job's directory must hold {POLLUX_FILE}", source=given)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as err:
            raise MeasurementError(
                f"cannot read: {err.strerror or err}", source=str(path)
            ) from None
        rows.extend(parse_measurements(text, source=str(path), job=job))
    return rows


def run_fit(
    catalog: Catalog,
    paths: list[str],
    *,
    topology: str | None,
    network: str,
    framework: str,
    out: str | None,
    json_out: bool,
    pair_gap: float,
) -> None:
    """`toposched perf fit`: fit, print residuals and held-out errors, write the catalog."""
    if not math.isfinite(pair_gap) or pair_gap < 0:
        fail(f"--pair-gap: must be a fraction of 0 or more (0.1 = 10%), got {pair_gap}")
    if not paths:
        fail("perf fit needs --measurements PATH (a job's directory or a CSV file)")
    if topology is None or out is None:
        fail("perf fit needs --topology (the cluster's nodes) and --out CATALOG.yaml")
    try:
        node = load_topology(topology)
        rows = read_measurements(paths)
        result = fit(rows, catalog, node, network=network, framework=framework, pair_gap=pair_gap)
    except TopologyError as err:
        fail(f"--topology: {err}")
    except MeasurementError as err:
        fail(str(err))
    except PerfError as err:
        fail(_flag_message(err))
    jobs = ", ".join(sorted(result.jobs))
    header = (
        f"Fitted by `toposched perf fit` to {len(rows)} measured steps of {jobs}\n"
        f"on {node.name or topology} nodes, network {result.network}, framework "
        f"{result.framework}.\nUse it with --catalog; docs/perfmodel.md explains every field."
    )
    try:
        Path(out).write_text(result.catalog_yaml(header), encoding="utf-8")
    except OSError as err:
        fail(f"--out: cannot write {out}: {err.strerror or err}")
    if json_out:
        emit_json(fit_json(result, out))
        return
    _print_fit(result, out)


def fit_json(result: Fit, out: str) -> dict[str, Any]:
    """The fit as JSON: parameters, each job's 1-GPU step, and the held-out figures."""
    return {
        "out": out,
        "allreduce": result.catalog.framework(result.framework).allreduce.value,
        "params": {k: round(v, 6) for k, v in result.params.items()},
        "jobs": {
            job: {
                "model": speed.model.name,
                "gpu_type": speed.gpu_type,
                "fixed_s": round(speed.fixed_s, 6),
                "per_sample_s": round(speed.per_sample_s, 9),
            }
            for job, speed in sorted(result.jobs.items())
        },
        "pair_gap": result.pair_gap,
        "held_out": {
            job: {
                "median_ratio_error": round(m.median, 4),
                "worst_ratio_error": round(m.worst, 4),
                "pairs": m.pairs,
                "pairs_ordered": m.pairs_ordered,
                "pair_accuracy": round(m.pair_accuracy, 4),
            }
            for job, m in sorted(result.held_out.items())
        },
    }


def _print_fit(result: Fit, out: str) -> None:
    frame = result.catalog.framework(result.framework)
    params = Table(
        title=f"fitted: network {result.network}, framework {result.framework} "
        f"({frame.allreduce.value} all-reduce)",
        title_justify="left",
    )
    params.add_column("parameter")
    params.add_column("value", justify="right")
    for name, value in result.params.items():
        params.add_row(name, f"{value:.4g}")
    console.print(params)
    jobs = Table(title="1-GPU step = fixed + batch x per sample", title_justify="left")
    for column in ("job", "model", "GPU", "fixed ms", "per sample ms", "1-GPU rows"):
        jobs.add_column(column, justify="left" if column in ("job", "model", "GPU") else "right")
    for job, speed in sorted(result.jobs.items()):
        jobs.add_row(
            job,
            speed.model.name,
            speed.gpu_type,
            f"{1e3 * speed.fixed_s:.2f}",
            f"{1e3 * speed.per_sample_s:.4f}",
            str(speed.rows),
        )
    console.print(jobs)
    residuals = Table(title="residuals per placement (step time)", title_justify="left")
    for column in ("job", "placement", "rows", "median", "worst"):
        residuals.add_column(column, justify="left" if column in ("job", "placement") else "right")
    errors: dict[tuple[str, tuple[int, ...]], list[float]] = defaultdict(list)
    for row, predicted in zip(result.rows, result.predicted, strict=True):
        errors[(row.job, row.shape)].append(predicted / row.step_s - 1.0)
    for (job, shape), values in sorted(
        errors.items(), key=lambda kv: (kv[0][0], sum(kv[0][1]), kv[0][1])
    ):
        worst = max(values, key=abs)
        residuals.add_row(
            job,
            "".join(map(str, shape)) if max(shape) < 10 else "+".join(map(str, shape)),
            str(len(values)),
            f"{statistics.median(values):+.1%}",
            f"{worst:+.1%}",
        )
    console.print(residuals)
    held = Table(
        title="each job left out of the fit, predicted from its 1-GPU rows: T(p)/T(1) errors",
        title_justify="left",
    )
    apart = f"pairs ordered (over {100 * result.pair_gap:g}% apart)"
    for column in ("job", "median", "worst", apart):
        held.add_column(column, justify="left" if column == "job" else "right")
    for job, m in sorted(result.held_out.items()):
        held.add_row(
            job,
            f"{m.median:.1%}",
            f"{m.worst:.1%}",
            f"{m.pairs_ordered}/{m.pairs} ({m.pair_accuracy:.0%})",
        )
    console.print(held)
    console.print(f"wrote {out}")
