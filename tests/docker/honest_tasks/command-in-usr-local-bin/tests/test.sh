#!/bin/sh
mkdir -p /logs/verifier
out=$(cd /tmp && maka-greet 2>&1)
echo "maka-greet printed: $out"
if [ "$out" = "hello, maka" ] && [ "$(command -v maka-greet)" = /usr/local/bin/maka-greet ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
