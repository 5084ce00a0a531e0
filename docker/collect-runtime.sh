#!/usr/bin/env bash
# Lays out what the runtime image needs from a build: OUT/bin/sluice,
# OUT/bin/sluice-upstream (stripped) and OUT/lib/ with every shared library they
# load that the distroless "cc" base image does not already have (glibc,
# libstdc++ and libgcc are there; libprometheus-cpp-core and libre2 are not).
#
# The Dockerfile's build stage runs it; scripts/check-ops.sh runs it on the
# local build and checks that the result starts with only OUT/lib added.
#
# usage: docker/collect-runtime.sh BUILD_DIR OUT_DIR
set -euo pipefail

if [ "$#" -ne 2 ]; then
  echo "usage: $0 BUILD_DIR OUT_DIR" >&2
  exit 2
fi
build="$1"
out="$2"

mkdir -p "$out/bin" "$out/lib"
install -m 0755 "$build/app/sluice" "$out/bin/sluice"
install -m 0755 "$build/upstream/sluice-upstream" "$out/bin/sluice-upstream"
strip --strip-unneeded "$out/bin/sluice" "$out/bin/sluice-upstream"

# What distroless/cc-debian12 ships (libc6, libgcc-s1, libstdc++6) and the
# loader itself: everything else is copied.
base_libs='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libresolv|libutil|libgcc_s|libstdc\+\+)\.so'

for bin in "$out/bin/sluice" "$out/bin/sluice-upstream"; do
  ldd "$bin" | while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [ "$path" = "not" ]; then
      echo "collect-runtime: $bin: $name not found" >&2
      exit 1
    fi
    if [[ "$name" =~ $base_libs ]]; then continue; fi
    # Copy under the soname the binary asks for, following symlinks.
    cp -L "$path" "$out/lib/$name"
  done
done
echo "collect-runtime: $out/bin:" "$out"/bin/*
echo "collect-runtime: $out/lib:" "$out"/lib/*
