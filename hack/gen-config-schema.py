"""Write the committed JSON Schema of GpuShareConfig, or with --check verify that it is current.

Usage: .venv/bin/python hack/gen-config-schema.py [--check] [--output PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dra_driver.api import DEFAULT_DRIVER_NAME, DriverNames, render_config_json_schema

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = REPO_ROOT / "api" / "v1alpha1" / "gpushareconfig.schema.json"


def main(argv: list[str] | None = None) -> int:
    """Write or check the schema file; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the file is missing or stale"
    )
    parser.add_argument("--output", type=Path, default=SCHEMA_PATH, help="the schema file")
    args = parser.parse_args(argv)
    output: Path = args.output
    expected = render_config_json_schema(DriverNames.for_driver(DEFAULT_DRIVER_NAME))
    if args.check:
        current = output.read_text(encoding="utf-8") if output.exists() else None
        if current != expected:
            state = "missing" if current is None else "stale"
            print(
                f"{output} is {state}: run `.venv/bin/python hack/gen-config-schema.py` "
                "and commit the result",
                file=sys.stderr,
            )
            return 1
        return 0
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(expected, encoding="utf-8")
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
