"""The config API package as a whole: public names, stdlib-only imports, one default name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dra_driver.api
from dra_driver.api import DEFAULT_DRIVER_NAME

API_DIR = Path(dra_driver.api.__file__).parent


def test_all_public_names_resolve():
    """Every name in __all__ exists, and none is listed twice."""
    for name in dra_driver.api.__all__:
        assert hasattr(dra_driver.api, name), name
    assert len(set(dra_driver.api.__all__)) == len(dra_driver.api.__all__)


def test_importing_the_package_loads_only_the_standard_library():
    """Importing dra_driver.api pulls in nothing but the stdlib and the package itself."""
    code = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        "import dra_driver.api\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    loaded = json.loads(result.stdout)
    foreign = [
        module
        for module in loaded
        if module.split(".")[0] not in sys.stdlib_module_names
        and module != "dra_driver"
        and not module.startswith("dra_driver.api")
    ]
    assert foreign == []


def test_default_driver_name_is_spelled_out_once():
    """The default driver name appears as a literal only in driver.py's one constant."""
    hits = {
        path.name: path.read_text(encoding="utf-8").count(DEFAULT_DRIVER_NAME)
        for path in sorted(API_DIR.glob("*.py"))
    }
    assert {name: count for name, count in hits.items() if count} == {"driver.py": 1}
