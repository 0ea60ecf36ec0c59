#!/bin/sh
# Verifier for hello-world: /app/hello.txt must hold exactly "Hello, world!",
# optionally followed by one newline.
mkdir -p /logs/verifier
target=/app/hello.txt
tmp=$(mktemp -d)
printf 'Hello, world!' > "$tmp/bare"
printf 'Hello, world!\n' > "$tmp/newline"
reward=0

if [ ! -f "$target" ]; then
    echo "FAIL: $target does not exist (or is not a regular file)"
elif cmp -s "$target" "$tmp/bare" || cmp -s "$target" "$tmp/newline"; then
    echo "PASS: $target contains exactly 'Hello, world!'"
    reward=1
else
    echo "FAIL: $target has unexpected content; its first bytes are:"
    head -c 64 "$target" | od -An -c
    echo "expected:"
    od -An -c "$tmp/newline"
fi

rm -rf "$tmp"
echo "$reward" > /logs/verifier/reward.txt
echo "reward=$reward"
