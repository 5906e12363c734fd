#!/bin/sh
# Checks that Deploy/Dockerfile installs every Debian package the gateway needs, from what
# the binary and Package.swift say rather than from a list kept by hand:
#
#   runtime    every shared library `ldd GATEHOUSE_BINARY` lists that is not the Swift
#              toolchain's (its install directory or the binary's RUNPATH) belongs to a
#              Debian package (`dpkg -S`) that the runtime stage's `apt-get install`
#              installs, or that the base image already has (Priority: required and what
#              apt itself depends on), or that one of those depends on
#   build      every `.systemLibrary` target in Package.swift has its -dev package in the
#              build stage's `apt-get install`: the target's `providers: [.apt([...])]`, else
#              the package (`dpkg -S`) that ships lib<name>.so for each `link "name"` of the
#              target's module.modulemap
#   libraries  the shared library each `link "name"` resolves to (lib<name>.so's target)
#              comes from a package the runtime stage installs, so a library the binary
#              does not load yet is in the image before it does
#
# usage: Scripts/deploy-libs-check.sh GATEHOUSE_BINARY
# Needs a Debian host of the image's release (dpkg, apt-cache, ldd, readelf, python3) with
# the build packages installed (Scripts/install-deps.sh). Prints one line per finding and
# exits 1 when anything is missing.
set -eu

