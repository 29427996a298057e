#!/usr/bin/env bash
# Installs the project with its test and lint tools into .venv, then runs every quality gate:
# ruff lint, ruff format, mypy --strict, and the pytest suite (import contracts, protos,
# schema freshness, the Helm chart included). Extra arguments are passed to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

python=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$python" -m venv .venv
fi
pip=(.venv/bin/python -m pip --quiet --disable-pip-version-check)
# Dependency groups (PEP 735, [dependency-groups] in pyproject.toml) need pip >= 25.1.
"${pip[@]}" install --upgrade "pip>=25.1"
# The simulator and test harness are their own distribution (simulator/): installed beside it.
"${pip[@]}" install --editable . --editable ./simulator --group dev

echo "==> ruff check"
.venv/bin/ruff check .
echo "==> ruff format --check"
.venv/bin/ruff format --check .
echo "==> mypy --strict dra_driver, the simulator and the hack/ scripts"
.venv/bin/mypy --strict dra_driver simulator/gpushare_simulator
.venv/bin/mypy --strict hack/bench/*.py hack/faults.py hack/fuzz.py hack/load.py
echo "==> helm and kubectl for the chart tests (.tools/bin)"
./hack/install-tools.sh
echo "==> pytest"
exec .venv/bin/pytest "$@"
