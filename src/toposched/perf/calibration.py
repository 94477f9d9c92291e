"""The measurements the model must reproduce, copied from the project's seed documents.

Sources (copied with attribution; the project never reads the seed files at run time):
- ACK-TF: Alibaba Cloud, Container Service for Kubernetes, "Use topology-aware GPU scheduling to
  achieve optimal GPU acceleration for TensorFlow distributed jobs" (TensorFlow 2.3 + Horovod,
  tf_cnn_benchmarks, batch 64 per GPU, two servers of 8x V100).
- ACK-PyTorch: the same documentation, PyTorch edition (PyTorch 1.6 + Horovod,
  pytorch_synthetic_benchmark.py, batch 64 per GPU).
- Xiao: Wencong Xiao, "All You Need to Know about Scheduling Deep Learning Jobs" (MSR; P100
  servers with two CPUs, two PCIe switches per CPU, two GPUs per switch; TensorFlow parameter
  servers and CNTK), sections 3.1 and 3.2.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import combinations

from toposched.perf.model import NodeShare, PerfModel
from toposched.placement.capacity import full_mask
from toposched.placement.topology_aware import choose
from toposched.topology.cluster import Tier
from toposched.topology.node import NodeTopology
from toposched.topology.presets import preset

ACK_NODE = "dgx1-v100"
PAPER_NODE = "pcie-8gpu-2socket"


class Kind(StrEnum):
    """How a case is compared: samples/s within a relative tolerance, or a loss in points."""

    THROUGHPUT = "samples/s"
    LOSS = "loss %"


@dataclass(frozen=True)
class Case:
    source: str
    case: str
    measured: float
    kind: Kind
    tolerance: float
    """Relative (0.10 = 10%) for THROUGHPUT; percentage points for LOSS."""
    evaluate: Callable[[PerfModel], float]

    def residual(self, model_value: float) -> float:
        """Relative error (THROUGHPUT) or difference in percentage points (LOSS)."""
        if self.kind is Kind.THROUGHPUT:
            return (model_value - self.measured) / self.measured
        return model_value - self.measured

    def within(self, model_value: float) -> bool:
        return abs(self.residual(model_value)) <= self.tolerance


def best_set(topology: NodeTopology, k: int) -> tuple[int, ...]:
    """What topology-aware placement picks on an empty node: the k-set with the best ring."""
    return choose(topology, full_mask(topology.size), k)


def _ack(
    model_name: str, framework: str, placement: Sequence[NodeShare]
) -> Callable[[PerfModel], float]:
    def run(model: PerfModel) -> float:
        return model.estimate(
            model_name, "V100", placement, framework=framework, network="ack", batch=64
        ).throughput

    return run


def _ack_best(model_name: str, framework: str) -> Callable[[PerfModel], float]:
    def run(model: PerfModel) -> float:
        node = preset(ACK_NODE)
        return _ack(model_name, framework, [(node, best_set(node, 4))])(model)

    return run


def _ack_median(model_name: str, framework: str) -> Callable[[PerfModel], float]:
    """Median over all 70 4-GPU sets: what a topology-blind pick gets, typically."""

    def run(model: PerfModel) -> float:
        node = preset(ACK_NODE)
        speeds = [
            _ack(model_name, framework, [(node, gpus)])(model)
            for gpus in combinations(range(node.size), 4)
        ]
        return statistics.median(speeds)

    return run


def _loss(
    model_name: str,
    framework: str,
    base: Sequence[NodeShare],
    other: Sequence[NodeShare],
    *,
    batch: int = 64,
    neighbours: Sequence[Sequence[int]] | None = None,
) -> Callable[[PerfModel], float]:
    """Percent of throughput lost going from `base` to `other` (P100 servers of the paper)."""

    def run(model: PerfModel) -> float:
        def speed(placement: Sequence[NodeShare], others: Sequence[Sequence[int]] | None) -> float:
            return model.estimate(
                model_name,
                "P100",
                placement,
                framework=framework,
                network="msr-p100",
                tier=Tier.RACK,
                batch=batch,
                neighbours=others,
            ).throughput

        return 100.0 * (1.0 - speed(other, neighbours) / speed(base, None))

    return run


def cases() -> list[Case]:
    """Every calibration target of issue 4, with the issue's tolerance."""
    dgx = preset(ACK_NODE)
    pcie = preset(PAPER_NODE)
    two_by_two_dgx = [(dgx, (0, 1)), (dgx, (0, 1))]
    local4 = [(pcie, (0, 1, 2, 3))]
    two_by_two = [(pcie, (0, 1)), (pcie, (0, 1))]
    four_by_one = [(pcie, (0,))] * 4
    tf, pt = "ACK, TensorFlow 2.3 + Horovod", "ACK, PyTorch 1.6 + Horovod"
    paper = "Xiao et al., P100"
    tput, loss = Kind.THROUGHPUT, Kind.LOSS
    return [
        Case(
            tf,
            "VGG16, 4 GPUs in one server",
            991.92,
            tput,
            0.10,
            _ack_best("vgg16", "tensorflow-horovod"),
        ),
        Case(
            tf,
            "VGG16, 2 + 2 GPUs on two servers",
            200.47,
            tput,
            0.10,
            _ack("vgg16", "tensorflow-horovod", two_by_two_dgx),
        ),
        Case(
            tf,
            "ResNet50, 4 GPUs in one server",
            1471.55,
            tput,
            0.10,
            _ack_best("resnet50", "tensorflow-horovod"),
        ),
        Case(
            tf,
            "ResNet50, 2 + 2 GPUs on two servers",
            745.38,
            tput,
            0.10,
            _ack("resnet50", "tensorflow-horovod", two_by_two_dgx),
        ),
        Case(
            pt,
            "VGG16, best 4 GPUs of one server",
            820.5,
            tput,
            0.10,
            _ack_best("vgg16", "pytorch-horovod"),
        ),
        Case(
            pt,
            "VGG16, 4 GPUs picked without topology (median of 70 sets)",
            435.2,
            tput,
            0.15,
            _ack_median("vgg16", "pytorch-horovod"),
        ),
        Case(
            pt,
            "ResNet50, best 4 GPUs of one server",
            1321.9,
            tput,
            0.10,
            _ack_best("resnet50", "pytorch-horovod"),
        ),
        Case(
            pt,
            "ResNet50, 4 GPUs picked without topology (median of 70 sets)",
            1251.8,
            tput,
            0.15,
            _ack_median("resnet50", "pytorch-horovod"),
        ),
        Case(
            f"{paper}, TensorFlow PS",
            "ResNet50 on 4 GPUs: 2x2 against one server",
            28.0,
            loss,
            10.0,
            _loss("resnet50", "tensorflow-ps", local4, two_by_two),
        ),
        Case(
            f"{paper}, TensorFlow PS",
            "ResNet50 on 4 GPUs: 4x1 against one server",
            59.0,
            loss,
            10.0,
            _loss("resnet50", "tensorflow-ps", local4, four_by_one),
        ),
        Case(
            f"{paper}, TensorFlow PS",
            "InceptionV3 on 4 GPUs: 2x2 against one server",
            0.0,
            loss,
            10.0,
            _loss("inception3", "tensorflow-ps", local4, two_by_two),
        ),
        Case(
            f"{paper}, CNTK",
            "AlexNet on 2 GPUs: across sockets against one PCIe switch",
            27.0,
            loss,
            10.0,
            # The paper gives no batch; 512 is the batch of the P100 AlexNet throughput used.
            _loss("alexnet", "cntk", [(pcie, (0, 1))], [(pcie, (0, 4))], batch=512),
        ),
        Case(
            f"{paper}, CNTK",
            "ResNet152 on 2 GPUs: across sockets against one PCIe switch",
            11.0,
            loss,
            10.0,
            _loss("resnet152", "cntk", [(pcie, (0, 1))], [(pcie, (0, 4))]),
        ),
        Case(
            f"{paper}, TensorFlow",
            "1-GPU LSTM beside a 1-GPU job under its PCIe switch",
            12.0,
            loss,
            10.0,
            _loss("lstm", "tensorflow-ps", [(pcie, (0,))], [(pcie, (0,))], neighbours=[(1,)]),
        ),
        Case(
            f"{paper}, CNTK",
            "1-GPU LSTM beside a 1-GPU job under its PCIe switch",
            40.0,
            loss,
            10.0,
            _loss("lstm", "cntk", [(pcie, (0,))], [(pcie, (0,))], neighbours=[(1,)]),
        ),
    ]
