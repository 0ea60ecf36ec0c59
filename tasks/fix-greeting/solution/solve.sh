#!/bin/sh
# Reference solution for fix-greeting: quote the name and put "!" before the newline.
set -eu
cat > /app/greet.sh <<'SCRIPT'
#!/bin/sh
# greet.sh NAME - print a friendly greeting for NAME.
name=$1
printf 'Hello, %s!\n' "$name"
SCRIPT
