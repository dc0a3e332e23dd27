#!/usr/bin/env bash
# The main job side by side: `kiln --json warm --backend cuda` on one file of
# COUNT specializations of the tiled GEMM (`matmul_tiled.cu` beside this
# script, the `warm_run` benchmark's kernel and specializations), for each
# binary given, each on a fresh store of its own: one cold run, then ROUNDS
# warm runs alternating the binaries. Each run starts on a quiet machine (no
# process of an earlier `kiln` still running, such as compile workers
# closing). Prints one line a run: binary (its folder's name), cold or
# warm, kiln's WALL, kernels from the store, compiled, the process's time.
#
#   bash benches/main_job/run.sh 64 7 OLD/kiln NEW/kiln
#
# SETTLE=SECONDS waits that long more before each run.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
count="$1"; rounds="$2"; shift 2
folder="$(mktemp -d)"
declare -A store
for bin in "$@"; do store[$bin]=$(mktemp -d); done
cleanup() {
  rm -rf "$folder"
  for bin in "${!store[@]}"; do rm -rf "${store[$bin]}" "${store[$bin]}.json"; done
}
trap cleanup EXIT
{
  echo "// kiln entry: matmul_tiled"
  per_tile=$(( (count + 2) / 3 ))
  tiles=(8 16 32)
  for (( index = 0; index < count; index++ )); do
    echo "// kiln specialize: TILE=${tiles[index / per_tile]} UNROLL=$(( index % per_tile + 1 ))"
  done
  echo "//"
  cat "$here/matmul_tiled.cu"
} > "$folder/gemm.cu"
quiet() {
  for _ in $(seq 100); do
    local busy=0 p
    for p in /proc/[0-9]*; do
      case "$(readlink "$p/exe" 2>/dev/null)" in */kiln) busy=1; break ;; esac
    done
    [ "$busy" = 0 ] && return
    sleep 0.05
  done
}
one() {
  local bin="$1" case="$2" s e
  quiet
  sleep "${SETTLE:-0}"
  s=$(date +%s%N)
  # The report is written to a file: read through a shell's `$(...)`, the
  # warm run was seen slower on a GPU host (BENCHMARKS.md).
  KILN_CACHE_DIR="${store[$bin]}" "$bin" --json warm --backend cuda "$folder" >"${store[$bin]}.json" 2>/dev/null
  e=$(date +%s%N)
  python3 -c 'import json,sys; b=json.load(open(sys.argv[1]))["backends"][0]; print(sys.argv[2], sys.argv[3], "wall_ms=%.2f"%(b.get("wall_seconds",0)*1e3), "from_store=%s"%b.get("from_store"), "compiled=%s"%b.get("compiled"), "process_ms=%.1f"%((int(sys.argv[5])-int(sys.argv[4]))/1e6))' "${store[$bin]}.json" "$(basename "$(dirname "$bin")")" "$case" "$s" "$e" 2>/dev/null || echo "$bin $case: no report"
}
for bin in "$@"; do one "$bin" cold; done
for _ in $(seq "$rounds"); do for bin in "$@"; do one "$bin" warm; done; done
