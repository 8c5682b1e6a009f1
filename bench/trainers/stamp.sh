#!/bin/bash
# The dispatch benchmark's trainer: appends "start TIME NAME" as its first act and
# "end TIME NAME" as its last, TIME being bash's own $EPOCHREALTIME (a builtin: no process
# is started to read the clock), NAME the job's TRAINING_JOB_NAME (or $3). Between the two
# it runs for HOLD seconds (default 0), like a job that trains for a while.
# Chosen for the cheapest start that can stamp: bash is up in ~1-2 ms, `python3 -S -I`
# in ~10 ms, which would count as trainq's.
# usage: stamp.sh FILE [HOLD [NAME]]
printf 'start %s %s\n' "$EPOCHREALTIME" "${3:-$TRAINING_JOB_NAME}" >>"$1"
if [ "${2:-0}" != 0 ]; then
    /bin/sleep "$2"
fi
printf 'end %s %s\n' "$EPOCHREALTIME" "${3:-$TRAINING_JOB_NAME}" >>"$1"
