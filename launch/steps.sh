# Sourced by launch/gpu-speed and launch/gpu-pretrain: steps under one time budget, for a device
# lease that is counted in minutes. The script sets budget (seconds), start ($SECONDS at its start),
# slow (a factor on every cap: compiling on a CPU takes minutes), log and steps (a TSV file).
#
# step NAME CAP COMMAND...: run COMMAND for at most CAP seconds and what is left of the budget; its
# output to the log; a line "NAME<TAB>status<TAB>seconds" to $steps. A step that would start with
# under a minute left is skipped. At the limit `timeout` sends SIGTERM (a training run checkpoints
# on it; gpu-check ends its launches with their ranks, sessions of their own), SIGKILL 20 s later.
step() {
  local name="$1" cap=$(($2 * slow)) left=$((budget - (SECONDS - start))) began=$SECONDS code=0 status=ok me="${0##*/}"
  shift 2
  if [ "$left" -lt 60 ]; then
    printf '%s\tskipped: %s s of the budget left\t0\n' "$name" "$left" >>"$steps"
    echo "[$me] $name: skipped, $left s of the budget left" | tee -a "$log"; return
  fi
  [ "$cap" -le "$left" ] || cap=$left
  echo "[$me] $name (at most $cap s)" | tee -a "$log"
  echo "\$ $*" >>"$log"
  timeout --kill-after=20 "$cap" "$@" >>"$log" 2>&1 || code=$?
  case "$code" in
    0) ;;
    124 | 137) status="timed out after $cap s" ;;
    *) status="failed (exit $code)" ;;
  esac
  printf '%s\t%s\t%s\n' "$name" "$status" $((SECONDS - began)) >>"$steps"
  echo "[$me] $name: $status in $((SECONDS - began)) s" | tee -a "$log"
}
