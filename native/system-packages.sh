#!/usr/bin/env bash
# The Debian packages that `make demo` and `make test` need; installs the missing ones (as root,
# or through sudo). Quick when everything is there: each need is checked before apt runs.
#   build: cmake, a C/C++ compiler, OpenSSL (DDS Security), libacl (iceoryx), cpptoml (RouDi's
#          configuration), cargo (fetches the Cyclone DDS sources from the crate registry)
#   tests: ddsperf + idlc (the C anchor and the IDL check), sockperf, iproute2 + nftables
#          (network namespaces, link faults), chromium (console browser tests), cyclonedds-dev
#          (the C peer, `make interop`), libfastrtps-dev + fastddsgen (the Fast DDS peer,
#          `make interop`, docs/interop.md), podman + runc + netavark/aardvark-dns + iptables
#          (its bridge networks) + mmdebstrap (`make images` and the container lab: mcc.lab,
#          docs/deploy.md)
set -euo pipefail
need=()
have_header() { [ -f "/usr/include/$1" ]; }
command -v cmake >/dev/null || need+=(cmake)
command -v patch >/dev/null || need+=(patch)  # native/patches
command -v cc >/dev/null || need+=(gcc libc6-dev)
command -v c++ >/dev/null || need+=(g++)
command -v cargo >/dev/null || [ -x "$HOME/.cargo/bin/cargo" ] || need+=(cargo)
have_header openssl/ssl.h || need+=(libssl-dev)
have_header sys/acl.h || need+=(libacl1-dev)
have_header cpptoml.h || need+=(libcpptoml-dev)
command -v ddsperf >/dev/null || need+=(cyclonedds-tools)
command -v sockperf >/dev/null || need+=(sockperf)
command -v ip >/dev/null || need+=(iproute2)
command -v tc >/dev/null || need+=(iproute2)
command -v nft >/dev/null || need+=(nftables)
command -v chromium >/dev/null || need+=(chromium)
have_header dds/dds.h || need+=(cyclonedds-dev)
command -v systemd-analyze >/dev/null || need+=(systemd)  # tests: deploy/systemd units
have_header fastdds/dds/domain/DomainParticipant.hpp || need+=(libfastrtps-dev)
command -v fastddsgen >/dev/null || need+=(fastddsgen)
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || [ -x /usr/sbin/runc ] || need+=(runc)
[ -x /usr/lib/podman/netavark ] || need+=(netavark aardvark-dns)
# netavark 1.4 (bookworm) sets up its bridges with iptables only; Debian makes it a Recommends.
command -v iptables >/dev/null || [ -x /usr/sbin/iptables ] || need+=(iptables)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
if ((${#need[@]})); then
    echo "installing Debian packages: ${need[*]}" >&2
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
