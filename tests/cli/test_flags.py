"""Settings flags: each field is a flag and an env variable, with one precedence and error style."""

from __future__ import annotations

import argparse
import dataclasses
import enum
from pathlib import Path

import pytest

from dra_driver.cli.flags import (
    SettingsError,
    add_settings_arguments,
    env_name,
    flag_name,
    settings_from_arguments,
)
from dra_driver.settings import flag, kubeconfig_flag


class Colour(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass(frozen=True)
class Example:
    """Example settings."""

    node_name: str = flag("", "node")
    port: int = flag(8080, "port")
    ratio: float = flag(0.5, "ratio")
    root: Path = flag(Path("/"), "root")
    inventory: Path | None = flag(None, "inventory")
    colour: Colour = flag(Colour.RED, "colour")
    mode: str = flag("nvml", "mode", choices=("nvml", "fake"))
    elect: bool = flag(True, "elect")
    output: str = flag("text", "output", choices=("text", "json"), short="-o")


def resolve(argv: list[str], environ: dict[str, str] | None = None) -> Example:
    parser = argparse.ArgumentParser()
    add_settings_arguments(parser, Example)
    return settings_from_arguments(Example, parser.parse_args(argv), environ or {})


def test_names_are_kebab_flags_and_upper_snake_env() -> None:
    """node_name is --node-name on the command line and NODE_NAME in the environment."""
    assert (flag_name("node_name"), env_name("node_name")) == ("--node-name", "NODE_NAME")


def test_defaults_apply_when_nothing_is_given() -> None:
    """With no flag and no env variable every field keeps its declared default."""
    assert resolve([]) == Example()


def test_env_variable_overrides_default() -> None:
    """An env variable of the field's name sets it, converted to the field's type."""
    settings = resolve(
        [],
        {
            "NODE_NAME": "gpu-7",
            "PORT": "9090",
            "RATIO": "0.25",
            "ROOT": "/driver-root",
            "INVENTORY": "/etc/cards.yaml",
            "COLOUR": "blue",
            "MODE": "fake",
            "ELECT": "false",
        },
    )
    assert settings == Example(
        node_name="gpu-7",
        port=9090,
        ratio=0.25,
        root=Path("/driver-root"),
        inventory=Path("/etc/cards.yaml"),
        colour=Colour.BLUE,
        mode="fake",
        elect=False,
    )


def test_flag_wins_over_env_variable() -> None:
    """A flag on the command line beats the env variable of the same setting."""
    settings = resolve(
        ["--node-name", "from-flag", "--no-elect", "-o", "json"],
        {"NODE_NAME": "from-env", "ELECT": "true", "OUTPUT": "text"},
    )
    assert (settings.node_name, settings.elect, settings.output) == ("from-flag", False, "json")


def test_empty_env_variable_means_unset() -> None:
    """An empty variable (a chart's way to leave a value unset) keeps the default."""
    assert resolve([], {"PORT": "", "MODE": ""}) == Example()


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        ([], {"PORT": "eighty"}, "PORT: invalid int value 'eighty'"),
        (["--port", "x"], {}, "--port: invalid int value 'x'"),
        ([], {"MODE": "real"}, "MODE: invalid value 'real'; allowed values: nvml, fake"),
        ([], {"COLOUR": "Red"}, "COLOUR: invalid value 'Red'; allowed values: red, blue"),
        (["--colour", "green"], {}, "--colour: invalid value 'green'; allowed values: red, blue"),
        (
            [],
            {"ELECT": "maybe"},
            "ELECT: invalid boolean 'maybe'; allowed values: 0, 1, false, no, off, on, true, yes",
        ),
    ],
    ids=["env-int", "flag-int", "env-choice", "env-enum-case", "flag-enum", "env-bool"],
)
def test_bad_values_name_the_source_and_allowed_values(
    argv: list[str], environ: dict[str, str], message: str
) -> None:
    """A bad value is refused with the flag or env variable at fault and what it allows."""
    with pytest.raises(SettingsError) as caught:
        resolve(argv, environ)
    assert str(caught.value) == message


def test_help_names_the_env_variable_and_default() -> None:
    """--help shows each flag's env variable and default, so operators find both."""
    parser = argparse.ArgumentParser()
    add_settings_arguments(parser, Example)
    text = " ".join(parser.format_help().split())
    assert "[env: NODE_NAME]" in text
    assert "[env: PORT; default: 8080]" in text
    assert "{nvml,fake}" in text


def test_unsupported_field_type_is_a_programming_error() -> None:
    """A settings field of a type the CLI cannot parse fails loudly at parser build time."""

    @dataclasses.dataclass(frozen=True)
    class Bad:
        """Bad."""

        ports: list[int] = dataclasses.field(default_factory=list, metadata={"help": "x"})

    with pytest.raises(TypeError, match="setting ports: unsupported type"):
        add_settings_arguments(argparse.ArgumentParser(), Bad)


def test_kubeconfig_flag_reads_kubeconfig_unprefixed() -> None:
    """A kubeconfig_flag field is unset by default and reads KUBECONFIG, not a prefixed name."""

    @dataclasses.dataclass(frozen=True)
    class Access:
        """Access."""

        kubeconfig: str | None = kubeconfig_flag("kubeconfig")

    parser = argparse.ArgumentParser()
    add_settings_arguments(parser, Access, env_prefix="GPUSHARE_")

    def read(environ: dict[str, str]) -> str | None:
        arguments = parser.parse_args([])
        return settings_from_arguments(
            Access, arguments, environ, env_prefix="GPUSHARE_"
        ).kubeconfig

    assert read({}) is None
    assert read({"GPUSHARE_KUBECONFIG": "/prefixed"}) is None
    assert read({"KUBECONFIG": "/etc/kube.conf"}) == "/etc/kube.conf"
