#!/usr/bin/env bash
# without-protoc.sh CMD [ARGS...]: runs CMD with a PATH in which there is no `protoc`, to show
# that the build needs nothing but cargo.
#
# Removing protoc's directory from PATH is not enough: on a merged-/usr system /bin and
# /usr/bin are one directory, and it holds everything else too. So the new PATH is one scratch
# directory of links to every command on the old PATH except protoc.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }

bin=$(mktemp -d "${TMPDIR:-/tmp}/sluice-no-protoc.XXXXXX")
trap 'rm -rf "$bin"' EXIT
IFS=: read -r -a dirs <<<"$PATH"
for dir in "${dirs[@]}"; do
    [ -d "$dir" ] || continue
    for cmd in "$dir"/*; do
        name=${cmd##*/}
        # The first directory on PATH wins, as it would for the shell.
        if [ -x "$cmd" ] && [ ! -e "$bin/$name" ] && [ "$name" != protoc ]; then
            ln -s "$cmd" "$bin/$name"
        fi
    done
done
PATH=$bin
export PATH
unset PROTOC
if command -v protoc >/dev/null; then
    echo "without-protoc.sh: protoc is still on PATH" >&2
    exit 1
fi
"$@"
