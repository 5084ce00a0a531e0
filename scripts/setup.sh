#!/usr/bin/env bash
# Installs what Sluice needs to build and test on Debian 12, and nothing when it
# is all there already. Safe to run any number of times.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libboost1.81-dev nlohmann-json3-dev prometheus-cpp-dev catch2
  libre2-dev                 # route regexes (RE2: linear time, no recursion)
  libc-ares-dev              # upstream names resolved again within their TTL (c-ares: asynchronous, reports TTLs)
  libhiredis-dev             # the fleet's tenant counts in Redis (hiredis: RESP formatting and parsing)
  redis-server               # the fleet tests run their own redis-server on loopback
  python3-dnslib             # the re-resolution tests answer DNS from a small server on loopback
  libssl-dev openssl         # TLS both ways (OpenSSL 3); the tests make their certificates with openssl req
  sslscan                    # the HTTPS listener's protocols and ciphers, scanned by a test
  libnghttp2-dev             # HTTP/2 for clients (h2 by ALPN, h2c): nghttp2 frames, HPACK and flow control
  libgoogle-perftools-dev    # the sluice binary allocates through tcmalloc (CMakeLists.txt says why)
  nghttp2-client             # h2load and nghttp, which the HTTP/2 tests and bench drive
  curl python3
  python3-yaml               # the corpus suite reads http-desync-guardian's cases
  clang libclang-rt-14-dev   # libFuzzer targets (the fuzz preset)
  clang-format clang-tidy    # the format and tidy checks (scripts/check-format.sh, check-tidy.sh)
  chromium  # the status page test renders / in headless Chromium
)
if [ "$#" -gt 0 ]; then packages+=("$@"); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
