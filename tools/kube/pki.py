"""The control plane's certificates and keys, made with the `openssl` command: a cluster CA,
the API server's serving certificate, client certificates (the admin, kube-scheduler,
kube-controller-manager) and the service-account signing key, as kubeadm lays them out."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

DAYS = "3650"


class PkiError(RuntimeError):
    """The certificates cannot be made (no openssl, or it failed)."""


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise PkiError("no `openssl` command: it makes the control plane's certificates")
    done = subprocess.run([openssl, *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise PkiError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def make_ca(folder: Path) -> None:
    """ca.key and ca.crt: the cluster's CA, which signs every other certificate."""
    _openssl("genrsa", "-out", "ca.key", "2048", cwd=folder)
    _openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=toposched-test-ca",
        "-days", DAYS, "-out", "ca.crt", cwd=folder,
    )  # fmt: skip


def make_cert(
    folder: Path,
    name: str,
    subject: str,
    *,
    server_names: tuple[str, ...] = (),
    server_ips: tuple[str, ...] = (),
) -> None:
    """`name`.key and `name`.crt signed by the CA: a client certificate for `subject`
    (`/CN=user/O=group`), or a serving one where names or addresses are given."""
    _openssl("genrsa", "-out", f"{name}.key", "2048", cwd=folder)
    csr = f"{name}.csr"
    _openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", csr, cwd=folder)
    usage = "serverAuth" if server_names or server_ips else "clientAuth"
    lines = [
        "basicConstraints=CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={usage}",
    ]
    alt = [f"DNS:{n}" for n in server_names] + [f"IP:{ip}" for ip in server_ips]
    if alt:
        lines.append("subjectAltName=" + ",".join(alt))
    (folder / f"{name}.ext").write_text("\n".join(lines) + "\n")
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", DAYS, "-extfile", f"{name}.ext", "-out", f"{name}.crt",
        cwd=folder,
    )  # fmt: skip


def make_service_account_key(folder: Path) -> None:
    """sa.key and sa.pub: what the API server signs service-account tokens with."""
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=folder)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=folder)
