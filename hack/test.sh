#!/usr/bin/env bash
# The project's test command: a virtualenv with the package and its dev dependencies, lint, the import contract,
# the real Kubernetes components (built once, cached by version), then every test. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${SUPERPOD_VENV:-.venv}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q --disable-pip-version-check -e '.[dev]'
echo "== lint (ruff)"
"$venv/bin/ruff" check operator tests bench hack
echo "== import contract (import-linter)"
"$venv/bin/lint-imports"
echo "== generated files are current"
for gen in hack/gen-*.py; do
  [ -e "$gen" ] || continue
  "$venv/bin/python" "$gen" --check
done
echo "== Kubernetes components (hack/build.sh)"
bash hack/build.sh >/dev/null
echo "== tests"
exec "$venv/bin/pytest" "$@"
