"""The size the code keeps (issue 45): no module of src/ over 700 lines, none of the server's
over 500, so that no file grows back into a hub unnoticed."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "toposched"
MOST_LINES = 700
MOST_SERVER_LINES = 500


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_is_a_hub() -> None:
    over = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py") if (n := lines(p)) > MOST_LINES}
    assert over == {}, f"split these (at most {MOST_LINES} lines each): {over}"


def test_the_servers_rooms_stay_small() -> None:
    server = SRC / "server"
    over = {p.name: n for p in server.glob("*.py") if (n := lines(p)) > MOST_SERVER_LINES}
    assert over == {}, f"split these (at most {MOST_SERVER_LINES} lines each): {over}"
