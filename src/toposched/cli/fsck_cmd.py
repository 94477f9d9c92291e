"""`toposched admin fsck`: find, and with --repair mend, stored jobs the server cannot read."""

from __future__ import annotations

from pathlib import Path

import typer

from toposched.cli.output import console, emit_json, fail

admin_app = typer.Typer(no_args_is_help=True, help="Work on the server's database directly.")

# Exit status: 0 every row reads (or was repaired), 1 rows that cannot be read remain.
EXIT_UNREADABLE = 1


@admin_app.command("fsck")
def fsck(
    data_dir: Path = typer.Option(
        None,
        "--data-dir",
        help="The server's data directory (default: as `toposched serve` finds it).",
    ),
    db: str = typer.Option(None, "--db", help="SQLAlchemy URL (default: the data directory's)."),
    repair: bool = typer.Option(
        False,
        "--repair",
        help="Write each row back with its unreadable characters made U+FFFD, and delete each "
        "ended job whose spec says nothing usable (the server must be stopped).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the rows found as JSON."),
) -> None:
    """List the stored jobs and labels the server cannot read back as stored (text that is not
    UTF-8, a spec that is not one), and with --repair mend them, or delete an ended job
    whose record says nothing usable."""
    from toposched.common.jobspec import spec_problem
    from toposched.common.paths import DB_FILE, default_data_dir
    from toposched.server.serve import ServeError, lock_data_dir
    from toposched.server.shared import ENDED
    from toposched.store import Store, StoreError, sqlite_url
    from toposched.store.fsck import NotRepaired, unreadable
    from toposched.store.fsck import repair as mend

    where = data_dir or default_data_dir()
    if db is None and not (where / DB_FILE).is_file():
        fail(f"no database in {where} (give --data-dir or --db)")
    try:
        # Never migrated here: --db may name any database, and fsck only reads and mends.
        store = Store(
            db or sqlite_url(where / DB_FILE), migrate_it=False, spec_problem=spec_problem
        )
    except StoreError as err:
        fail(str(err))
    lock = None
    try:
        if repair and db is None:
            # The running server keeps jobs in memory: it must not see them change under it.
            try:
                lock = lock_data_dir(where)
            except ServeError as err:
                fail(f"{err}: stop it before --repair")
        found = list(unreadable(store))
        repaired = []
        why: dict[int, str] = {}
        if repair:
            for index, row in enumerate(found):
                try:
                    mend(store, row, ENDED)
                except NotRepaired as err:
                    why[index] = str(err)
                else:
                    repaired.append(row)
        left = [row for row in found if row not in repaired]
        if as_json:
            emit_json(
                {
                    "unreadable": [row.to_json() for row in found],
                    "repaired": [row.to_json() for row in repaired],
                }
            )
        else:
            for index, row in enumerate(found):
                done = " (repaired)" if row in repaired else ""
                left_why = f" (left: {why[index]})" if index in why else ""
                console.print(f"{row.describe()}{done}{left_why}", highlight=False, markup=False)
            hint = " (--repair mends them)" if left and not repair else ""
            console.print(
                f"{len(found)} unreadable, {len(repaired)} repaired, {len(left)} left{hint}",
                highlight=False,
            )
    finally:
        store.close()
        if lock is not None:
            lock.close()
    if left:
        raise typer.Exit(EXIT_UNREADABLE)
