#!/usr/bin/env bash
# Build the full-featured Cyclone DDS that MCC's bus runs on, into PREFIX (default .venv/cyclone):
#   Cyclone DDS 11.0.1 as shared libraries with DDS Security (OpenSSL), TCP and the iceoryx
#   shared-memory exchange (psmx_iox), plus idlc, ddsperf and iceoryx's RouDi daemon (iox-roudi);
#   one timer of the secure handshake shortened and a race of the TCP receive path fixed (below).
# The sources come from the crate registry: the cyclors crate vendors Cyclone DDS and iceoryx
# (native/Cargo.toml pins it; cargo only fetches, nothing Rust is compiled).
# About 3 minutes on 2 cores the first time; a second run with the same sources does nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prefix=${1:-$here/../.venv/cyclone}
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
jobs=$(nproc)
export PATH="$PATH:$HOME/.cargo/bin"  # rustup installs cargo there

cargo fetch --quiet --manifest-path "$here/Cargo.toml"
src=$(cargo metadata --quiet --format-version 1 --manifest-path "$here/Cargo.toml" |
    python3 -c 'import json, sys, os
d = json.load(sys.stdin)
print(next(os.path.dirname(p["manifest_path"]) for p in d["packages"] if p["name"] == "cyclors"))')
stamp="$prefix/.built-$(basename "$src")-$(cat "$0" "$here"/patches/*.patch | sha1sum | cut -c1-12)"
if [ -f "$stamp" ]; then
    exit 0
fi
echo "building Cyclone DDS (security, TCP, iceoryx) from $src into $prefix (about 3 min)" >&2
build=$(mktemp -d "${TMPDIR:-/tmp}/mcc-cyclone-build.XXXXXX")
trap 'rm -rf "$build"' EXIT
log="$build/log"
run() {
    if ! "$@" >>"$log" 2>&1; then
        tail -n 40 "$log" >&2
        echo "native/build-cyclone.sh: failed: $*" >&2
        exit 1
    fi
}
# iceoryx: static, position-independent (linked into Cyclone's psmx plugin); RouDi reads its
# TOML configuration with Debian's cpptoml instead of downloading one.
run cmake -S "$src/iceoryx/iceoryx_meta" -B "$build/iceoryx" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
    -DTOML_CONFIG=ON -DDOWNLOAD_TOML_LIB=OFF -DBINDING_C=OFF -DCCACHE=OFF
run cmake --build "$build/iceoryx" -j "$jobs"
run cmake --install "$build/iceoryx"
# One change to Cyclone's sources (a copy; the registry's stay as cargo fetched them): the secure
# handshake's wait for the peer's crypto tokens before sending its own, 100 ms in Cyclone 11.0.1
# (ddsi_handshake.c, SEND_TOKENS_TIMEOUT), becomes 5 ms. Both sides of a handshake wait there for
# each other, so every secured participant that joins paid ~100-200 ms before its endpoints could
# match: measured on loopback, a new process's writer matched a secured reader after 0.30 s
# (5 peers: 0.40 s) against 0.01-0.11 s (0.10 s) with this change (docs/security.md, "Joining").
cp -r "$src/cyclonedds" "$build/cyclonedds-src"
handshake="$build/cyclonedds-src/src/core/ddsi/src/ddsi_handshake.c"
sed -i 's/^#define SEND_TOKENS_TIMEOUT     DDS_MSECS(100)$/#define SEND_TOKENS_TIMEOUT     DDS_MSECS(5)/' "$handshake"
if ! grep -q '^#define SEND_TOKENS_TIMEOUT     DDS_MSECS(5)$' "$handshake"; then
    echo "native/build-cyclone.sh: the handshake's SEND_TOKENS_TIMEOUT was not found in $handshake" >&2
    exit 1
fi
# And the patches in native/patches, each explained at its top and in its comments:
#   cyclonedds-sockwaitset.patch: the receive thread's socket waitset (epoll) could follow an
#   entry that the listener thread was still filling, or one that a reallocation had freed. A TCP
#   server aborted when a client's first message arrived with its connection (1 start in ~20 here).
for p in "$here"/patches/*.patch; do
    run patch -d "$build/cyclonedds-src" -p1 --forward --input "$p"
done
run cmake -S "$build/cyclonedds-src" -B "$build/cyclonedds" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_INSTALL_LIBDIR=lib \
    -DCMAKE_INSTALL_RPATH="$prefix/lib" -DBUILD_SHARED_LIBS=ON -DENABLE_SECURITY=ON -DENABLE_SSL=ON \
    -DENABLE_TCP=ON -DENABLE_ICEORYX=ON -DBUILD_IDLC=ON -DBUILD_DDSPERF=ON -DENABLE_LTO=OFF \
    -DBUILD_TESTING=OFF -DBUILD_EXAMPLES=OFF
run cmake --build "$build/cyclonedds" -j "$jobs"
run cmake --install "$build/cyclonedds"
rm -f "$prefix"/.built-*
touch "$stamp"
