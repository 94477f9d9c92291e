"""The click command class of `submit` and `kube submit`: the words after `--` set aside."""

from __future__ import annotations

from typer._click import Context as ClickContext
from typer.core import TyperCommand

from toposched.cli.flags import AFTER_DASHES


class SubmitCommand(TyperCommand):
    """`submit [KIND] [OPTIONS] -- COMMAND...`: the words after the first `--` are the command,
    set aside before the options are parsed, so that no option is ever taken for a word of the
    command nor a word of the command for an option."""

    def parse_args(self, ctx: ClickContext, args: list[str]) -> list[str]:
        command: list[str] | None = None
        if "--" in args:
            at = args.index("--")
            args, command = args[:at], args[at + 1 :]
        ctx.meta[AFTER_DASHES] = command
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: ClickContext) -> list[str]:
        return ["[KIND]", "[OPTIONS]", "-- COMMAND..."]