if [ $# -ne 1 ]; then
  echo "usage: $0 GATEHOUSE_BINARY" >&2
  exit 2
fi
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="$1"
for tool in dpkg dpkg-query apt-cache ldd readelf python3; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "deploy-libs-check: $tool is missing (this check needs a Debian host)" >&2
    exit 2
  fi
done
if [ ! -x "$bin" ]; then
  echo "deploy-libs-check: no gatehouse binary at $bin" >&2
  exit 2
fi
toolchain="$(cd "$(dirname "$(readlink -f "$(command -v swift)")")/.." 2>/dev/null && pwd || echo /opt/swift)"

exec python3 - "$repo" "$bin" "$toolchain" <<'PY'
import os, re, subprocess, sys

repo, binary, toolchain = sys.argv[1], sys.argv[2], sys.argv[3]
os.chdir(repo)
problems, notes = [], []

def run(*args):
    return subprocess.run(args, capture_output=True, text=True)

# --- Deploy/Dockerfile: the packages each stage installs -----------------------------------
def dockerfile_stages(path):
    """[(stage name, [packages])] in order; a stage without `AS name` is named by its index."""
    stages, logical, pending = [], [], ""
    for line in open(path):
        line = line.rstrip("\n")
        if re.match(r"\s*#", line):
            continue  # comments, also between continued lines, as Docker reads them
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    for text in logical:
        words = text.split()
        if words and words[0].upper() == "FROM":
            name = words[3] if len(words) >= 4 and words[2].upper() == "AS" else str(len(stages))
            stages.append((name, words[1], []))
        elif words and words[0].upper() == "RUN" and stages:
            for command in re.split(r"&&|;|\|\|", text):
                found = re.search(r"\bapt-get\s+(?:-\S+\s+)*install\b(.*)", command)
                if found:
                    stages[-1][2].extend(w for w in found.group(1).split() if not w.startswith("-"))
    return stages

stages = dockerfile_stages("Deploy/Dockerfile")
if len(stages) < 2:
    sys.exit("deploy-libs-check: Deploy/Dockerfile: expected a build stage and a runtime stage")
build = next((s for s in stages if s[0] == "build"), None)
if build is None:
    sys.exit("deploy-libs-check: Deploy/Dockerfile: no stage named build (FROM ... AS build)")
runtime = stages[-1]
build_packages, runtime_packages = set(build[2]), set(runtime[2])

def closure(packages):
    """The packages and everything they (pre-)depend on, from apt's cache."""
    if not packages:
        return set()
    out = run("apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
              "--no-breaks", "--no-replaces", "--no-enhances", *sorted(packages)).stdout
    return {line.strip() for line in out.splitlines() if line and not line[0].isspace() and "<" not in line}

# What debian:*-slim has before the runtime stage installs anything: the Priority: required
# packages (a minbase bootstrap) and apt with its dependencies.
status = run("dpkg-query", "-W", "-f", "${Package} ${Priority}\n").stdout
base = {p for p, prio in (l.split() for l in status.splitlines() if len(l.split()) == 2) if prio == "required"}
in_image = closure(base | {"apt"}) | closure(runtime_packages)

def owner(path):
    """The Debian package that ships `path` (tried as listed, resolved, and /usr-merged)."""
    candidates = [path, os.path.realpath(path)]
    for c in list(candidates):
        if c.startswith("/lib"):
            candidates.append("/usr" + c)
        elif c.startswith("/usr/lib"):
            candidates.append(c[4:])
    for c in candidates:
        result = run("dpkg", "-S", c)
        for line in result.stdout.splitlines():
            if line.startswith("diversion "):
                continue
            package, _, shipped = line.partition(": ")
            if shipped.strip() == c:
                return package.split(":")[0].split(",")[0].strip()
    return None

# --- runtime: what ldd lists for the binary ---------------------------------------------
dynamic = run("readelf", "-d", binary).stdout
runpaths = []
for found in re.finditer(r"\((?:RUNPATH|RPATH)\).*\[(.*)\]", dynamic):
    for entry in found.group(1).split(":"):
        runpaths.append(os.path.realpath(entry.replace("$ORIGIN", os.path.dirname(os.path.abspath(binary)))))
skip_dirs = [os.path.realpath(toolchain)] + runpaths

ldd = run("ldd", binary)
if ldd.returncode != 0:
    problems.append(f"runtime: ldd {binary} failed: {ldd.stderr.strip() or ldd.stdout.strip()}")
checked = 0
for line in ldd.stdout.splitlines():
    line = line.strip()
    if "=>" in line:
        name, _, rest = line.partition("=>")
        path = rest.split("(")[0].strip()
        if path == "not found":
            problems.append(f"runtime: {name.strip()} is not found on this machine (ldd)")
            continue
    else:
        path = line.split()[0] if line else ""
    if not path.startswith("/"):
        continue  # linux-vdso.so.1: the kernel's
    real = os.path.realpath(path)
    if any(real == d or real.startswith(d + "/") for d in skip_dirs):
        continue
    checked += 1
    package = owner(path)
    if package is None:
        problems.append(f"runtime: {path} belongs to no Debian package (dpkg -S): ship it some other way")
    elif package not in in_image:
        problems.append(f"runtime: {path} comes from {package}, which the runtime stage "
                        f"(FROM {runtime[1]}) does not install: add {package} to its apt-get install")
notes.append(f"runtime: {checked} non-toolchain libraries of {binary}")

# --- build and libraries: Package.swift's systemLibrary targets ----------------------------
manifest = open("Package.swift").read()
targets = []
for start in (m.end() for m in re.finditer(r"\.systemLibrary\(", manifest)):
    depth, i = 1, start
    while depth and i < len(manifest):
        depth += {"(": 1, ")": -1}.get(manifest[i], 0)
        i += 1
    call = manifest[start:i - 1]
    name = re.search(r'name:\s*"([^"]+)"', call).group(1)
    apt = re.search(r"\.apt\(\[([^\]]*)\]\)", call)
    packages = re.findall(r'"([^"]+)"', apt.group(1)) if apt else []
    path = re.search(r'path:\s*"([^"]+)"', call)
    targets.append((name, packages, path.group(1) if path else f"Sources/{name}"))
if not targets:
    problems.append("build: found no .systemLibrary target in Package.swift")

multiarch = run("dpkg-architecture", "-qDEB_HOST_MULTIARCH").stdout.strip() or "x86_64-linux-gnu"
for name, packages, folder in targets:
    modulemap = os.path.join(folder, "module.modulemap")
    links = re.findall(r'link\s+"([^"]+)"', open(modulemap).read()) if os.path.exists(modulemap) else []
    if not links:
        problems.append(f"build: {name}: {modulemap} names no library (link \"...\")")
    dev_for_link = {}
    for link in links:
        so = next((p for p in (f"/usr/lib/{multiarch}/lib{link}.so", f"/usr/lib/lib{link}.so") if os.path.exists(p)), None)
        if so is None:
            problems.append(f"build: {name}: lib{link}.so is not installed here (is its -dev package?)")
            continue
        dev_for_link[link] = owner(so)
        library = os.path.realpath(so)
        runtime_package = owner(library)
        if runtime_package is None:
            problems.append(f"libraries: {name}: {library} belongs to no Debian package")
        elif runtime_package not in in_image:
            problems.append(f"libraries: {name} links {os.path.basename(library)} from {runtime_package}, which the "
                            f"runtime stage does not install: add {runtime_package} to its apt-get install")
    wanted = packages or sorted({p for p in dev_for_link.values() if p})
    if not wanted:
        problems.append(f"build: {name}: no -dev package known (no providers: [.apt([...])] and no dpkg owner)")
    for package in wanted:
        if package not in build_packages:
            problems.append(f"build: {name} needs {package}, which the build stage (FROM {build[1]}) does not "
                            f"install: add it to its apt-get install")
    for link, package in dev_for_link.items():
        if packages and package and package not in packages:
            problems.append(f"build: {name}: providers say {', '.join(packages)} but lib{link}.so comes from {package}")
notes.append(f"build: {len(targets)} systemLibrary targets ({', '.join(t[0] for t in targets)})")

for note in notes:
    print("deploy-libs-check: " + note)
for problem in problems:
    print("MISSING " + problem)
if problems:
    print(f"deploy-libs-check: {len(problems)} problem(s) in Deploy/Dockerfile")
    sys.exit(1)
print("deploy-libs-check: the build stage has every -dev package and the runtime stage every library")
PY
