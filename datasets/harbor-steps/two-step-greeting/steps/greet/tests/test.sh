#!/bin/bash
. /tests/common.sh
# setup.sh ran (and removed itself); the name from step 1 is still there.
if [ "$(cat /app/.step 2>/dev/null)" != greet ] || [ -e /app/setup.sh ]; then echo 0 > /logs/verifier/reward.txt; exit 0; fi
reward "$(cat /app/greeting.txt 2>/dev/null)" "Hello, Harbor!"
