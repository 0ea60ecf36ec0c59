#!/bin/sh
# naive-agent: a rule-based stand-in for an LLM agent. No model, no network, no API keys.
#
# It reads the instruction ($MAKA_INSTRUCTION), recognises a few task shapes by their
# wording and runs shell steps in the working directory, like an agent using a bash tool:
#   - "hello.txt" + "Hello, world!"     -> writes the file (solves hello-world)
#   - "count.txt" + "words"             -> wc -w (solves count-words)
#   - "orders.json" + "total"           -> sums every amount, ignoring status (wrong)
#   - anything else                     -> looks around, changes nothing
# Whatever happened, it claims completion in claim.json, so reports can show claims that
# disagree with the verifier. It also writes trajectory.json (ATIF-like) and usage.json
# with simulated token counts and cost. Only POSIX sh, coreutils, sed and awk are used.
set -u

instruction=${MAKA_INSTRUCTION:-}
if [ -z "$instruction" ] && [ -n "${MAKA_INSTRUCTION_FILE:-}" ] && [ -f "$MAKA_INSTRUCTION_FILE" ]; then
    instruction=$(cat "$MAKA_INSTRUCTION_FILE")
fi
logs=${MAKA_LOGS_DIR:-/logs/agent}
mkdir -p "$logs"
work=$(mktemp -d "${TMPDIR:-/tmp}/naive-agent.XXXXXX")
trap 'rm -rf "$work"' EXIT

step_id=0
tool_calls=0
input_tokens=0
output_tokens=0
: > "$work/steps"

# json_string: stdin -> one JSON string literal (other control characters dropped).
tab=$(printf '\t')
cr=$(printf '\r')
json_string() {
    tr -d '\000-\010\013\014\016-\037' \
        | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e "s/$tab/\\\\t/g" -e "s/$cr/\\\\r/g" \
        | awk 'BEGIN { ORS = ""; print "\"" } { if (NR > 1) print "\\n"; print } END { print "\"" }'
}

now() { date -u +%Y-%m-%dT%H:%M:%SZ; }

# add_step SOURCE MESSAGE [COMMAND OUTPUT_FILE]: append one step to the trajectory.
add_step() {
    step_id=$((step_id + 1))
    [ "$step_id" -gt 1 ] && printf ',\n' >> "$work/steps"
    {
        printf '    {"step_id": %d, "timestamp": "%s", "source": "%s", "message": %s' \
            "$step_id" "$(now)" "$1" "$(printf '%s' "$2" | json_string)"
        if [ $# -ge 4 ]; then
            # Simulated cost of one model turn: the context so far in, a short reply out.
            turn_in=$((900 + ${#instruction} / 4 + step_id * 350))
            turn_out=$((60 + ${#3} / 2))
            input_tokens=$((input_tokens + turn_in))
            output_tokens=$((output_tokens + turn_out))
            printf ', "tool_calls": [{"tool_call_id": "call_%d", "function_name": "bash", "arguments": {"command": %s}}]' \
                "$step_id" "$(printf '%s' "$3" | json_string)"
            printf ', "observation": {"results": [{"source_call_id": "call_%d", "content": %s}]}' \
                "$step_id" "$(head -c 4000 "$4" | json_string)"
            printf ', "metrics": {"prompt_tokens": %d, "completion_tokens": %d}' "$turn_in" "$turn_out"
        fi
        printf '}'
    } >> "$work/steps"
}

# run MESSAGE COMMAND: run COMMAND with sh in the working directory and record it as a step.
run() {
    tool_calls=$((tool_calls + 1))
    sh -c "$2" > "$work/out" 2>&1 < /dev/null
    status=$?
    [ "$status" -ne 0 ] && printf '[exit code %d]\n' "$status" >> "$work/out"
    add_step agent "$1" "$2" "$work/out"
}

matches() { printf '%s' "$instruction" | grep -qi -- "$1"; }

add_step user "$instruction"
run "Let me look at the working directory first." "pwd; ls -la"

if matches 'hello\.txt' && matches 'hello, world'; then
    run "The task asks for a greeting file; I will write it." "printf 'Hello, world!\\n' > hello.txt"
    run "Checking the file." "cat hello.txt"
elif matches 'count\.txt' && matches 'words'; then
    run "I need a word count; wc -w counts whitespace-separated words." "wc -w < input.txt > count.txt"
    run "Checking the result." "cat count.txt"
elif matches 'orders\.json' && matches 'total'; then
    run "Let me see the orders." "head -n 5 orders.json"
    # The plausible mistake: every amount is summed, whatever the order's status.
    run "I will add up the amounts and format them with two decimals." \
        "grep '\"amount\"' orders.json | sed 's/.*\"amount\": *\\([0-9.]*\\).*/\\1/' | awk '{ s += \$1 } END { printf \"%.2f\\n\", s }' > total.txt"
    run "Checking the total." "cat total.txt"
else
    run "Let me read the files that are here." "for f in *; do [ -f \"\$f\" ] && { echo \"== \$f\"; head -n 20 \"\$f\"; }; done"
    if [ -f greet.sh ]; then
        run "Let me try the script." "sh greet.sh Ada"
    fi
    run "Everything looks in order." "true"
fi

message="I completed the task as instructed."
add_step agent "$message"
output_tokens=$((output_tokens + 40))
# Simulated prices: 3 USD per million input tokens, 15 USD per million output tokens.
cost=$(awk -v i="$input_tokens" -v o="$output_tokens" 'BEGIN { printf "%.6f", i * 3e-6 + o * 15e-6 }')

{
    printf '{\n  "schema_version": "ATIF-v1.2",\n'
    printf '  "session_id": "naive-%s-%s",\n' "${MAKA_TASK_ID:-task}" "$$"
    printf '  "agent": {"name": "naive-agent (scripted, no model)", "version": "0.1.0", "model_name": null, '
    printf '"extra": {"simulated_usage": true}},\n'
    printf '  "steps": [\n'
    cat "$work/steps"
    printf '\n  ],\n'
    printf '  "final_metrics": {"total_prompt_tokens": %d, "total_completion_tokens": %d, "total_cost_usd": %s, "total_steps": %d}\n}\n' \
        "$input_tokens" "$output_tokens" "$cost" "$step_id"
} > "$logs/trajectory.json"

printf '{"input_tokens": %d, "output_tokens": %d, "cost_usd": %s}\n' \
    "$input_tokens" "$output_tokens" "$cost" > "$logs/usage.json"

printf '{"status": "complete", "message": %s, "tool_calls": %d}\n' \
    "$(printf '%s' "$message" | json_string)" "$tool_calls" > "$logs/claim.json"

echo "naive-agent: $tool_calls tool calls; claimed completion"
exit 0
