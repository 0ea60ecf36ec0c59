#!/bin/sh
# Copy the .txt files of /app/data to /app/backup.
cp /app/data/*.text /app/backup/
