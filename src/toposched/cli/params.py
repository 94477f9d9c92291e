"""`--param [POLICY.]KEY=VALUE`: scheduler policy parameters given on the command line."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from toposched.core import PolicyError, make_scheduler_policy

Value = bool | int | float | str | None


def scalar(text: str) -> Value:
    """`null`/`none`, `true`/`false`, an integer, a number, else the text itself."""
    lowered = text.strip().lower()
    if lowered in ("null", "none"):
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()


def policy_params(items: Iterable[str], policies: Sequence[str]) -> dict[str, dict[str, Value]]:
    """Each policy's parameters from `[POLICY.]KEY=VALUE` items (no POLICY: every policy),
    checked by building each policy: a bad one raises PolicyError naming the item."""
    out: dict[str, dict[str, Value]] = {name: {} for name in policies}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise PolicyError(f"--param takes [POLICY.]KEY=VALUE, got {item!r}")
        target, dot, key = key.strip().rpartition(".")
        target, key = target.strip(), key.strip()
        if dot and target not in out:
            raise PolicyError(
                f"--param {item!r}: {target!r} is not one of the policies run "
                f"({', '.join(policies)})"
            )
        for name in [target] if dot else policies:
            out[name][key] = scalar(text)
    for name, params in out.items():
        try:
            make_scheduler_policy(name, params)
        except PolicyError as err:
            said = str(err)
            if repr(name) not in said:
                said = f"policy {name!r}: {said}"
            raise PolicyError(f"--param: {said}") from None
    return out
