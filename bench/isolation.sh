#!/usr/bin/env bash
# bench/isolation.sh: the isolation scenarios of issue 8 alone (see
# bench/isolation.py): a victim's lateness at the receiver next to the same
# run's baseline.  BENCH_ISO_SECONDS sets the victim's run (default 10 s);
# BENCH_ISO_ONLY=c,d runs the baseline and those scenarios only.
export BENCH_PHASES=${BENCH_PHASES:-isolation}
exec "$(dirname "$0")/dispatcher.sh" "$@"
