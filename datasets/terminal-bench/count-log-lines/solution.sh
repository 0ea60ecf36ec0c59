#!/bin/bash
cat /app/logs/*.log | wc -l > /app/line_count.txt
