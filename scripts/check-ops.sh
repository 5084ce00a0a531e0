#!/usr/bin/env bash
# Checks the operations files under docker/ offline, with tools from Debian
# packages and one npm package, and a live Sluice on loopback:
#   - ShellCheck on every script in scripts/, bench/ and docker/
#   - yamllint on every YAML file under docker/
#   - promtool: check config (prometheus.yml), check rules and test rules
#     (alerts), check metrics (a live /metrics), check rules on the
#     dashboard's queries (their PromQL syntax)
#   - docker/check/ops_check.py: the dashboard's and the alerts' metric and
#     label names against the live /metrics; the compose file's and the
#     Deployment's environment through `sluice check-config`; what schemas
#     cannot see (probes, grace period, selectors, mounts); the Dockerfile's
#     contract
#   - docker-compose config on docker/compose.yaml (no engine needed)
#   - kubernetes-models (npm): docker/k8s/ against the Kubernetes API schemas,
#     unknown fields refused
#   - the runtime image's layout (docker/collect-runtime.sh) on the local build
# The image itself is not built: no container engine runs here.
# Prints what it checked; exits non-zero when any check fails.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)

./scripts/setup.sh prometheus yamllint shellcheck docker-compose python3 python3-yaml
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  ./scripts/setup.sh nodejs npm
fi

bin=build/release
if [ ! -x "$bin/app/sluice" ] || [ ! -x "$bin/upstream/sluice-upstream" ]; then
  ./scripts/build.sh release
fi
sluice="$bin/app/sluice"
ops=docker/check/ops_check.py

work=$(mktemp -d)
upstream_pid=""
sluice_pid=""
stop_live() {
  for pid in "$sluice_pid" "$upstream_pid"; do
    if [ -n "$pid" ]; then
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  sluice_pid=""
  upstream_pid=""
}
cleanup() {
  stop_live
  rm -rf "$work"
}
trap cleanup EXIT

passed=0
failed=0
failures=()
# check NAME COMMAND...: runs one check, counts it, goes on after a failure.
check() {
  local name="$1"
  shift
  echo "== $name"
  if "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    failures+=("$name")
    echo "!! FAILED: $name"
  fi
}

echo "check-ops: tools"
echo "  $(promtool --version 2>&1 | head -n 1)"
echo "  $(yamllint --version 2>&1)"
echo "  shellcheck $(shellcheck --version | sed -n 's/^version: //p')"
echo "  docker-compose $(docker-compose version --short 2>/dev/null)"
echo "  node $(node --version), npm $(npm --version)"
echo "  $(python3 --version)"

# ---- static checks -------------------------------------------------------------

