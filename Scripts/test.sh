#!/bin/sh
# The whole test suite: installs what it needs, builds, runs every test target, then the
# checks that need a live gateway or outside tools (admin API against its OpenAPI document,
# the dashboard in headless Chromium, the deployment files), and finally replays the
# fuzzers' saved inputs and gives each fuzz target a short run.
set -eu
cd "$(dirname "$0")/.."
sh Scripts/install-deps.sh
swift build --build-tests
swift test --skip-build
bash Scripts/admin-api-check.sh
bash Scripts/dashboard-check.sh
bash Scripts/deploy-check.sh .build/debug/gatehouse
if [ -x Fuzz/run.sh ]; then
  Fuzz/run.sh "${GATEHOUSE_FUZZ_SECONDS:-30}"
fi
