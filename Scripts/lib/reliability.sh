# shellcheck shell=bash
# shellcheck disable=SC2034,SC2154  # variables shared with the sourcing script
# Shared pieces of the reliability scripts (slow-clients.sh, crash-loop.sh, soak.sh), sourced
# by bash. Everything runs on loopback, in a temp directory ($work) removed on exit, and every
# wait is bounded.
#
# Needs $root (the repository). Sets $work. Functions:
#   rel_setup NAME          temp dir, cleanup trap
#   rel_build_release       release build of gatehouse (+ crash writer); sets $bin, $crash_writer
#   rel_free_port           prints a free loopback port
#   rel_wait_for_port PORT  waits (10 s) until something accepts on 127.0.0.1:PORT
#   rel_wait_for_line F RE  waits (30 s) for a line matching RE in file F and prints it
#   rel_start_nginx PORT    nginx serving $work/www on 127.0.0.1:PORT (sets $nginx_pid)
#   rel_stop_nginx          stops it (bounded)
#   rel_start_gateway CFG   starts $bin serve --config CFG (sets $gateway_pid, $gateway, $admin)
#   rel_rss_kb PID / rel_fds PID   resident memory (KiB) and open descriptors of PID
# Children to stop on exit are added to $rel_children.

work=""
rel_children=""
nginx_pid=""
gateway_pid=""
gateway=""
admin=""

rel_cleanup() {
  status=$?
  set +e
  for pid in $rel_children $gateway_pid; do kill "$pid" 2>/dev/null; done
  for pid in $rel_children $gateway_pid; do wait "$pid" 2>/dev/null; done
  rel_stop_nginx
  [ -n "$work" ] && [ -z "${KEEP_WORK:-}" ] && rm -rf "$work"
  exit "$status"
}

rel_setup() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/gatehouse-$1.XXXXXX")
  trap rel_cleanup EXIT
  trap 'exit 130' INT TERM
}

rel_build_release() {
  bin="${GATEHOUSE_BIN:-}"
  crash_writer="${GATEHOUSE_CRASH_WRITER:-}"
  if [ -z "$bin" ] || [ -z "$crash_writer" ]; then
    echo "building release binaries (nice)..." >&2
    (cd "$root" && nice -n 10 swift build -c release --product gatehouse >&2)
    (cd "$root" && nice -n 10 swift build -c release --product GatehouseStoreCrashWriter >&2)
    local dir
    dir=$(cd "$root" && swift build -c release --show-bin-path)
    bin="${bin:-$dir/gatehouse}"
    crash_writer="${crash_writer:-$dir/GatehouseStoreCrashWriter}"
  fi
}

rel_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

rel_wait_for_line() {
  local tries=0
  while ! grep -a -m1 "$2" "$1" 2>/dev/null; do
    tries=$((tries + 1))
    if [ "$tries" -gt 300 ]; then
      echo "timed out waiting for '$2' in $1:" >&2
      tail -20 "$1" >&2
      return 1
    fi
    sleep 0.1
  done
}

rel_wait_for_port() {
  local tries=0
  until (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do
    tries=$((tries + 1))
    if [ "$tries" -gt 200 ]; then
      echo "nothing listens on 127.0.0.1:$1" >&2
      return 1
    fi
    sleep 0.05
  done
}

# nginx as the backend: static JSON files under $work/www, keep-alive, its own prefix.
rel_start_nginx() {
  local port=$1
  mkdir -p "$work/nginx/logs" "$work/nginx/tmp"
  # nginx workers run as an unprivileged user: they must traverse $work and read www/.
  chmod 711 "$work"
  chmod -R a+rX "$work/www"
  cat >"$work/nginx/nginx.conf" <<CONF
worker_processes 1;
error_log $work/nginx/logs/error.log warn;
pid $work/nginx/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/nginx/tmp;
  proxy_temp_path $work/nginx/tmp;
  fastcgi_temp_path $work/nginx/tmp;
  uwsgi_temp_path $work/nginx/tmp;
  scgi_temp_path $work/nginx/tmp;
  keepalive_requests 100000;
  default_type application/json;
  server {
    listen 127.0.0.1:$port;
    root $work/www;
    location / { try_files \$uri /item.json; }
    # Waits for the whole request body (nginx buffers it before proxying) before answering.
    location = /upload { client_max_body_size 100m; proxy_pass http://127.0.0.1:$port/item.json; }
  }
}
CONF
  nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" -g 'daemon off;' >"$work/nginx/out.log" 2>&1 &
  nginx_pid=$!
  if ! rel_wait_for_port "$port"; then
    cat "$work/nginx/out.log" "$work/nginx/logs/error.log" >&2
    return 1
  fi
}

rel_stop_nginx() {
  [ -n "$nginx_pid" ] || return 0
  kill "$nginx_pid" 2>/dev/null || true
  local tries=0
  while kill -0 "$nginx_pid" 2>/dev/null && [ "$tries" -lt 100 ]; do
    tries=$((tries + 1))
    sleep 0.05
  done
  kill -9 "$nginx_pid" 2>/dev/null || true
  wait "$nginx_pid" 2>/dev/null || true
  nginx_pid=""
}

rel_start_gateway() {
  local config=$1 log=${2:-$work/gateway.log}
  : >"$log"
  "$bin" serve --config "$config" >"$log" 2>&1 &
  gateway_pid=$!
  gateway=$(rel_wait_for_line "$log" '"msg":"listening"' | sed 's/.*"address":"\([^"]*\)".*/\1/')
  admin=$(rel_wait_for_line "$log" '"msg":"admin listening"' | sed 's/.*"address":"\([^"]*\)".*/\1/')
}

rel_rss_kb() {
  awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0
}

rel_fds() {
  find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l
}
