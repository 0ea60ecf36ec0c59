#!/bin/sh
while IFS= read -r name; do echo "Hello, $name!"; done < /app/names.txt > /app/greetings.txt
