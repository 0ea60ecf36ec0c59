#!/bin/bash
echo done > /app/done.txt
