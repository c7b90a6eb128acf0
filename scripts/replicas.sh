#!/usr/bin/env bash
# N `tracelm serve` replicas on loopback behind HAProxy (Debian's package; docs/deployment.md).
#
#   scripts/replicas.sh [--replicas 3] [--port 8080] [--first-port 8101] [--routing prefix|roundrobin]
#                       [--hash-bytes 256] [--tracelm PATH (default: build/tracelm)] [-- SERVE_FLAGS...]
#
# Replica i listens on 127.0.0.1:(first-port + i) and is restarted 2 s after it exits (as a supervisor would), HAProxy on
# 127.0.0.1:PORT checks each one's /health every 500 ms (two failures take it out, two successes put it back) and
# routes every request by a consistent hash of the first --hash-bytes bytes of its prompt (a completion) or of its
# first, usually system, message (a chat): requests that share that prefix reach the replica whose prefix cache holds
# it, and a replica that goes away moves only its own share. `--routing roundrobin` spreads them instead. Prints
# "replica I pid P port Q" at each (re)start, then "listening on http://127.0.0.1:PORT"; SIGTERM or SIGINT stops
# HAProxy and drains every replica (their SIGTERM). Loopback only.
set -euo pipefail
replicas=3 port=8080 first_port=8101 routing=prefix hash_bytes=256 tracelm=$(dirname "$0")/../build/tracelm
while [ $# -gt 0 ]; do
  case $1 in
    --replicas) replicas=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --first-port) first_port=$2; shift 2 ;;
    --routing) routing=$2; shift 2 ;;
    --hash-bytes) hash_bytes=$2; shift 2 ;;
    --tracelm) tracelm=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "replicas.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
case $routing in
  prefix) balance="balance hash var(txn.prefix),bytes(0,$hash_bytes)" ;;
  roundrobin) balance="balance roundrobin" ;;
  *) echo "replicas.sh: --routing is prefix or roundrobin, not $routing" >&2; exit 2 ;;
esac
command -v haproxy >/dev/null || { echo "replicas.sh: haproxy is not installed (apt-get install haproxy)" >&2; exit 1; }
[ -x "$tracelm" ] || { echo "replicas.sh: no tracelm binary at $tracelm" >&2; exit 1; }

dir=$(mktemp -d)
{
  cat <<EOF
global
    maxconn 4096
defaults
    mode http
    timeout connect 2s
    timeout client 10m
    timeout server 10m
    timeout queue 30s
    # A request that cannot reach its replica (refused: it went away) is sent to another one.
    retries 2
    option redispatch 1
frontend llm
    bind 127.0.0.1:$port
    # The body is read before a replica is picked: the key is the first message's text (a chat, whatever the order
    # of its fields) or the prompt (a completion); a request with neither goes round-robin.
    option http-buffer-request
    http-request set-var(txn.prefix) req.body,json_query('\$.messages[0].content')
    http-request set-var(txn.prefix) req.body,json_query('\$.prompt') unless { var(txn.prefix) -m found }
    default_backend replicas
backend replicas
    $balance
    hash-type consistent
    option httpchk GET /health
    http-check expect status 200
    default-server inter 500ms fall 2 rise 2
    # Which replica answered: for clients, logs and tests.
    http-response set-header X-Served-By %s
EOF
  for ((i = 0; i < replicas; i++)); do
    echo "    server r$i 127.0.0.1:$((first_port + i)) check"
  done
} > "$dir/haproxy.cfg"
haproxy -c -q -f "$dir/haproxy.cfg"

stopping=0
pids=()
# Replica i, restarted 2 s after it exits (a crash loop stays slow; HAProxy has taken it out by then) until the
# script stops.
supervise() {
  local i=$1 child
  shift
  trap 'stopping=1; [ -n "${child:-}" ] && kill -TERM "$child" 2>/dev/null; wait "${child:-}" 2>/dev/null; exit 0' TERM INT
  while [ "$stopping" = 0 ]; do
    "$tracelm" serve --host 127.0.0.1 --port $((first_port + i)) "$@" > /dev/null &
    child=$!
    echo "replica $i pid $child port $((first_port + i))"
    wait "$child" || true
    [ "$stopping" = 0 ] && sleep 2
  done
}
for ((i = 0; i < replicas; i++)); do
  supervise "$i" "$@" &
  pids+=($!)
done
haproxy -db -f "$dir/haproxy.cfg" &
hpid=$!
stop() {
  kill -TERM "$hpid" "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$dir"
  exit 0
}
trap stop TERM INT
echo "listening on http://127.0.0.1:$port"
wait "$hpid" || true
stop
