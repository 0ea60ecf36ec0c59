#!/bin/bash
echo Harbor > /app/name.txt
