#!/bin/sh
set -eu
mkdir -p "$HOME/.maka-app"
printf 'greeting = hello\n' > "$HOME/.maka-app/app.conf"
