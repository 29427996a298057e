"""The version is written in one place; the chart and the changelog follow it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from dra_driver import __version__

ROOT = Path(__file__).resolve().parent.parent
# The one place, and the two files that must spell it (helm reads no Python).
# docs/upgrade.md names releases in its table of checkpoint formats.
ALLOWED = {
    "dra_driver/__init__.py",
    "deploy/helm/gpushare-dra-driver/Chart.yaml",
    "CHANGELOG.md",
    "docs/upgrade.md",
}


def test_the_chart_carries_the_package_version() -> None:
    """Chart.yaml's version and appVersion are dra_driver.__version__ (hack/set-version.sh)."""
    chart = yaml.safe_load((ROOT / "deploy/helm/gpushare-dra-driver/Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (__version__, __version__)


def test_the_changelog_has_a_section_for_this_version() -> None:
    """CHANGELOG.md names the version being built, so a release says what changed."""
    headings = [
        line for line in (ROOT / "CHANGELOG.md").read_text().splitlines() if line.startswith("## ")
    ]
    assert headings[0].split()[1] == __version__


def test_no_other_file_spells_the_version() -> None:
    """Docs and code say <version> or read __version__, so a release edits one place."""
    git = shutil.which("git")
    assert git is not None
    tracked = (
        subprocess.run([git, "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    spelled = []
    for name in tracked:
        path = ROOT / name
        if not name or name in ALLOWED or not path.is_file() or path.is_symlink():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        # A CDI spec's cdiVersion is another scheme whose numbers may coincide with ours.
        lines = [line for line in text.splitlines() if "cdiVersion" not in line]
        if any(__version__ in line for line in lines):
            spelled.append(name)
    assert spelled == []


def test_set_version_refuses_what_is_not_a_version(tmp_path: Path) -> None:
    """hack/set-version.sh exits 2 for a non-semantic version and changes nothing."""
    done = subprocess.run(
        [str(ROOT / "hack" / "set-version.sh"), "v1"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "not a semantic version" in done.stderr
    assert f'__version__ = "{__version__}"' in (ROOT / "dra_driver/__init__.py").read_text()
