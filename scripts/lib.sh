# shellcheck shell=bash
# Sourced, not run: what .ci/run, scripts/test, scripts/soak, scripts/serve-cgroup, scripts/load,
# scripts/kernel-v2 and scripts/cross share.
#
# A CI stage that cannot do its work fails (issue 39). The one way out is explicit and named:
#
#   STATELM_CI_OPT_OUT=soak,serve-cgroup,cross-aarch64-apple-ios-sim bash .ci/run
#
# a comma-separated list of the stages (or parts of one) that may be skipped when they cannot do
# their work. The names: soak, serve-cgroup (no root or no writable memory cgroup here),
# kernel-v2 (no root, or qemu or the kernel package cannot be had), and
# cross-TARGET for a phone library of scripts/cross whose rustup TARGET cannot be installed
# (aarch64-apple-ios, aarch64-apple-ios-sim, aarch64-apple-darwin, aarch64-linux-android), and
# aar-jnilibs for scripts/mobile's Android .so files when no Android NDK is there (.ci/run sets
# it: this machine has none). A
# script that skips something by opt-out says so, exits 0 and appends the name to the file
# named by STATELM_CI_SKIPPED when that is set: .ci/run sets it, empties it before each stage
# and reports the stage as "skipped by opt-out (STATELM_CI_OPT_OUT)" (or, for a part, after
# "ran, passed"). Nothing else can be skipped.
#
# STATELM_CGROUP_FS (default /sys/fs/cgroup) is where memory_cgroup looks for the cgroup
# filesystems: v1's memory hierarchy at $STATELM_CGROUP_FS/memory, v2 roots at
# $STATELM_CGROUP_FS and $STATELM_CGROUP_FS/unified.

# The cargo profile of the phone libraries scripts/cross builds and scripts/mobile packs: release
# (what an app ships) unless STATELM_LIB_PROFILE names another. CI sets `slice` (Cargo.toml:
# release without optimization or debug info): it checks the libraries' symbols and layout, not
# their speed, which scripts/cross's aarch64 Linux steps test on optimized code.
LIB_PROFILE=${STATELM_LIB_PROFILE:-release}

# test_build: the workspace's test build, `cargo test --workspace --no-run` (a no-op after
# `bash scripts/test`), whose binaries the scripts run: target/debug/statelm and the examples in
# target/debug/examples. Building the CLI alone (`cargo build -p statelm-cli`) resolves
# dependency features other than the whole workspace's tests do, so about 60 crates (tokio, axum,
# llguidance, every statelm crate) were built a second time: ~5 minutes of a 2-core CI host.
test_build() {
  local log rc=0
  log=$(mktemp /tmp/statelm-build.XXXXXX)
  cargo test --quiet --workspace --no-run 2>"$log" || rc=$?
  [ "$rc" -eq 0 ] || cat "$log" >&2
  rm -f "$log"
  return "$rc"
}

# pull_models: both real models and the tokenizer files, sha256-checked, into $STATELM_CACHE
# (default ~/.cache/statelm) with the test build's statelm (`statelm pull --all`; what is there
# already is kept).
pull_models() {
  test_build
  "${CARGO_TARGET_DIR:-target}/debug/statelm" pull --all --quiet
}

# opted_out NAME: does STATELM_CI_OPT_OUT name NAME?
opted_out() {
  local list=",${STATELM_CI_OPT_OUT:-},"
  list=${list//[[:space:]]/}
  [[ $list == *",$1,"* ]]
}

# record_opt_out NAME WHY: says that NAME was skipped by opt-out, and why, and tells .ci/run.
record_opt_out() {
  printf '%s\n' "$1: SKIPPED by opt-out (STATELM_CI_OPT_OUT names $1): $2" >&2
  if [ -n "${STATELM_CI_SKIPPED:-}" ]; then printf '%s\n' "$1" >>"$STATELM_CI_SKIPPED"; fi
}

# memory_cgroup: finds a memory cgroup this process can create children in (as root; the memory
# controller already enabled for children on v2, never changed here) and proves it by creating
# and removing one. Sets CG_KIND (v1|v2) and CG_PARENT and returns 0, or returns 1 with CG_WHY
# saying why not: not root, no memory controller, or the cgroup not writable.
memory_cgroup() {
  local fs=${STATELM_CGROUP_FS:-/sys/fs/cgroup} found="" root probe
  CG_KIND="" CG_PARENT="" CG_WHY=""
  if [ "$(id -u)" != 0 ]; then
    CG_WHY="not running as root (uid $(id -u))"
    return 1
  fi
  if [ -f "$fs/memory/memory.limit_in_bytes" ]; then
    found="$fs/memory (v1)"
    if [ -w "$fs/memory" ]; then CG_KIND=v1 CG_PARENT=$fs/memory; fi
  fi
  if [ -z "$CG_KIND" ]; then
    for root in "$fs" "$fs/unified"; do
      if [ -f "$root/cgroup.subtree_control" ] && grep -qw memory "$root/cgroup.subtree_control"; then
        found="$found${found:+, }$root (v2)"
        if [ -w "$root" ]; then
          CG_KIND=v2 CG_PARENT=$root
          break
        fi
      fi
    done
  fi
  if [ -z "$CG_KIND" ]; then
    if [ -z "$found" ]; then
      CG_WHY="no memory controller: neither a v1 memory hierarchy at $fs/memory nor a v2 root"
      CG_WHY+=" ($fs, $fs/unified) with memory in its cgroup.subtree_control"
    else
      CG_WHY="memory cgroup not writable: $found"
    fi
    return 1
  fi
  probe="$CG_PARENT/statelm-probe-$$"
  if ! mkdir "$probe" 2>/dev/null; then
    CG_WHY="memory cgroup not writable: cannot create a cgroup under $CG_PARENT ($CG_KIND)"
    CG_KIND="" CG_PARENT=""
    return 1
  fi
  rmdir "$probe" 2>/dev/null || true
  return 0
}

# The warm-up request of the served scenarios (serve-cgroup, kernel-v2): one short chat, its
# session left in the pool; scripts/serve_driver.py resends it after the closing round.
WARM_BODY='{"model": "statelm", "max_tokens": 4, "temperature": 0, "messages": [{"role": "user", "content": "Say hi."}]}'

# check DESCRIPTION COMMAND...: runs COMMAND, says "ok" or "FAIL" (through the script's `say`)
# and sets FAILED=1 on a failure.
check() { if "${@:2}"; then say "  ok   $1"; else say "  FAIL $1"; FAILED=1; fi; }
