#!/bin/sh
# Builds the libFuzzer targets (the HTTP codec, the JSON engine, the config loader, the HTTP/2
# server connection, the JWT verifier), replays the saved crash inputs, then fuzzes each target for a while. Exits non-zero if any saved input fails or fuzzing finds a crash.
#
#   Fuzz/run.sh [seconds per target]        (default 60; Scripts/test.sh passes 30)
#
# Environment:
#   FUZZ_TARGETS   targets to build and run (default: "request response chunked conditions json config http2 jwt")
#   FUZZ_BUILD     build only, no replay and no fuzzing, when set to 1
#   GATEHOUSE_FUZZ_SKIP_KNOWN
#                  1 makes the targets step around the open bugs reproduced in
#                  Fuzz/crashes/<target>/pending/, to look for others (see FuzzInvariants)
#
# Needs only the Swift toolchain (its clang runtime has libFuzzer and AddressSanitizer), and for
# `http2` the C libraries the package itself links: libnghttp2 and OpenSSL (libnghttp2-dev, libssl-dev);
# `jwt` needs OpenSSL only.
# New corpus entries go to a temporary directory, so the repository corpus never grows on its
# own; crash inputs go to Fuzz/artifacts/<target>/ (ignored by git).
set -eu

seconds=${1:-60}
targets=${FUZZ_TARGETS:-request response chunked conditions json config http2 jwt}
cd "$(dirname "$0")/.."
fuzz=$(pwd)/Fuzz
build=$fuzz/build

case $seconds in
'' | *[!0-9]*)
  echo "usage: Fuzz/run.sh [seconds per target]" >&2
  exit 2
  ;;
esac

swiftc=$(command -v swiftc || true)
if [ -z "$swiftc" ]; then
  echo "run.sh: swiftc not found on PATH" >&2
  exit 1
