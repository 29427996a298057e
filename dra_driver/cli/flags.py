"""Command-line flags generated from settings dataclasses, each backed by an env variable.

Field ``node_name`` becomes flag ``--node-name`` and environment variable ``NODE_NAME``
(the Helm chart sets env vars, people at a shell use flags); a command may put a prefix on
its variables (``GPUSHARE_OUTPUT``) so that what a shell happens to export does not reach
it. Precedence: flag, then a non-empty environment variable, then the field default. Values
from either source go through the same conversion, so a bad ``LOG_LEVEL`` is refused as
clearly as a bad ``--log-level``.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

from dra_driver.settings import CHOICES, HELP, POSITIONAL, SHORT, STANDARD_ENV, InvalidSettingError

S = TypeVar("S")

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})


class SettingsError(ValueError):
    """A flag or environment variable holds a value its setting cannot take."""


class _NotGiven:
    """Marks a flag absent from the command line, so the env variable may apply."""

    def __repr__(self) -> str:
        return "<not given>"


_NOT_GIVEN: Final = _NotGiven()


def env_name(field_name: str, prefix: str = "") -> str:
    """Environment variable read for a settings field."""
    return prefix + field_name.upper()


def _env_of(field: dataclasses.Field[Any], prefix: str) -> str:
    return env_name(field.name, "" if field.metadata.get(STANDARD_ENV) else prefix)


def flag_name(field_name: str) -> str:
    """Command-line flag for a settings field."""
    return "--" + field_name.replace("_", "-")


def _parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    allowed = ", ".join(sorted(_TRUE | _FALSE))
    raise ValueError(f"invalid boolean {raw!r}; allowed values: {allowed}")


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:  # noqa: ANN401 - a type hint is Any
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


def _converter(field: dataclasses.Field[Any], hint: Any) -> Callable[[str], object]:  # noqa: ANN401
    base, optional = _unwrap_optional(hint)
    choices: tuple[str, ...] | None = field.metadata.get(CHOICES)
    if isinstance(base, type) and issubclass(base, enum.Enum):
        choices = tuple(str(member.value) for member in base)
    elif base is bool:
        return _parse_bool
    elif base not in (str, int, float, Path):
        raise TypeError(f"setting {field.name}: unsupported type {hint!r}")

    def convert(raw: str) -> object:
        if optional and raw == "":
            return None
        if choices is not None and raw not in choices:
            raise ValueError(f"invalid value {raw!r}; allowed values: {', '.join(choices)}")
        try:
            return base(raw)
        except ValueError:
            raise ValueError(f"invalid {base.__name__} value {raw!r}") from None

    return convert


def _fields(settings_class: type[Any]) -> list[tuple[dataclasses.Field[Any], Any]]:
    hints = typing.get_type_hints(settings_class)
    return [(field, hints[field.name]) for field in dataclasses.fields(settings_class)]


def add_settings_arguments(
    parser: argparse.ArgumentParser, settings_class: type[Any], *, env_prefix: str = ""
) -> None:
    """Add one flag per field of ``settings_class`` to ``parser``."""
    group = parser.add_argument_group(settings_class.__doc__ or settings_class.__name__)
    for field, hint in _fields(settings_class):
        convert = _converter(field, hint)
        if field.metadata.get(POSITIONAL):
            group.add_argument(
                field.name,
                nargs="?",
                default=_NOT_GIVEN,
                metavar=field.name.upper(),
                help=field.metadata[HELP],
            )
            continue
        default = field.default
        shown = "" if default in (None, "") else f"; default: {default}"
        help_text = f"{field.metadata[HELP]} [env: {_env_of(field, env_prefix)}{shown}]"
        names = [flag_name(field.name)]
        if SHORT in field.metadata:
            names.insert(0, field.metadata[SHORT])
        if convert is _parse_bool:
            group.add_argument(
                *names,
                dest=field.name,
                action=argparse.BooleanOptionalAction,
                default=_NOT_GIVEN,
                help=help_text,
            )
            continue
        choices = field.metadata.get(CHOICES)
        base, _ = _unwrap_optional(hint)
        if isinstance(base, type) and issubclass(base, enum.Enum):
            choices = [str(member.value) for member in base]
        group.add_argument(
            *names,
            dest=field.name,
            default=_NOT_GIVEN,
            metavar="{" + ",".join(choices) + "}" if choices else field.name.upper(),
            help=help_text,
        )


def settings_from_arguments(
    settings_class: type[S],
    namespace: argparse.Namespace,
    environ: Mapping[str, str],
    *,
    env_prefix: str = "",
) -> S:
    """Build ``settings_class`` from parsed flags, falling back to env variables and defaults.

    Raises :class:`SettingsError` naming the flag or environment variable at fault and the
    values it allows.
    """
    values: dict[str, object] = {}
    for field, hint in _fields(settings_class):
        convert = _converter(field, hint)
        given = getattr(namespace, field.name, _NOT_GIVEN)
        if isinstance(given, bool):
            values[field.name] = given
            continue
        if isinstance(given, str):
            source = field.name.upper() if field.metadata.get(POSITIONAL) else flag_name(field.name)
            raw = given
        elif field.metadata.get(POSITIONAL):
            continue  # an argument, never an environment variable
        else:
            source = _env_of(field, env_prefix)
            raw = environ.get(source, "")
            if raw == "":
                # An empty variable is how a chart leaves a setting unset.
                continue
        try:
            values[field.name] = convert(raw)
        except ValueError as exc:
            raise SettingsError(f"{source}: {exc}") from None
    try:
        return settings_class(**values)
    except InvalidSettingError as exc:
        source = f"{flag_name(exc.field_name)} / {env_name(exc.field_name, env_prefix)}"
        raise SettingsError(f"{source}: {exc.problem}") from None
