#!/bin/sh
# Recomputes the expected total from a copy of the data kept with the tests (the subject
# could have edited /app/sales.csv), then writes the reward last.
expected=$(python3 /tests/total.py /tests/sales.csv) || expected=""
got=$(cat /app/total.txt 2>/dev/null | tr -d '[:space:]')
echo "expected=$expected got=$got"
if [ -n "$expected" ] && [ "$got" = "$expected" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
