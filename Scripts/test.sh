#!/bin/sh
# The whole test suite: installs what it needs, builds, runs every test target, then the
# checks that need a live gateway or outside tools (admin API against its OpenAPI document,
# the dashboard in headless Chromium, the deployment files), and finally replays the
# fuzzers' saved inputs and gives each fuzz target a short run.
set -eu
cd "$(dirname "$0")/.."
sh Scripts/install-deps.sh
swift build --build-tests
# Two tests count the test process's own file descriptors, which tests running beside them
# would disturb: they run first, one at a time; everything else runs in parallel after them.
swift test --skip-build --filter "LoopTests/everyDescriptorIsClosedAfterwards"
swift test --skip-build --filter "TLSTests/everyDescriptorIsClosedAfterwards"
swift test --skip-build --skip "everyDescriptorIsClosedAfterwards"
# An upstream fleet's hot path allocates nothing: counted by the allocation shim preloaded
# into the test process, with that suite alone (the shim counts every thread).
GATEHOUSE_ALLOCATION_COUNTER="$(mktemp)" LD_PRELOAD="$PWD/.build/debug/libGatehouseAllocationCounter.so" \
  swift test --skip-build --filter FleetAllocationTests
# A fixed seed keeps CI repeatable; run the script without it to explore new inputs.
ADMIN_CHECK_SEED="${ADMIN_CHECK_SEED:-1}" bash Scripts/admin-api-check.sh
bash Scripts/dashboard-check.sh
bash Scripts/deploy-check.sh .build/debug/gatehouse
if [ -x Fuzz/run.sh ]; then
  Fuzz/run.sh "${GATEHOUSE_FUZZ_SECONDS:-30}"
fi
