#!/usr/bin/env bash
# valgrind-tests.sh — the unit and integration tests of the crates with unsafe memory access,
# each test executable run under valgrind's memcheck.
#
# Usage: scripts/valgrind-tests.sh [CRATE...]   (default: sluice-store sluice-resp; not part of CI)
#
# - Builds each crate's test executables (`cargo test -p CRATE --no-run`, the test profile,
#   debug assertions on) and reads their paths from cargo's JSON messages; each then runs
#   under `valgrind --tool=memcheck --error-exitcode=1` from the crate's directory, as `cargo
#   test` runs it. An invalid read or write, a use of uninitialised memory, or a definite leak
#   is an error; the tests' own failures fail the run too. Doc tests are not run (rustdoc builds
#   them at test time).
# - Ignored tests stay ignored; proptest runs its default case counts. Under memcheck the tests
#   run some 20 to 50 times slower: about 14 minutes on two cores (the table and store tests
#   most of it).
# - Builds go to $CARGO_TARGET_DIR as usual (target/ when unset).
# - Installs valgrind with apt-get if it is missing (as root, or through sudo).
#
# Exits 1 if any executable failed or memcheck reported an error, 0 otherwise.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

case "${1:-}" in
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
esac
crates=("$@")
[ ${#crates[@]} -gt 0 ] || crates=(sluice-store sluice-resp)

log() { echo "valgrind-tests: $*" >&2; }

if ! command -v valgrind >/dev/null; then
  log "installing valgrind"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq valgrind >/dev/null
fi

started=$SECONDS
failed=()
for crate in "${crates[@]}"; do
  log "building the tests of $crate"
  # One JSON message per artifact; a test executable's has a non-null "executable" and a
  # profile with "test":true (examples, built too, have "test":false), and names the manifest
  # of its package: the directory it runs in.
  mapfile -t runs < <(
    cargo test -p "$crate" --no-run --message-format=json 2>/dev/null \
      | grep '"executable":"' | grep '"profile":{[^}]*"test":true}' \
      | sed 's/.*"manifest_path":"\([^"]*\)\/Cargo.toml".*"executable":"\([^"]*\)".*/\1 \2/'
  )
  [ ${#runs[@]} -gt 0 ] || { log "no test executables for $crate"; exit 1; }
  for run in "${runs[@]}"; do
    dir=${run%% *} exe=${run#* }
    log "$crate: $(basename "$exe")"
    if ! (cd "$dir" && CARGO_MANIFEST_DIR="$dir" valgrind --tool=memcheck --quiet \
        --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
        --show-leak-kinds=definite "$exe" --quiet); then
      failed+=("$crate: $(basename "$exe")")
    fi
  done
done

log "done in $((SECONDS - started)) s"
if [ ${#failed[@]} -gt 0 ]; then
  log "failed: ${failed[*]}"
  exit 1
fi
log "clean: no memcheck error, every test passed"