fi
# -sanitize=fuzzer links libclang_rt.fuzzer from the toolchain's own clang resource directory;
# a distribution's libFuzzer would not match the toolchain's LLVM, so nothing is installed.
runtime_dir=$(dirname "$(readlink -f "$swiftc")")/../lib/clang
if ! ls "$runtime_dir"/*/lib/linux/libclang_rt.fuzzer-"$(uname -m)".a >/dev/null 2>&1; then
  echo "run.sh: this Swift toolchain has no libFuzzer runtime under $runtime_dir" >&2
  exit 1
fi

# Fatal errors should reach libFuzzer's crash handler at once, without the Swift runtime's
# backtracer starting a helper process first.
SWIFT_BACKTRACE=enable=no
export SWIFT_BACKTRACE

# --- Build: each module a target needs once, as one instrumented object, then one executable
# per target. A module is every Swift file under Sources/<module>/, and the modules it imports
# are found from its `import` lines and built before it, so a new file or a new dependency of
# a module needs no change here.
mkdir -p "$build/module"
built=""
# imports_of MODULE: the package modules MODULE's sources import.
imports_of() {
  find "Sources/$1" -name '*.swift' -exec sed -n 's/^import \(C\{0,1\}Gatehouse[A-Za-z0-9]*\)$/\1/p' {} + | sort -u
}
# in_build_order MODULE...: the modules and everything they import, each after its imports
# (a module may appear more than once; the first time counts).
in_build_order() {
  for module in "$@"; do
    # A subshell per level, so the recursion does not overwrite the caller's loop variable.
    (in_build_order $(imports_of "$module"))
    echo "$module"
  done
}
# C modules: only `config`, `http2` and `jwt` may use them (`c_allowed`). What each adds to the compile and link
# lines accumulates in these, for the modules built after it and for the executable.
c_flags=""
c_objects=""
c_links=""
c_allowed=""
# build_c_module NAME: a system-library module (a module map naming its headers and libraries)
# is used as it is; a C target's sources are compiled with AddressSanitizer but without
# coverage (they only wrap system calls), and it gets the module map SwiftPM would make for it.
build_c_module() {
  name=$1
  if [ -f "Sources/$name/module.modulemap" ]; then
    c_flags="$c_flags -I Sources/$name"
    for library in $(sed -n 's/^ *link "\(.*\)"$/\1/p' "Sources/$name/module.modulemap"); do
      c_links="$c_links -l$library"
    done
  else
    echo "==> building $name (C, address sanitizer)"
    mkdir -p "$build/c/$name"
    for header in "Sources/$name"/include/*.h; do
      printf 'module %s {\n  header "%s"\n  export *\n}\n' "$name" "$(pwd)/$header" >"$build/c/$name/module.modulemap"
    done
    for source in "Sources/$name"/*.c; do
      object=$build/c/$name/$(basename "$source" .c).o
      clang -O1 -g -fsanitize=address -I "Sources/$name/include" -c "$source" -o "$object"
      c_objects="$c_objects $object"
    done
    c_flags="$c_flags -I $build/c/$name"
  fi
}
# build_module NAME: compiles Sources/NAME/ as module NAME into $build/NAME.o.
build_module() {
  name=$1
  case " $built " in *" $name "*) return ;; esac
  case $name in
  C*)
    # The C library modules need their system headers and libraries linked; the fuzzed
    # modules are meant to be pure Swift over bytes, except for the targets that allow it.
    case " $c_allowed " in
    *" $name "*)
      build_c_module "$name"
      built="$built $name"
      return
      ;;
    esac
    echo "run.sh: a fuzzed module imports the C module $name, which the fuzz build does not compile" >&2
    exit 1
    ;;
  esac
  echo "==> building $name (fuzzer + address sanitizer)"
  # shellcheck disable=SC2046,SC2086 # file names under Sources/ have no spaces; one word per flag
  swiftc -parse-as-library -O -wmo -sanitize=fuzzer,address -package-name gatehouse -module-name "$name" \
    -I "$build/module" $c_flags -emit-module -emit-module-path "$build/module/$name.swiftmodule" \
    -c -o "$build/$name.o" $(find "Sources/$name" -name '*.swift' | sort)
  built="$built $name"
}
for target in $targets; do
  # Each target's checks (a file in Fuzz/Support/) and the modules they test.
  case $target in
  request | response | chunked | conditions)
    checks=FuzzInvariants.swift
    modules=GatehouseHTTP
    ;;
  json)
    checks=JSONFuzzInvariants.swift
    modules=GatehouseJSON
    ;;
  config)
    # A provider's inline JWKS (`jwt.providers.*.keys`) is checked by GatehouseJWT, whose
    # keys are OpenSSL's: the one C module this target links.
    checks=ConfigFuzzInvariants.swift
    modules="GatehouseConfig GatehouseJSON"
    c_allowed="CGatehouseOpenSSL"
    ;;
  http2)
    # The server connection is libnghttp2 driven over a real socket on an EventLoop, so this
    # target, and only this one, links the C modules those import.
    checks=HTTP2FuzzHarness.swift
    modules="GatehouseHTTPServer GatehouseNet GatehouseHTTP"
    c_allowed="CGatehouseLinux CGatehouseOpenSSL CGatehouseNghttp2"
    ;;
  jwt)
    # Signatures are checked by OpenSSL, so this target links it (and no other C module).
    checks=JWTFuzzInvariants.swift
    modules=GatehouseJWT
    c_allowed="CGatehouseOpenSSL"
    ;;
  *)
    echo "run.sh: unknown target $target" >&2
    exit 2
    ;;
  esac
  objects=""
  for module in $(in_build_order $modules | awk '!seen[$0]++'); do
    build_module "$module"
    case $module in C*) ;; *) objects="$objects $build/$module.o" ;; esac
  done
  # The C modules' objects and libraries, for the target that uses them.
  links=""
  [ -z "$c_allowed" ] || links="$c_objects $c_links"
  echo "==> building fuzz-$target"
  # shellcheck disable=SC2086 # one word per object
  swiftc -parse-as-library -O -wmo -sanitize=fuzzer,address -use-ld=lld -package-name gatehouse \
    -module-name "Fuzz_$target" -I "$build/module" $c_flags "$fuzz/Support/$checks" "$fuzz/Targets/$target.swift" \
    $objects $links -o "$build/fuzz-$target"
  c_allowed=""
done
[ "${FUZZ_BUILD:-0}" = 1 ] && exit 0

work=$(mktemp -d "${TMPDIR:-/tmp}/gatehouse-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
failed=0

# --- Replay: every saved crash input is a regression test and must pass. --------------------
for target in $targets; do
  count=0
  for input in "$fuzz/crashes/$target"/*; do
    [ -f "$input" ] || continue
    case ${input##*/} in README* | .*) continue ;; esac
    count=$((count + 1))
    if ! "$build/fuzz-$target" "$input" >"$work/replay.log" 2>&1; then
      echo "FAIL: $target: saved input Fuzz/${input#"$fuzz/"} fails again:"
      grep -E "Fatal error|ERROR:|SUMMARY" "$work/replay.log" || tail -n 20 "$work/replay.log"
      failed=1
    fi
  done
  pending=$(find "$fuzz/crashes/$target/pending" -type f ! -name 'README*' 2>/dev/null | wc -l | tr -d ' ')
  echo "==> replayed $count saved input(s) for $target"
  if [ "$pending" -gt 0 ]; then
    echo "    note: $pending open-bug reproducer(s) in Fuzz/crashes/$target/pending/ were not replayed"
  fi
done

# --- Fuzz each target in turn. ---------------------------------------------------------------
[ "$seconds" -gt 0 ] || exit "$failed"
for target in $targets; do
  mkdir -p "$work/corpus-$target" "$fuzz/artifacts/$target"
  log=$work/$target.log
  # A target's own dictionary if it has one; the three HTTP targets share http.dict.
  dict=$fuzz/$target.dict
  [ -f "$dict" ] || dict=$fuzz/http.dict
  echo "==> fuzzing $target for ${seconds}s"
  # The first corpus directory receives new entries; the repository corpus is only read.
  if "$build/fuzz-$target" -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
    -dict="$dict" -artifact_prefix="$fuzz/artifacts/$target/" -print_final_stats=1 \
    "$work/corpus-$target" "$fuzz/corpus/$target" >"$log" 2>&1; then
    # The last status line has the run count, coverage, features and speed.
    grep -E '^#[0-9]+' "$log" | tail -n 1 | sed 's/^/    /'
    grep -E 'stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added' "$log" |
      sed 's/^/    /'
  else
    failed=1
    echo "FAIL: fuzzing $target found a problem:"
    grep -E 'Fatal error|ERROR: libFuzzer|SUMMARY: AddressSanitizer' "$log" | head -n 5 | sed 's/^/    /'
    grep -E -m 1 -A 8 'ERROR: AddressSanitizer' "$log" | sed 's/^/    /' || true
    for artifact in $(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log"); do
      echo "    crashing input: Fuzz/${artifact#"$fuzz/"}"
      echo "    reproduce with: Fuzz/build/fuzz-$target Fuzz/${artifact#"$fuzz/"}"
    done
  fi
done
exit "$failed"
