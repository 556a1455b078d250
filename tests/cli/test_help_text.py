"""What ``--help`` shows: plain text. click prints a command's docstring as it is, so
reStructuredText markup in one (double backquotes, ``:mod:`` roles) reaches the user's
terminal verbatim; every command and subcommand of ``bkframe`` is walked here, in-process,
with its options (none listed twice)."""

from __future__ import annotations

from collections.abc import Iterator

import click

from bkframe.cli.main import COMMANDS, main

#: Markup that means something to Sphinx and nothing to a terminal.
MARKUP = ("``", ":mod:", ":func:", ":class:", ":meth:", ":data:", ":attr:")


def commands(command: click.Command, ctx: click.Context) -> Iterator[tuple[str, click.Context]]:
    """Every command under ``command`` (itself first), with a context to render its help in."""
    yield ctx.command_path, ctx
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, f"{ctx.command_path} lists {name} but has no such command"
            yield from commands(sub, click.Context(sub, info_name=name, parent=ctx))


def test_every_help_text_is_plain() -> None:
    seen = []
    marked = {}
    twice = {}
    # Twice: the lazy root group builds some commands when asked, and asking again must not
    # add an option a second time (--help would list it twice).
    for _ in range(2):
        for path, ctx in commands(main, click.Context(main, info_name="bkframe")):
            seen.append(path)
            text = ctx.get_help()
            found = [m for m in MARKUP if m in text]
            if found:
                marked[path] = found
            opts = [o for p in ctx.command.params for o in p.opts]
            if len(opts) != len(set(opts)):
                twice[path] = sorted({o for o in opts if opts.count(o) > 1})
    # The walk must reach the nested groups, or it would prove nothing about them.
    assert {"bkframe ledger metadata", "bkframe bookies list", "bkframe log offload", "bkframe bench scale metadata"} <= set(seen)
    assert not marked, f"--help shows reStructuredText markup: {marked}"
    assert not twice, f"options declared twice: {twice}"


def test_the_root_help_lines_are_the_commands_own() -> None:
    """``bkframe --help`` lists the commands from :data:`bkframe.cli.main.COMMANDS` without
    importing them: each line there is the command's own (its docstring's first sentence)."""
    ctx = click.Context(main, info_name="bkframe")
    for name, (_, summary) in COMMANDS.items():
        command = main.get_command(ctx, name)
        assert command is not None
        assert summary == command.get_short_help_str(limit=10**6), name


def test_verbose_may_come_after_the_command() -> None:
    """``-v`` is the root group's, taken wherever it is on the line before ``--``: so no
    command may have a ``-v`` or ``--verbose`` of its own."""
    ctx = click.Context(main, info_name="bkframe")
    rest = main.parse_args(ctx, ["log", "list", "-vv", "--metadata", "sqlite:///x.db", "-v"])
    assert ctx.params["verbose"] == 3 and rest[-3:] == ["list", "--metadata", "sqlite:///x.db"]
    ctx = click.Context(main, info_name="bkframe")
    rest = main.parse_args(ctx, ["ledger", "read", "--", "-v"])
    assert ctx.params["verbose"] == 0 and rest[-1] == "-v"
    for path, command_ctx in commands(main, click.Context(main, info_name="bkframe")):
        if path != "bkframe":
            opts = {o for p in command_ctx.command.params for o in (*p.opts, *p.secondary_opts)}
            assert not opts & {"-v", "--verbose"}, path
