#!/bin/sh
# Reference solution for count-words.
set -eu
wc -w < /app/input.txt | tr -d ' ' > /app/count.txt
