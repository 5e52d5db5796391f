#!/usr/bin/env bash
# Build spotshift's image from the top-level Dockerfile.
#   bash deploy/image/build.sh [--base IMAGE] [--tag TAG]
#     --base IMAGE   base of both stages (default: the Dockerfile's public python:3.11-slim-bookworm);
#                    where no registry is reachable: --base "$(bash deploy/image/base.sh)"
#     --tag TAG      image name (default: ghcr.io/spotshift/spotshift:VERSION, what deploy/ refers to)
# VERSION is pyproject.toml's version, the one place it is set. With a Docker engine this runs `docker build`
# (BuildKit); without one, `buildah bud` (daemonless; installed with apt when missing; as root with chroot
# isolation, which works inside containers; buildah's storage driver is its default, overlay where the kernel
# allows it; storage.conf can choose vfs). Layers are cached (docker's or buildah's store), so a rebuild after a
# source change reuses the dependency layer.
# The machine's CA bundle (PIP_CERT, pip's configured cert, else the system bundle) is passed as the optional
# build secret `cacert`, for networks where a TLS-intercepting proxy signs PyPI; it never enters the image.
set -euo pipefail

# The whole script is one function, read before anything runs: a child process that moves the offset of
# the script's file descriptor (some docker client wrappers do) cannot make bash read the rest wrongly.
main() {
  cd "$(dirname "$0")/../.."
  version=$(sed -n 's/^version *= *"\([^"]*\)".*/\1/p' pyproject.toml | head -n 1)
  [ -n "$version" ] || { echo "build.sh: no version in pyproject.toml" >&2; exit 1; }
  base=""
  local tag="ghcr.io/spotshift/spotshift:$version"
  while [ $# -gt 0 ]; do
    case "$1" in
      --base) base=${2:?--base needs an image}; shift 2 ;;
      --base=*) base=${1#--base=}; shift ;;
      --tag) tag=${2:?--tag needs a name}; shift 2 ;;
      --tag=*) tag=${1#--tag=}; shift ;;
      -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
      *) echo "build.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
  done

  cacert=""
  for candidate in "${PIP_CERT:-}" "$( (python3 -m pip config get global.cert || pip3 config get global.cert) 2>/dev/null || true)" \
                   /etc/ssl/certs/ca-certificates.crt; do
    if [ -n "$candidate" ] && [ -s "$candidate" ]; then cacert=$candidate; break; fi
  done
  args=(--build-arg "VERSION=$version" -t "$tag" -f Dockerfile)
  [ -z "$base" ] || args+=(--build-arg "BASE_IMAGE=$base")
  [ -z "$cacert" ] || args+=(--secret "id=cacert,src=$cacert")

  started=$(date +%s)
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    echo "build.sh: docker build -t $tag (base: ${base:-the default of the Dockerfile})" >&2
    DOCKER_BUILDKIT=1 docker build "${args[@]}" .
  else
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    if ! command -v buildah >/dev/null 2>&1; then
      echo "build.sh: no Docker engine; installing buildah with apt" >&2
      $sudo apt-get update -q >/dev/null
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q buildah >/dev/null
    fi
    echo "build.sh: buildah bud -t $tag (no Docker engine; base: ${base:-the default of the Dockerfile})" >&2
    $sudo buildah bud --isolation chroot --layers \
      --pull=false "${args[@]}" .
  fi
  echo "build.sh: built $tag (version $version) in $(( $(date +%s) - started ))s" >&2
}

main "$@"
exit
