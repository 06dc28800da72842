#!/usr/bin/env bash
# The project's test command: a virtualenv with the package and its dev dependencies, lint, the import contract,
# the real Kubernetes components (built once, cached by version), then every test. Exits non-zero on any failure.
# What only the later tests run (JobSet, Kubeflow, Helm, kind's node) is built in the background, at the lowest CPU
# priority, while the unit and the first integration tests run (they mostly wait on the control plane); the tests
# that need it come last (tests/conftest.py) and wait for that build (hack/build.sh takes one build at a time).
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
bash hack/build.sh --control-plane >/dev/null
log=$(mktemp -t superpod-build.XXXXXX)
export SUPERPOD_BUILDING=$log  # (tests/integration/conftest.py: the configurations it copies first are waited for)
nice -n 19 bash hack/build.sh --kind >"$log" 2>&1 &
builder=$!
trap 'kill "$builder" 2>/dev/null || true' EXIT
echo "   the rest in the background (log $log)"
echo "== tests"
status=0
"$venv/bin/pytest" "$@" || status=$?
if ! wait "$builder"; then
  echo "== the background build failed:"; tail -40 "$log"; status=1
fi
exit "$status"
