"""Read the performance catalog files a user names, and build the catalog from them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from toposched.perf.errors import CatalogError
from toposched.perf.model import PerfModel
from toposched.perf.registry import Catalog


def load_catalog(
    paths: Iterable[str | Path] = (), aliases: Mapping[str, str] | None = None
) -> Catalog:
    """The shipped catalog extended by the YAML files at `paths`, in order, and `aliases`."""
    texts: list[tuple[str, str]] = []
    for path in paths:
        try:
            texts.append((str(path), Path(path).read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            raise CatalogError(f"cannot read: {reason}", source=str(path)) from None
    return Catalog.load(texts, aliases=aliases)


def load_perf_model(paths: Iterable[str | Path], network: str | None, framework: str) -> PerfModel:
    """The performance model over `load_catalog(paths)`, once `network` (unless None) and
    `framework` are known to it: PerfError naming the known ones otherwise, before any work."""
    perf = PerfModel(load_catalog(paths))
    if network is not None:
        perf.catalog.network(network)
    perf.catalog.framework(framework)
    return perf
