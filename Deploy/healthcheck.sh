#!/bin/bash
# Container health probe for images without curl: sends `GET <path>` to 127.0.0.1:<port>
# over bash's /dev/tcp and exits 0 only on an HTTP 200 status line.
# usage: gatehouse-healthcheck [PORT] [PATH]   (defaults: 9901 /healthz)
set -u
port="${1:-9901}"
path="${2:-/healthz}"
exec 3<>"/dev/tcp/127.0.0.1/${port}" || exit 1
printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nConnection: close\r\n\r\n' "$path" "$port" >&3 || exit 1
IFS= read -r -t 3 status_line <&3 || exit 1
exec 3<&-
case "$status_line" in
  "HTTP/1."[01]" 200 "*) exit 0 ;;
  *) echo "unhealthy: ${status_line%$'\r'}" >&2; exit 1 ;;
esac