shell_scripts() {
  local scripts=(scripts/*.sh bench/*.sh docker/*.sh)
  echo "shellcheck: ${scripts[*]}"
  shellcheck -x "${scripts[@]}"
}
check "shellcheck (scripts/, bench/, docker/)" shell_scripts

yaml_files() {
  yamllint -c docker/yamllint.yaml --strict docker &&
    echo "yamllint: $(find docker -name '*.yaml' -o -name '*.yml' | wc -l) files clean"
}
check "yamllint docker/" yaml_files

prometheus_config() {
  # The compose file mounts the rules at /etc/prometheus; check with the local path.
  sed "s|/etc/prometheus/alerts.yml|$PWD/docker/prometheus/alerts.yml|" \
    docker/prometheus/prometheus.yml >"$work/prometheus.yml"
  promtool check config "$work/prometheus.yml"
}
check "promtool check config docker/prometheus/prometheus.yml" prometheus_config
check "promtool check rules docker/prometheus/alerts.yml" promtool check rules docker/prometheus/alerts.yml
check "promtool test rules docker/prometheus/alerts_test.yml" promtool test rules docker/prometheus/alerts_test.yml

check "Dockerfile contract" python3 "$ops" dockerfile docker/Dockerfile

image_layout() {
  # What the Dockerfile's build stage lays out, from the local build: every
  # library the distroless base lacks must come from the image's own lib/.
  docker/collect-runtime.sh "$bin" "$work/image"
  local outside
  outside=$(LD_LIBRARY_PATH="$work/image/lib" ldd "$work/image/bin/sluice" "$work/image/bin/sluice-upstream" |
    awk -v lib="$work/image/lib/" '$2 == "=>" &&
      $1 !~ /^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libresolv|libutil|libgcc_s|libstdc\+\+)\.so/ &&
      index($3, lib) != 1 { print "  " $1 " => " $3 }')
  if [ -n "$outside" ]; then
    echo "libraries neither in distroless/cc nor in the image:"
    echo "$outside"
    return 1
  fi
  env -i LD_LIBRARY_PATH="$work/image/lib" "$work/image/bin/sluice" --version
}
check "runtime image layout (docker/collect-runtime.sh)" image_layout

compose_config() {
  docker-compose -f docker/compose.yaml config -q &&
    docker-compose -f docker/compose.yaml config >"$work/compose.yml" &&
    echo "docker-compose config: docker/compose.yaml is valid" &&
    python3 "$ops" compose "$work/compose.yml" docker &&
    python3 "$ops" check-config "$sluice" compose "$work/compose.yml"
}
check "docker-compose config docker/compose.yaml" compose_config

node_tools() {
  # kubernetes-models, pinned by docker/check/package-lock.json, installed
  # under build/ (never committed) and reused while the lock is unchanged.
  local dir=build/ops-tools
  if cmp -s docker/check/package-lock.json "$dir/package-lock.json" &&
    [ -d "$dir/node_modules/kubernetes-models" ]; then
    return 0
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  cp docker/check/package.json docker/check/package-lock.json "$dir/"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
}
k8s_schemas() {
  node_tools &&
    python3 "$ops" manifests "$work/manifests.json" docker/k8s/*.yaml &&
    node docker/check/k8s-validate.mjs build/ops-tools/node_modules "$work/manifests.json"
}
check "Kubernetes schemas docker/k8s/" k8s_schemas
check "Kubernetes consistency docker/k8s/" python3 "$ops" k8s-consistency docker/k8s/*.yaml
check "sluice check-config on the Deployment's environment" python3 "$ops" check-config "$sluice" k8s docker/k8s/*.yaml

# ---- a live Sluice -----------------------------------------------------------------

# wait_for FILE PATTERN: the first line of FILE matching PATTERN, within 10s.
wait_for() {
  local line=""
  for _ in $(seq 100); do
    line=$(grep -m 1 "$2" "$1" 2>/dev/null || true)
    if [ -n "$line" ]; then
      echo "$line"
      return 0
    fi
    sleep 0.1
  done
  echo "no line matching '$2' in $1:" >&2
  cat "$1" >&2
  return 1
}

start_live() {
  "$bin/upstream/sluice-upstream" --listen 127.0.0.1:0 2>"$work/upstream.err" &
  upstream_pid=$!
  local line
  line=$(wait_for "$work/upstream.err" 'listening on') || return 1
  upstream_addr=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\).*/\1/p' <<<"$line")

  # A certificate for the HTTPS listener, so that its series have samples.
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj /CN=ops.test -keyout "$work/tls.key" -out "$work/tls.crt" 2>/dev/null || return 1
  # env -i: only the variables below, whatever the caller's environment holds.
  env -i PATH="$PATH" \
    SLUICE_UPSTREAMS="api=$upstream_addr" \
    SLUICE_LISTEN=127.0.0.1:0 \
    SLUICE_TLS_LISTEN=127.0.0.1:0 \
    SLUICE_TLS_CERT="$work/tls.crt" \
    SLUICE_TLS_KEY="$work/tls.key" \
    SLUICE_ADMIN_LISTEN=127.0.0.1:0 \
    SLUICE_ROUTES_FILE=docker/sluice/routes.json \
    SLUICE_ACCESS_LOG=off \
    SLUICE_THREADS=2 \
    SLUICE_DRAIN_DELAY=0s \
    SLUICE_DRAIN_TIMEOUT=2s \
    "$sluice" 2>"$work/sluice.err" &
  sluice_pid=$!
  line=$(wait_for "$work/sluice.err" 'listening on') || return 1
  listen_addr=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\),.*/\1/p' <<<"$line")
  admin_addr=$(sed -n 's/.*admin on \([0-9.]*:[0-9]*\).*/\1/p' <<<"$line")
  echo "sluice on $listen_addr (admin $admin_addr) in front of sluice-upstream on $upstream_addr"

  # Traffic that makes the labelled series appear: a forwarded request, a pin
  # to level 2 and a bulk request it sheds, a request without Host (400).
  curl -s -o /dev/null "http://$listen_addr/hello"
  curl -s -o /dev/null -X POST -d '{"level":2,"ttl":"1m","reason":"check-ops"}' "http://$admin_addr/admin/pins"
  curl -s -o /dev/null -X POST --data-binary x "http://$listen_addr/echo"
  curl -s -o /dev/null -X DELETE "http://$admin_addr/admin/pins"
  curl -s -o /dev/null -H 'Host:' "http://$listen_addr/hello"
  curl -fsS "http://$admin_addr/metrics" >"$work/metrics.txt"
  echo "/metrics: $(grep -c '^# TYPE sluice_' "$work/metrics.txt") sluice_ families, $(grep -vc '^#' "$work/metrics.txt") samples"
}
healthcheck_command() {
  # The image's HEALTHCHECK: `sluice healthcheck` against this instance.
  env -i PATH="$PATH" SLUICE_UPSTREAMS="api=$upstream_addr" SLUICE_ADMIN_LISTEN="$admin_addr" \
    "$sluice" healthcheck && echo "sluice healthcheck: exit 0 against $admin_addr"
}

if check "live sluice + sluice-upstream on 127.0.0.1" start_live; then
  check "sluice healthcheck (the image's HEALTHCHECK)" healthcheck_command
  lint_metrics() {
    promtool check metrics <"$work/metrics.txt" && echo "promtool check metrics: no problems"
  }
  check "promtool check metrics on a live /metrics" lint_metrics
  python3 "$ops" exported "$work/metrics.txt" >"$work/exported.txt"
  check "alert rules' metric and label names" python3 "$ops" alerts docker/prometheus/alerts.yml "$work/metrics.txt"
  dashboard() {
    python3 "$ops" dashboard docker/grafana/dashboards/sluice.json "$work/metrics.txt" "$work/dashboard-rules.yml" &&
      echo "PromQL syntax of the dashboard's queries:" &&
      promtool check rules "$work/dashboard-rules.yml"
  }
  check "dashboard docker/grafana/dashboards/sluice.json" dashboard
fi
stop_live

elapsed=$(($(date +%s) - started))
echo
if [ "$failed" -gt 0 ]; then
  printf 'check-ops: failed: %s\n' "${failures[@]}"
fi
echo "check-ops: ${elapsed}s"
echo "check-ops: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
