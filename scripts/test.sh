#!/usr/bin/env bash
# Sets up (scripts/setup.sh, with node and npm), installs the npm reference packages the tests
# compare against (tests/js, from package-lock.json), builds and runs the whole CTest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
FT_WITH_NODE=1 scripts/setup.sh --deps-only
if [ ! -d tests/js/node_modules ] || [ tests/js/package-lock.json -nt tests/js/node_modules ]; then
  (cd tests/js && npm ci --no-audit --no-fund --loglevel=error)
  touch tests/js/node_modules
fi
scripts/setup.sh all
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 600
