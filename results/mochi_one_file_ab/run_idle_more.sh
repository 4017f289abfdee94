#!/bin/bash
# Rounds 6 to 10, MoCHi only (after rounds 1 to 5 left its 1.7% unresolved), into run_idle.sh's folder.
ROUNDS="6 7 8 9 10" STRATEGIES=mochi LOSS_RUNS="" exec "$(dirname "$0")/run_idle.sh"
