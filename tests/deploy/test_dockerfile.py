"""The Dockerfile has the properties the chart relies on (CI has no engine to build it)."""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field

import yaml
from deploy.chartkit import CHART, ROOT

DOCKERFILE = ROOT / "Dockerfile"


@dataclass
class Stage:
    """One FROM ... stage: its base image, name and instructions (keyword, argument)."""

    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [arg for kw, arg in self.instructions if kw == keyword]


def parse_dockerfile(text: str) -> list[Stage]:
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
    stages: list[Stage] = []
    for line in logical:
        keyword, _, argument = line.partition(" ")
        keyword, argument = keyword.upper(), argument.strip()
        if keyword == "FROM":
            match = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", argument, re.IGNORECASE)
            assert match, f"unparsable FROM {argument!r}"
            stages.append(Stage(match.group(1), match.group(2)))
        else:
            assert stages, f"{keyword} before the first FROM"
            stages[-1].instructions.append((keyword, argument))
    return stages


def stages() -> list[Stage]:
    return parse_dockerfile(DOCKERFILE.read_text())


def test_dockerfile_is_multi_stage_on_pinned_python_bases() -> None:
    """Builder and runtime stages, both on python:3.11-slim* pinned by tag (never latest)."""
    found = stages()
    assert len(found) >= 2
    for stage in found:
        image, _, tag = stage.base.partition(":")
        assert image == "python"
        assert re.fullmatch(r"3\.11-slim(-\w+)?", tag), stage.base
    assert found[0].name is not None


def test_dockerfile_builds_a_wheel_and_ships_only_the_venv() -> None:
    """The builder makes a wheel (hatchling) into a venv; the runtime copies just that venv."""
    build, runtime = stages()[0], stages()[-1]
    runs = " ".join(build.args("RUN"))
    assert "pip wheel" in runs
    assert "python -m venv /opt/venv" in runs
    copies = runtime.args("COPY")
    assert copies == [f"--from={build.name} /opt/venv /opt/venv"]
    assert any("PATH=/opt/venv/bin:$PATH" in env for env in runtime.args("ENV"))
    backend = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    assert backend["build-backend"] == "hatchling.build"


def test_runtime_user_is_the_non_root_user_the_chart_expects() -> None:
    """USER is a numeric non-root uid, and the controller's pod runs as exactly that uid."""
    runtime = stages()[-1]
    (user,) = runtime.args("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit()
    assert int(uid) != 0
    assert gid.isdigit()
    assert int(gid) != 0
    template = (CHART / "templates" / "controller-deployment.yaml").read_text()
    assert f"runAsUser: {uid}" in template
    assert f"runAsGroup: {gid}" in template
    assert any(f"--uid {uid}" in run for run in runtime.args("RUN"))


def test_entrypoint_is_the_gpushare_dra_console_script() -> None:
    """ENTRYPOINT (exec form) is gpushare-dra, the project's console script; args pick the rest."""
    runtime = stages()[-1]
    (entrypoint,) = runtime.args("ENTRYPOINT")
    assert json.loads(entrypoint) == ["gpushare-dra"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "gpushare-dra" in scripts
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["repository"]


def test_parser_joins_continuations_and_skips_comments() -> None:
    """The little parser the tests above rely on reads continuation lines and stages right."""
    parsed = parse_dockerfile(
        "# comment\nFROM a:1 AS b\nRUN x \\\n    # inner comment\n    && y\nFROM c:2\nUSER 5\n"
    )
    assert [(s.base, s.name) for s in parsed] == [("a:1", "b"), ("c:2", None)]
    assert parsed[0].args("RUN") == ["x  && y"]
    assert parsed[1].args("USER") == ["5"]
