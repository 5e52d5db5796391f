#!/usr/bin/env bash
# The runtime base image made from Debian packages, for machines that cannot pull a public base image:
#   bash deploy/image/base.sh            prints the local image name (localhost/spotshift-base:bookworm)
# mmdebstrap --variant=minbase writes a bookworm root filesystem with python3 and ca-certificates into a
# tarball, which is imported as a one-layer image (buildah from scratch + add + commit). The tarball and the
# image are cached (${SPOTSHIFT_CACHE:-~/.cache/spotshift}/image/ and buildah's storage), so only the first
# run pays for the debootstrap (~75 s). SPOTSHIFT_REBUILD_BASE=1 makes it again (newer Debian packages).
# Needs root (mmdebstrap's root mode, buildah's chroot isolation); installs mmdebstrap and buildah with apt.
set -euo pipefail
IMAGE=localhost/spotshift-base:bookworm
cache="${SPOTSHIFT_CACHE:-$HOME/.cache/spotshift}/image"
tarball="$cache/base-bookworm.tar"

say() { echo "base.sh: $*" >&2; }

sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
missing=()
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
command -v buildah >/dev/null 2>&1 || missing+=(buildah)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]} with apt"
  $sudo apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}" >/dev/null
fi

if [ "${SPOTSHIFT_REBUILD_BASE:-0}" = 1 ]; then
  rm -f "$tarball"
  $sudo buildah rmi "$IMAGE" >/dev/null 2>&1 || true
fi
if $sudo buildah inspect --type image "$IMAGE" >/dev/null 2>&1; then
  echo "$IMAGE"
  exit 0
fi
mkdir -p "$cache"
if [ ! -s "$tarball" ]; then
  say "mmdebstrap --variant=minbase --include=python3,ca-certificates bookworm (about a minute)"
  # Written beside the cache and renamed, so an interrupted run never leaves a truncated tarball behind.
  $sudo mmdebstrap --quiet --variant=minbase --include=python3,ca-certificates \
    --aptopt='APT::Install-Recommends "false"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    bookworm "$cache/base-bookworm.partial.tar"
  mv "$cache/base-bookworm.partial.tar" "$tarball"
fi
say "importing $tarball as $IMAGE"
ctr=$($sudo buildah from scratch)
trap '$sudo buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
$sudo buildah add --quiet "$ctr" "$tarball" / >/dev/null
$sudo buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --cmd /bin/sh --label org.opencontainers.image.base.name=debian:bookworm-minbase "$ctr"
$sudo buildah commit --quiet --rm "$ctr" "$IMAGE" >/dev/null
trap - EXIT
echo "$IMAGE"
