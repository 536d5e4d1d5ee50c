#!/usr/bin/env bash
# without-protoc.sh CMD [ARGS...]: runs CMD with a PATH in which there is no `protoc` (and no
# PROTOC in the environment), to show that the build needs nothing but cargo.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)

log() { echo "without-protoc: $*" >&2; }
die() { log "$*"; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-no-protoc.XXXXXX")
# shellcheck source=scripts/lib.sh
. "$here/scripts/lib.sh"

bin=$(path_without_protoc "$WORK/bin")
unset PROTOC
PATH=$bin "$@"
