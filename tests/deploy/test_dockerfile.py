"""The Dockerfile has the properties the chart and hack/build-image.sh rely on.

These read the file; building and running the image is hack/build-image.sh --check (in CI).
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field

import yaml
from deploy.chartkit import CHART, ROOT

DOCKERFILE = ROOT / "Dockerfile"
BUILD_IMAGE = ROOT / "hack" / "build-image.sh"


@dataclass
class Stage:
    """One FROM ... stage: its base image, name and instructions (keyword, argument)."""

    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [arg for kw, arg in self.instructions if kw == keyword]


@dataclass
class Dockerfile:
    """The ARGs declared before the first FROM (name -> default or None), then the stages."""

    global_args: dict[str, str | None]
    stages: list[Stage]


def parse_dockerfile(text: str) -> Dockerfile:
    """Split into stages of (KEYWORD, argument), joining continuation lines, dropping comments."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continuation line"
    global_args: dict[str, str | None] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, argument = line.partition(" ")
        keyword, argument = keyword.upper(), argument.strip()
        if keyword == "FROM":
            match = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", argument, re.IGNORECASE)
            assert match, f"unparsable FROM {argument!r}"
            stages.append(Stage(match.group(1), match.group(2)))
        elif not stages:
            assert keyword == "ARG", f"{keyword} before the first FROM"
            name, eq, default = argument.partition("=")
            global_args[name] = default if eq else None
        else:
            stages[-1].instructions.append((keyword, argument))
    return Dockerfile(global_args, stages)


def dockerfile() -> Dockerfile:
    return parse_dockerfile(DOCKERFILE.read_text())


def build_and_runtime() -> tuple[Stage, Stage]:
    stages = dockerfile().stages
    return stages[0], stages[-1]


def script_suite() -> str:
    match = re.search(r"^readonly SUITE=(\w+)$", BUILD_IMAGE.read_text(), re.MULTILINE)
    assert match, "hack/build-image.sh declares no SUITE"
    return match.group(1)


def test_both_stages_build_on_one_base_argument_defaulting_to_pinned_python() -> None:
    """Every stage is FROM ${BASE_IMAGE}; its default is python:3.11-slim-<the script's suite>."""
    parsed = dockerfile()
    assert len(parsed.stages) >= 2
    assert parsed.stages[0].name is not None
    # One base for all stages: the venv's python3 is a symlink into the base it was made on.
    assert {stage.base for stage in parsed.stages} == {"${BASE_IMAGE}"}
    default = parsed.global_args["BASE_IMAGE"]
    assert default is not None
    image, _, tag = default.partition(":")
    assert image == "python"
    # The same Debian release as the mmdebstrap base hack/build-image.sh makes.
    assert tag == f"3.11-slim-{script_suite()}"


def test_build_stage_installs_the_context_wheel_not_the_source_tree() -> None:
    """The build stage copies only *.whl from the context and pip-installs it into /opt/venv."""
    build, _ = build_and_runtime()
    assert build.args("COPY") == ["*.whl /dist/"]
    runs = " ".join(build.args("RUN"))
    assert "python3 -m venv /opt/venv" in runs
    assert '/opt/venv/bin/python -m pip install "$1"' in runs
    # Exactly one wheel, or the build says what it found.
    assert 'if [ "$#" -ne 1 ]' in runs
    assert "/opt/venv/bin/gpushare-dra version" in runs


def test_every_python_call_works_on_debian_and_python_images() -> None:
    """RUN steps call python3 or the venv's python: Debian's bookworm has no bare `python`."""
    for stage in dockerfile().stages:
        for run in stage.args("RUN"):
            bare = re.findall(r"(?<![\w/.-])python(?=\s)", run)
            assert not bare, f"bare `python` in RUN {run!r}"


