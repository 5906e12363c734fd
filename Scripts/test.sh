#!/bin/sh
# The whole test suite: installs what it needs, builds, runs every test target, then replays
# the fuzzers' saved inputs and gives each fuzz target a short run.
set -eu
cd "$(dirname "$0")/.."
sh Scripts/install-deps.sh
swift build --build-tests
swift test --skip-build
if [ -x Fuzz/run.sh ]; then
  Fuzz/run.sh "${GATEHOUSE_FUZZ_SECONDS:-30}"
fi
