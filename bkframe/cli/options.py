"""Options several command groups share, declared once, and the parsing of their values
(passwords, quorums, durations such as ``15m``)."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from bkframe.common.environment import AUTH_TOKEN_ENV, METADATA_ENV, PASSWORD_ENV, SECURITY_ENV

F = TypeVar("F", bound=Callable[..., Any])


class EnvOption(click.Option):
    """An option that may come from an environment variable and says so where a user looks:
    in its error ("Missing option '--metadata' (or set $BKFRAME_METADATA)", click's own
    names only the flag) and in ``--help``, as every option's help names its variable:
    ``(or $BKFRAME_METADATA)`` (added unless its help text names the variable already), never
    click's ``[env var: ...]``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if isinstance(self.envvar, str) and f"${self.envvar}" not in (self.help or ""):
            self.help = f"{self.help or ''} (or ${self.envvar})".strip()

    def get_error_hint(self, ctx: click.Context | None) -> str:
        hint = super().get_error_hint(ctx)
        return f"{hint} (or set ${self.envvar})" if isinstance(self.envvar, str) else hint


def missing_option(ctx: click.Context, name: str) -> click.MissingParameter:
    """The error for the option ``name`` a command checks itself (one required only without a
    subcommand, or with a config file that may hold it instead), worded as click's."""
    param = next(p for p in ctx.command.params if p.name == name)
    return click.MissingParameter(ctx=ctx, param=param)


def metadata_option(*, required: bool = True, help: str = "") -> Callable[[F], F]:
    """``--metadata URI`` (or ``$BKFRAME_METADATA``): the metadata store of the cluster."""
    return click.option(
        "--metadata",
        cls=EnvOption,
        envvar=METADATA_ENV,
        required=required,
        help=help or f"Metadata store URI, e.g. sqlite:///path/meta.db (or ${METADATA_ENV}).",
    )


def password_option(what: str) -> Callable[[F], F]:
    """``--password P``, ``--password-file PATH`` or ``$BKFRAME_PASSWORD``: the ``what``'s
    password (empty if none is given, as the client's), passed to the command as
    ``password: str``. Two of them at once is an error: neither silently wins."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def command(*args: Any, password: str | None, password_file: Path | None, **kwargs: Any) -> Any:
            return fn(*args, password=read_password(password, password_file), **kwargs)

        with_file = click.option(
            "--password-file",
            type=click.Path(path_type=Path, dir_okay=False),
            help=f"A file holding the {what}'s password (its first line).",
        )(command)
        return click.option(
            "--password", default=None, help=f"The {what}'s password (or --password-file, or ${PASSWORD_ENV})."
        )(with_file)  # type: ignore[return-value]

    return decorate


def read_password(flag: str | None, path: Path | None) -> str:
    """The password from the one source given (see :func:`password_option`)."""
    sources = {name: value for name, value in (
        ("--password", flag), ("--password-file", path), (f"${PASSWORD_ENV}", os.environ.get(PASSWORD_ENV))
    ) if value is not None}
    if len(sources) > 1:
        raise click.UsageError(f"the password is given {len(sources)} ways ({', '.join(sources)}); give one")
    if path is not None:
        return _first_line(path, "the password file", "--password-file")
    return str(next(iter(sources.values()), ""))


def _first_line(path: Path, what: str, option: str) -> str:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else e
        raise click.BadParameter(f"cannot read {what} {path}: {reason}", param_hint=option) from None
    return text.splitlines()[0] if text else ""


#: A count, a size, a window or a number of bookies: a whole number >= 1.
AT_LEAST_ONE = click.IntRange(min=1)
#: A size in bytes: a whole number >= 0.
BYTES = click.IntRange(min=0)


def check_quorums(ensemble: int, write_quorum: int, ack_quorum: int) -> None:
    """The ledger model's rule (E >= W >= A >= 1) as one error line, before anything starts."""
    from bkframe.core.metadata import LedgerMetadata

    try:
        LedgerMetadata(0, ensemble, write_quorum, ack_quorum, ((0, tuple(str(i) for i in range(ensemble))),))
    except ValueError as e:
        raise click.ClickException(f"{e} (-e/--ensemble, -w/--write-quorum, -a/--ack-quorum)") from None


