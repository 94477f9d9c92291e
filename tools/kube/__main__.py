"""`python -m tools.kube build | up | version`: the Kubernetes control plane of the tests, for
people too (`make kube-control-plane`)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import tempfile
import threading
from pathlib import Path

from tools.kube import build
from tools.kube.controlplane import ControlPlane, ControlPlaneError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.kube", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build", help="build what is missing (once per machine); print where")
    up = commands.add_parser(
        "up", help="start a control plane on 127.0.0.1 and run it until Ctrl-C or SIGTERM"
    )
    up.add_argument("--dir", type=Path, help="its state: certificates, etcd, logs (default: new)")
    up.add_argument("--scheduler", action="store_true", help="run kube-scheduler too")
    commands.add_parser("version", help="the versions the modules pin")
    args = parser.parse_args(argv)

    if args.command == "version":
        versions = build.pinned()
        print(f"kubernetes {versions.kubernetes}, etcd {versions.etcd}")
        return 0
    try:
        binaries = build.build(lambda line: print(line, file=sys.stderr, flush=True))
    except build.BuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.command == "build":
        print(binaries)
        return 0
    home = args.dir or Path(tempfile.mkdtemp(prefix="toposched-kube-"))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with ControlPlane(home, binaries, scheduler=args.scheduler) as plane:
            print(f"Kubernetes {plane.version()} at {plane.server} (logs: {home / 'logs'})")
            print(f"export KUBECONFIG={plane.admin_kubeconfig}")
            print("No kubelet runs: nodes are Node objects you make. Ctrl-C stops it.", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                stop.wait()
    except ControlPlaneError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
