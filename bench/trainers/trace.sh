#!/bin/bash
# The trace benchmark's trainer: works (sleeps) for SECONDS in all, resuming where an
# earlier attempt stopped. It stamps its start, and its end ("end": the work is done;
# "stop": it was stopped, e.g. preempted) into DIR/NAME, with bash's own $EPOCHREALTIME.
# Under trainq, SIGTERM saves the work done so far (microseconds) in the ml root's
# checkpoints/, where the next attempt reads it, as a real trainer saves a checkpoint.
# usage: trace.sh DIR SECONDS NAME
dir=$1 name=$3
micros() { local t=${EPOCHREALTIME/[.,]/}; echo $((10#$t)); }
total=$(($(printf '%.0f' "${2}e6")))
saved=${SAGEMAKER_BASE_DIR:+$SAGEMAKER_BASE_DIR/checkpoints/done}
done_us=0
if [ -n "$saved" ] && [ -s "$saved" ]; then read -r done_us <"$saved"; fi
began=$(micros)
printf 'start %s\n' "$began" >>"$dir/$name"

stopped() {
    local now
    now=$(micros)
    [ -n "$saved" ] && echo $((done_us + now - began)) >"$saved"
    printf 'stop %s\n' "$now" >>"$dir/$name"
    kill "$sleeper" 2>/dev/null
    exit 143
}
trap stopped TERM

left=$((total - done_us))
if [ "$left" -gt 0 ]; then
    /bin/sleep "$((left / 1000000)).$(printf '%06d' $((left % 1000000)))" &
    sleeper=$!
    wait "$sleeper"
fi
printf 'end %s\n' "$(micros)" >>"$dir/$name"
