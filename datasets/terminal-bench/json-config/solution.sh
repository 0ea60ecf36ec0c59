#!/bin/bash
printf '{"name": "maka", "port": 8080}\n' > /app/config.json