def test_runtime_ships_only_the_venv_without_pip_or_setuptools() -> None:
    """The runtime copies just /opt/venv from the build, which first drops pip and setuptools."""
    build, runtime = build_and_runtime()
    assert "-m pip uninstall --yes pip setuptools" in " ".join(build.args("RUN"))
    assert runtime.args("COPY") == [f"--from={build.name} /opt/venv /opt/venv"]
    assert any("PATH=/opt/venv/bin:$PATH" in env for env in runtime.args("ENV"))
    assert not any("--mount" in run for run in runtime.args("RUN"))


def test_ca_bundle_secret_is_optional_and_matches_the_script() -> None:
    """The build's CA-bundle secret is required=false (plain docker builds) and the script's id."""
    build, _ = build_and_runtime()
    (pip_run,) = [run for run in build.args("RUN") if "pip install" in run]
    mount = re.match(r"--mount=(\S+)", pip_run)
    assert mount, "the pip install RUN mounts no secret"
    options = dict(option.split("=", 1) for option in mount.group(1).split(","))
    assert options == {"type": "secret", "id": "ca_bundle", "required": "false"}
    assert "PIP_CERT=/run/secrets/ca_bundle" in pip_run
    assert '--secret "id=ca_bundle,src=$ca_bundle"' in BUILD_IMAGE.read_text()


def test_runtime_user_is_the_non_root_user_the_chart_expects() -> None:
    """USER is a numeric non-root uid, and the controller's pod runs as exactly that uid."""
    _, runtime = build_and_runtime()
    (user,) = runtime.args("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit()
    assert int(uid) != 0
    assert gid.isdigit()
    assert int(gid) != 0
    # The controller's pods run with controller.podSecurityContext by default.
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    context = values["controller"]["podSecurityContext"]
    assert (context["runAsUser"], context["runAsGroup"]) == (int(uid), int(gid))
    template = (CHART / "templates" / "controller-deployment.yaml").read_text()
    assert "with $c.podSecurityContext" in template
    assert any(f"--uid {uid}" in run for run in runtime.args("RUN"))
    # hack/build-image.sh --check asserts the built image runs as this uid.
    assert f"readonly RUNTIME_UID={uid}" in BUILD_IMAGE.read_text()


def test_entrypoint_is_the_gpushare_dra_console_script() -> None:
    """ENTRYPOINT (exec form) is gpushare-dra, the project's console script; args pick the rest."""
    _, runtime = build_and_runtime()
    (entrypoint,) = runtime.args("ENTRYPOINT")
    assert json.loads(entrypoint) == ["gpushare-dra"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "gpushare-dra" in scripts
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["repository"]


def test_runtime_has_oci_labels() -> None:
    """The runtime stage labels the image's title, description and licence (OCI keys)."""
    _, runtime = build_and_runtime()
    labels = " ".join(runtime.args("LABEL"))
    for key in ("title", "description", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert f'org.opencontainers.image.licenses="{project["license"]}"' in labels


def test_header_shows_both_ways_to_build() -> None:
    """The header comment builds with hack/build-image.sh and with docker on a wheel directory."""
    header = DOCKERFILE.read_text().split("\nARG ", 1)[0]
    assert "./hack/build-image.sh --check" in header
    assert "pip wheel --no-deps --wheel-dir dist/ ." in header
    assert re.search(r"docker build -f Dockerfile .* dist/$", header, re.MULTILINE)


def test_parser_joins_continuations_and_skips_comments() -> None:
    """The little parser the tests above rely on reads global ARGs, continuations and stages."""
    parsed = parse_dockerfile(
        "# comment\nARG B=a:1\nARG C\nFROM ${B} AS b\nRUN x \\\n    # inner comment\n"
        "    && y\nFROM c:2\nUSER 5\n"
    )
    assert parsed.global_args == {"B": "a:1", "C": None}
    assert [(s.base, s.name) for s in parsed.stages] == [("${B}", "b"), ("c:2", None)]
    assert parsed.stages[0].args("RUN") == ["x  && y"]
    assert parsed.stages[1].args("USER") == ["5"]
