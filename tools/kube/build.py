"""Build etcd and the Kubernetes control plane from their Go modules into a cache outside git.

The versions are those the modules under tools/kube/modules/ pin (go.mod and go.sum). Each
build goes to a folder of the cache named by a hash of those files and of the Go version, so a
machine builds each pinned version once and reuses it; a version bump builds anew beside it.
Nothing is fetched from a release site: the Go command takes the modules from the module proxy.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MODULES = Path(__file__).resolve().parent / "modules"
CACHE_ENV = "TOPOSCHED_KUBE_CACHE"
# (module folder, the packages it builds, the binaries they make)
KUBERNETES = (
    "kubernetes",
    (
        "k8s.io/kubernetes/cmd/kube-apiserver",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-scheduler",
        "k8s.io/kubernetes/cmd/kubectl",
    ),
)
ETCD = ("etcd", ("go.etcd.io/etcd/server/v3",))
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
FIRST_BUILD = "about 15 minutes on 2 cores, most of it kube-apiserver"


class BuildError(RuntimeError):
    """The control plane cannot be built here; the message says why and what to do."""


@dataclass(frozen=True)
class Versions:
    kubernetes: str  # v1.37.2
    etcd: str  # v3.6.16

    @property
    def minor(self) -> tuple[str, str]:
        major, minor = self.kubernetes.lstrip("v").split(".")[:2]
        return major, minor


def pinned() -> Versions:
    """The versions the modules pin."""
    return Versions(
        _required(MODULES / "kubernetes" / "go.mod", "k8s.io/kubernetes"),
        _required(MODULES / "etcd" / "go.mod", "go.etcd.io/etcd/server/v3"),
    )


def _required(go_mod: Path, module: str) -> str:
    match = re.search(rf"^\s*{re.escape(module)} (v\S+)", go_mod.read_text(), re.MULTILINE)
    if match is None:
        raise BuildError(f"{go_mod} requires no {module}")
    return match.group(1)


def go_command() -> str | None:
    """The `go` command, or None where the machine has no Go."""
    return shutil.which("go")


def cache_root() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "toposched" / "kube"


def build_key(go: str) -> str:
    """What a build is named by: the pinned modules and the Go that builds them."""
    digest = hashlib.sha256()
    for folder in ("kubernetes", "etcd"):
        for name in ("go.mod", "go.sum"):
            digest.update((MODULES / folder / name).read_bytes())
    version = subprocess.run(
        [go, "env", "GOVERSION"], capture_output=True, text=True, check=True
    ).stdout.strip()
    digest.update(version.encode())
    versions = pinned()
    return f"kubernetes-{versions.kubernetes}-etcd-{versions.etcd}-{digest.hexdigest()[:12]}"


def built() -> Path | None:
    """The folder of the built binaries for the pinned versions, if this machine has them."""
    go = go_command()
    if go is None:
        return None
    folder = cache_root() / build_key(go) / "bin"
    return folder if all((folder / b).exists() for b in BINARIES) else None


def ldflags(versions: Versions) -> str:
    """What `hack/lib/version.sh` stamps into a release build: without it `/version` says
    v0.0.0 and the components emulate the wrong release."""
    major, minor = versions.minor
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        for key, value in (
            ("gitVersion", versions.kubernetes),
            ("gitMajor", major),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
            ("buildDate", stamp),
        ):
            flags.append(f"-X {package}.{key}={value}")
    return " ".join(flags)


def build(say: Callable[[str], None] = print) -> Path:
    """Build what is missing; the folder of the binaries."""
    go = go_command()
    if go is None:
        raise BuildError(
            "no `go` command: the control plane is built from Go modules (Go 1.26 or newer)"
        )
    have = built()
    if have is not None:
        return have
    versions = pinned()
    home = cache_root() / build_key(go)
    home.parent.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN", "local"),
        "GOFLAGS": "-mod=readonly -buildvcs=false",
        "CGO_ENABLED": "0",
    }
    with tempfile.TemporaryDirectory(dir=home.parent, prefix=".building-") as scratch:
        out = Path(scratch) / "bin"
        out.mkdir()
        for (folder, packages), flags in (
            (ETCD, "-s -w"),
            (KUBERNETES, ldflags(versions)),
        ):
            version = versions.etcd if folder == "etcd" else versions.kubernetes
            names = ", ".join(p.rstrip("/").split("/")[-1] for p in packages)
            say(f"building {folder} {version} ({names}) from its Go module ...")
            started = time.monotonic()
            command = [go, "build", "-trimpath", "-ldflags", flags, "-o", f"{out}/", *packages]
            done = subprocess.run(
                command, cwd=MODULES / folder, env=env, capture_output=True, text=True
            )
            if done.returncode != 0:
                raise BuildError(f"`go build` of {folder} failed:\n{done.stderr[-4000:]}")
            say(f"built {folder} in {time.monotonic() - started:.0f} s")
        # Go names a binary after its package path's last element that is not a major
        # version: etcd's is `server`.
        (out / "server").rename(out / "etcd")
        missing = [b for b in BINARIES if not (out / b).exists()]
        if missing:
            raise BuildError(f"the build made no {', '.join(missing)} in {out}")
        if home.exists():
            shutil.rmtree(home)
        home.mkdir()
        os.replace(out, home / "bin")
    return home / "bin"
