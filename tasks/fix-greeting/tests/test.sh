#!/bin/sh
# Verifier for fix-greeting: `sh /app/greet.sh NAME` must print exactly "Hello, NAME!\n"
# and exit 0, for several names (one with a space, one with shell-special characters).
mkdir -p /logs/verifier
script=/app/greet.sh
tmp=$(mktemp -d)
passed=0
total=0

check() {
    total=$((total + 1))
    printf 'Hello, %s!\n' "$1" > "$tmp/expected"
    # Run from another directory with no stdin, under a time limit.
    (cd "$tmp" && timeout 5 sh "$script" "$1" < /dev/null > "$tmp/actual" 2> "$tmp/stderr")
    status=$?
    if [ "$status" -eq 0 ] && cmp -s "$tmp/expected" "$tmp/actual"; then
        passed=$((passed + 1))
        echo "PASS: name '$1'"
    else
        echo "FAIL: name '$1' (exit $status); expected:"
        awk '{ print "    | " $0 }' "$tmp/expected"
        echo "  got:"
        head -n 10 "$tmp/actual" | awk '{ print "    | " $0 }'
        if [ -s "$tmp/stderr" ]; then
            echo "  stderr:"
            head -n 10 "$tmp/stderr" | awk '{ print "    | " $0 }'
        fi
    fi
}

if [ ! -f "$script" ]; then
    echo "FAIL: $script does not exist"
else
    check "Ada"
    check "Grace Hopper"
    check "Jean-Luc  Picard"
    check "O'Brien"
    check '100% *Bob*'
fi

rm -rf "$tmp"
reward=0
if [ "$total" -gt 0 ] && [ "$passed" -eq "$total" ]; then
    reward=1
fi
echo "$passed/$total names greeted correctly"
echo "$reward" > /logs/verifier/reward.txt
echo "reward=$reward"
