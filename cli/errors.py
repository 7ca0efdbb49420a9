"""One clear line and a non-zero exit for user errors: no tracebacks for bad input."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import NoReturn, TypeVar

import typer

F = TypeVar("F", bound=Callable)


class UserError(Exception):
    """Raised by command code for problems the user can fix (bad path, bad option, bad file)."""


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `error: message` on stderr and exit with `code`."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    sys.stdout.flush()
    raise typer.Exit(code)


def user_errors(*types: type[BaseException]) -> Callable[[F], F]:
    """Turn the listed exception types (plus UserError) into `fail(str(exc))`."""
    caught = (UserError, *types)

    def wrap(func: F) -> F:
        @functools.wraps(func)
        def inner(*args, **kwargs):
            try:
                return func(*args, **kwargs)
            except caught as exc:
                fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

        return inner  # type: ignore[return-value]

    return wrap


def check_region(region: str) -> None:
    """`--region`: empty, or one of the geo matrix's regions (else one clear line and exit 2)."""
    from swarm.flow.instance import geo_matrix, known_region

    if region and not known_region(region):
        fail(f"unknown region {region!r} (known: {', '.join(geo_matrix().regions)}; or leave it out)")
