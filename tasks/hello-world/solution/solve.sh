#!/bin/sh
# Reference solution for hello-world.
set -eu
printf 'Hello, world!\n' > /app/hello.txt
