"""What a stop costs, checked against the definition: checkpoints every `interval` seconds of
work keep the work up to the last of them; the rest is lost."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toposched.core.stopcost import checkpointed_s, lost_s


@given(done=st.floats(0, 1e7), interval=st.floats(1e-3, 1e5))
def test_what_is_kept_is_the_last_checkpoint_and_the_rest_is_lost(
    done: float, interval: float
) -> None:
    kept = checkpointed_s(done, interval)
    assert 0 <= kept <= done
    assert math.isclose(kept / interval, round(kept / interval), abs_tol=1e-6)  # a checkpoint
    assert done - kept < interval * (1 + 1e-9)  # no later checkpoint was missed
    assert math.isclose(lost_s(done, interval) + kept, done, rel_tol=1e-9, abs_tol=1e-9)


def test_without_checkpoints_all_is_lost_and_a_bad_interval_is_refused() -> None:
    assert checkpointed_s(500.0, None) == 0.0 and lost_s(500.0, None) == 500.0
    assert lost_s(3700.0, 1800.0) == 100.0
    for bad in (0.0, -5.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="checkpoint interval must be a positive time"):
            checkpointed_s(10.0, bad)