#: ``click`` context meta key: the ``-v`` level and ``--log-format`` given to ``bkframe``
#: (None each when not given), which win over a bookie's ``[logging]`` section.
LOG_OVERRIDES = "bkframe.log_overrides"


#: ``click`` context meta key: the ``--auth-token-file`` a command was given.
AUTH_TOKEN_FILE = "bkframe.auth_token_file"


def _remember_token_file(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    if value is not None:
        ctx.meta[AUTH_TOKEN_FILE] = value


#: ``--auth-token-file PATH``: for commands that connect to bookies; :func:`client_security` reads it.
auth_token_option = click.option(
    "--auth-token-file",
    type=click.Path(path_type=Path, dir_okay=False),
    expose_value=False,
    callback=_remember_token_file,
    help=f"A file holding the token for bookies with token auth (or ${SECURITY_ENV['auth_token_file']}, "
    f"or ${AUTH_TOKEN_ENV}).",
)


class ClientGroup(click.Group):
    """A command group whose commands connect to bookies: each takes ``--auth-token-file``."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        super().add_command(auth_token_option(cmd), name)


def client_security(**given: str | Path | None) -> dict[str, Any]:
    """``open_client`` keywords for TLS and the token: each of ``tls_ca``, ``tls_cert`` and
    ``tls_key`` as given, else from its environment variable; the token from the one source
    given of ``--auth-token-file`` (``auth_token_file`` here, or the command's option),
    ``$BKFRAME_AUTH_TOKEN_FILE`` and ``$BKFRAME_AUTH_TOKEN`` -- never from a flag that
    ``ps`` would show. Two token sources at once are an error."""
    values = {key: given.get(key) or os.environ.get(env, "") for key, env in SECURITY_ENV.items() if key != "auth_token_file"}
    out: dict[str, Any] = {k: str(v) for k, v in values.items() if v}
    ctx = click.get_current_context(silent=True)
    flag = given.get("auth_token_file") or (ctx.meta.get(AUTH_TOKEN_FILE) if ctx is not None else None)
    sources = {name: value for name, value in (
        ("--auth-token-file", flag),
        (f"${SECURITY_ENV['auth_token_file']}", os.environ.get(SECURITY_ENV["auth_token_file"])),
        (f"${AUTH_TOKEN_ENV}", os.environ.get(AUTH_TOKEN_ENV)),
    ) if value}
    if len(sources) > 1:
        raise click.UsageError(f"the token is given {len(sources)} ways ({', '.join(sources)}); give one")
    for name, value in sources.items():
        token = value if name == f"${AUTH_TOKEN_ENV}" else _first_line(Path(value), "the token file", name)
        out["auth_token"] = str(token).strip()
    return out


# -- durations on the command line (``90``, ``90s``, ``15m``, ``12h``, ``7d``) and for people --

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str, option: str) -> float:
    """Seconds from ``90``, ``90s``, ``15m``, ``12h`` or ``7d``."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip())
    if not m or float(m.group(1)) <= 0:
        raise click.BadParameter(f"{text!r}: write a duration > 0 such as 90s, 15m, 12h or 7d", param_hint=option)
    return float(m.group(1)) * UNITS.get(m.group(2) or "s", 1)


class Duration(click.ParamType):
    """A duration option's value in seconds: ``604800`` or ``604800s``, ``15m``, ``12h``, ``7d``
    (options named ``--...-s`` take seconds, and these too, as every other duration option does)."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        return duration(str(value), param.opts[0] if param is not None else "")


#: ``type=DURATION``: seconds, or a duration such as ``7d``.
DURATION = Duration()


def seconds(s: float | None) -> str:
    """A duration for people: 45s, 12m, 3.5h, 7d; - for none."""
    if s is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.3g}{unit}"
    return f"{s:.0f}s"
