#!/usr/bin/env bash
# Runs each cargo-fuzz target in fuzz/ for a bounded time and reports executions and crashes.
#
# Usage: scripts/fuzz.sh [seconds-per-target] [target...]   (default 60 s, every target; not
#        part of CI)
#
# - Installs cargo-fuzz if it is missing. cargo-fuzz needs nightly-only rustc flags; the stable
#   toolchain accepts them with RUSTC_BOOTSTRAP=1, which is set for this script only.
# - Each target starts from its committed seed corpus, fuzz/corpus/seed_<target>/, copied into
#   the working corpus fuzz/corpus/<target>/ (ignored by git, kept between runs so coverage
#   accumulates). Crashing inputs land in fuzz/artifacts/<target>/; rerun one with
#   `RUSTC_BOOTSTRAP=1 cargo fuzz run -s none -a <target> <file>` from fuzz/.
# - Built without a sanitizer (`-s none`): the fuzzed code is safe Rust, and AddressSanitizer
#   would halve the executions on a two-core machine. Debug assertions and overflow checks are
#   on (`-a`), so arithmetic overflow is a finding, not a silent wrap.
# - Builds go to fuzz/target, so the workspace's own target dir is never locked.
#
# Exits 1 if any target crashed (panic, timeout, out of memory), 0 otherwise.

set -euo pipefail

seconds="${1:-60}"
case "$seconds" in
  '' | *[!0-9]*)
    echo "usage: $0 [seconds-per-target]" >&2
    exit 2
    ;;
esac

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root/fuzz"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

all_targets=(request_parser command_args http_request grpc_request)
if (($# > 1)); then
  targets=("${@:2}")
else
  targets=("${all_targets[@]}")
fi
build_flags=(-s none -a)

echo "== building ${targets[*]}"
cargo fuzz build "${build_flags[@]}"

logs="$root/fuzz/artifacts/logs"
mkdir -p "$logs"
failed=0
summary=()
for target in "${targets[@]}"; do
  corpus="corpus/$target"
  artifacts="artifacts/$target"
  mkdir -p "$corpus" "$artifacts"
  if [[ -d "corpus/seed_$target" ]]; then
    cp -r "corpus/seed_$target/." "$corpus/"
  else
    echo "   (no seed corpus at fuzz/corpus/seed_$target/)"
  fi
  marker="$(mktemp)"
  log="$logs/$target.log"
  echo "== fuzzing $target for ${seconds}s (log: fuzz/artifacts/logs/$target.log)"
  status=0
  cargo fuzz run "${build_flags[@]}" "$target" "$corpus" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" >"$log" 2>&1 || status=$?

  done_line="$(grep -a -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 || true)"
  executed="$(grep -a -E '^stat::number_of_executed_units:' "$log" | awk '{print $2}' | tail -n 1 || true)"
  mapfile -t crashes < <(find "$artifacts" -maxdepth 1 -type f -newer "$marker" | sort)
  rm -f "$marker"

  echo "   executions: ${executed:-unknown}"
  [[ -n "$done_line" ]] && echo "   $done_line"
  if ((${#crashes[@]} > 0)) || ((status != 0)); then
    failed=1
    echo "   FOUND: exit status $status, ${#crashes[@]} artifact(s):"
    for crash in "${crashes[@]}"; do
      echo "     fuzz/$crash"
    done
    grep -a -m 1 -A 3 -E 'panicked at|ERROR: libFuzzer' "$log" | sed 's/^/     /' || true
    summary+=("$target: ${executed:-?} executions, CRASHED (${#crashes[@]} artifact(s))")
  else
    summary+=("$target: ${executed:-?} executions, no crashes")
  fi
done

echo "== summary"
printf '   %s\n' "${summary[@]}"
exit "$failed"
