#!/bin/sh
# Rewrites Config/REFERENCE.md from the key table in
# Sources/GatehouseConfig/ConfigKeys.swift. ConfigKeysTests fails when the two differ:
# edit the table (a new key must be listed there anyway, or the same tests fail), then run this.
set -eu
cd "$(dirname "$0")/.."
GATEHOUSE_WRITE_REFERENCE=1 swift test --filter ConfigKeysTests.theReferenceFileIsWhatTheTableRenders
