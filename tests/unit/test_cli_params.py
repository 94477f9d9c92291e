"""`--param [POLICY.]KEY=VALUE` parsing: values, targets, and errors that name what is wrong."""

from __future__ import annotations

import pytest

from toposched.cli.params import policy_params, scalar
from toposched.core import PolicyError


@pytest.mark.parametrize(
    ("text", "value"),
    [("null", None), ("None", None), ("true", True), ("False", False), ("8", 8),
     ("0.5", 0.5), ("pack", "pack"), (" spread ", "spread")],
)  # fmt: skip
def test_scalar(text: str, value: object) -> None:
    assert scalar(text) == value and type(scalar(text)) is type(value)


def test_params_go_to_the_named_policy_or_to_all() -> None:
    got = policy_params(
        ["toposched . demote_after_gpu_h = 2", "stop_grace_s=5"], ["toposched", "hived-like"]
    )
    assert got == {
        "toposched": {"demote_after_gpu_h": 2, "stop_grace_s": 5},
        "hived-like": {"stop_grace_s": 5},
    }


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("=1", "--param takes [POLICY.]KEY=VALUE, got '=1'"),
        ("fifo-gang.x=1", "'fifo-gang' is not one of the policies run (toposched)"),
        ("pack_above=1.5", "need 0 <= spread_below < pack_above <= 1"),
        ("grow_after_s=inf", "grow_after_s must be a finite number, got inf"),
    ],
)
def test_bad_params(item: str, message: str) -> None:
    with pytest.raises(PolicyError, match=r"^--param") as err:
        policy_params([item], ["toposched"])
    assert message in str(err.value)
