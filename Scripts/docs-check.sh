#!/bin/sh
# Fails when a file of the repository points to the old contract document, which is not in
# the repository: a reader with only the repository could not follow such a pointer. Rules
# belong in Docs/, Config/README.md or Config/REFERENCE.md (generated from the key table),
# or stated where they are used.
#
# usage: Scripts/docs-check.sh        (prints every offending line; exits 1 if there is one)
set -eu
cd "$(dirname "$0")/.."
# The word as a whole (AF_UNSPEC and the like are other words), assembled so that this file
# does not match itself.
word="SP""EC"
places="Package.swift README.md Sources Tests Docs Config Deploy Scripts Bench Fuzz"
# shellcheck disable=SC2086 # $places is a list of paths
if found="$(grep -rnw --binary-files=without-match --exclude-dir=.build --exclude-dir=__pycache__ \
  "$word" $places)"; then
  echo "$found"
  echo "docs-check: $(echo "$found" | wc -l) line(s) point to \"$word\", a document that is not in the repository:" \
    "link the doc in Docs/ or Config/ that holds the rule, or state it" >&2
  exit 1
fi
echo "docs-check: no pointer to a document outside the repository"
