"""The repository stands on its own: no file points at notes or paths outside it.

The design notes and reference pages the project was first built against are not part of the
repository, so a pointer to them is a dead end for every reader. What they said that matters
is written in docs/; these tests keep pointers to them from coming back, and keep the links
between the repository's own documents working.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Built from pieces, so that this file does not match itself.
_OUTSIDE_NAMES = ("DESIGN", "dra-api", "prior-art", "tooling")
FORBIDDEN = re.compile(
    "|".join(
        [
            *(re.escape(f"{name}.md") for name in _OUTSIDE_NAMES),
            # ../shared/k8s is where CI and developers keep the real Kubernetes binaries the
            # tests run on (GPUSHARE_KUBE_BINARIES names another): a path, not a document.
            re.escape("../" + "shared") + r"(?!/k8s\b)",
            re.escape("shared/" + "reference"),
            re.escape("shared/" + "hami-core"),
            re.escape("/work/" + "shared"),
        ]
    ),
    re.IGNORECASE,
)
_SKIPPED_DIRS = {".git", ".venv", ".tools", "__pycache__", "node_modules"}
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


@cache
def tracked_files() -> tuple[Path, ...]:
    """Return the files git tracks, or every file of the tree when there is no git checkout."""
    git = shutil.which("git")
    try:
        if git is None or not (ROOT / ".git").exists():
            raise FileNotFoundError("git")
        listed = subprocess.run(
            [git, "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return tuple(
            path
            for path in sorted(ROOT.rglob("*"))
            if path.is_file() and not _SKIPPED_DIRS & set(path.relative_to(ROOT).parts)
        )
    names = [name for name in listed.decode().split("\0") if name]
    return tuple(ROOT / name for name in names if (ROOT / name).is_file())


def text_of(path: Path) -> str | None:
    """Return the file's text, or None for a binary file (a NUL byte, or not UTF-8)."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def outside_references(path: Path) -> Iterator[str]:
    """Yield ``path:line: text`` for each line of a text file that points outside the repo."""
    text = text_of(path)
    if text is None:
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if FORBIDDEN.search(line):
            yield f"{path.relative_to(ROOT)}:{number}: {line.strip()}"


def test_the_check_sees_the_repository_and_recognises_each_outside_name() -> None:
    """The file list is the repository's, and every name the check forbids is caught."""
    files = {path.relative_to(ROOT).as_posix() for path in tracked_files()}
    assert {"README.md", "pyproject.toml", "dra_driver/__init__.py", "docs/scenarios.md"} <= files
    for example in (
        "see DESIGN" + ".md §2",
        "dra-api" + ".md section 7",
        "prior-art" + ".md",
        "reference/tooling" + ".md",
        "../" + "shared/notes.txt",
        "shared/" + "hami-core/README",
    ):
        assert FORBIDDEN.search(example), example
    assert not FORBIDDEN.search("docs/design-notes.md, a shared directory, tooling")
    assert not FORBIDDEN.search("the binaries in " + "../" + "shared/k8s/bin")


def test_no_tracked_file_refers_to_notes_or_paths_outside_the_repository() -> None:
    """No tracked text file mentions the outside design notes, reference pages or shared dir."""
    found = [hit for path in tracked_files() for hit in outside_references(path)]
    assert not found, "references to files outside the repository:\n" + "\n".join(found)


def markdown_files() -> list[Path]:
    return [path for path in tracked_files() if path.suffix == ".md"]


def slug(heading: str) -> str:
    """Return the anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)}


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_of_a_markdown_file_stay_inside_and_resolve(path: Path) -> None:
    """Each relative link of the file names a file of the repository, and its anchor exists."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    broken = []
    for target in _LINK.findall(text):
        if _EXTERNAL.match(target):
            continue
        name, _, anchor = target.partition("#")
        resolved = (path.parent / name).resolve() if name else path
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            broken.append(f"{target}: no such file in the repository")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{path.relative_to(ROOT)}: " + "; ".join(broken)
