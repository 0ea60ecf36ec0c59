#!/bin/sh
# Verifier for count-words. The expected count is recomputed with awk from the pristine
# copy of input.txt shipped with the tests (the agent could have edited /app/input.txt).
mkdir -p /logs/verifier
reward=0
expected=$(awk '{ n += NF } END { print n + 0 }' /tests/input.txt)
echo "expected word count (awk over /tests/input.txt): $expected"

if [ ! -f /app/count.txt ]; then
    echo "FAIL: /app/count.txt does not exist"
else
    # Accept the number with surrounding whitespace only ("7 5" stays "7 5", not "75").
    got=$(tr -s ' \t\r\n' ' ' < /app/count.txt | sed 's/^ //; s/ $//')
    printf "found in /app/count.txt: '%s'\n" "$got"
    if [ "$got" = "$expected" ]; then
        echo "PASS: the count is correct"
        reward=1
    else
        echo "FAIL: expected exactly '$expected'"
    fi
fi

if ! cmp -s /tests/input.txt /app/input.txt; then
    echo "note: /app/input.txt was modified (the pristine copy was used for grading)"
fi
echo "$reward" > /logs/verifier/reward.txt
echo "reward=$reward"
