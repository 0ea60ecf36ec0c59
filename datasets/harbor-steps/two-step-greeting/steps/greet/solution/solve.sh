#!/bin/bash
sed "s/NAME/$(cat /app/name.txt)/" /app/template.txt > /app/greeting.txt
