#!/bin/sh
# greet.sh NAME - print a friendly greeting for NAME.
name=$1
printf 'Hello, %s\n!' $name
