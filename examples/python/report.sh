#!/usr/bin/env bash
# report.sh: a command trainable in plain bash, speaking rayd's report wire over /dev/tcp
# (docs/command-trainables.md). No client library, no jq.
#
# Reports {"score": i, "step": i} for i = 1..steps over one connection, each with a checkpoint
# directory holding a `step` file; resumed (RAYD_CHECKPOINT_DIR set), it goes on after the
# checkpoint's step. Config keys (optional): steps (5), sleep_s (0: seconds between reports).
#
#   trainable: {command: [python/report.sh], launcher: none}   # in a YAML file in examples/
#
# Run by hand (RAYD_REPORT_ADDR unset), it prints each request instead of sending it.
set -euo pipefail

# A number from the flat JSON config, or the default: `config_number KEY DEFAULT`.
config_number() {
  local value=""
  if [[ -n "${RAYD_CONFIG_FILE:-}" && -r "$RAYD_CONFIG_FILE" ]]; then
    value=$(grep -o "\"$1\"[[:space:]]*:[[:space:]]*[0-9.]*" "$RAYD_CONFIG_FILE" | head -n 1 |
      sed 's/.*:[[:space:]]*//') || true
  fi
  echo "${value:-$2}"
}

# A string escaped for a JSON string literal (backslashes and quotes; paths hold nothing else).
json_escape() {
  local s=${1//\\/\\\\}
  echo "${s//\"/\\\"}"
}

steps=$(config_number steps 5)
sleep_s=$(config_number sleep_s 0)
start=1
if [[ -n "${RAYD_CHECKPOINT_DIR:-}" ]]; then
  start=$(( $(cat "$RAYD_CHECKPOINT_DIR/step") + 1 ))
  echo "resumed from step $((start - 1))"
fi

if [[ -n "${RAYD_REPORT_ADDR:-}" ]]; then
  exec 3<>"/dev/tcp/${RAYD_REPORT_ADDR%:*}/${RAYD_REPORT_ADDR##*:}"
fi

checkpoint=""
trap 'rm -rf "$checkpoint"' EXIT  # the last one, also when a report fails

for (( i = start; i <= steps; i++ )); do
  checkpoint=$(mktemp -d "${TMPDIR:-/tmp}/rayd_report.XXXXXX")
  echo "$i" > "$checkpoint/step"
  request=$(printf '{"token":"%s","metrics":{"score":%d,"step":%d},"checkpoint":"%s"}' \
    "${RAYD_REPORT_TOKEN:-}" "$i" "$i" "$(json_escape "$checkpoint")")
  if [[ -z "${RAYD_REPORT_ADDR:-}" ]]; then
    echo "$request"
  else
    printf '%s\n' "$request" >&3
    IFS= read -r reply <&3 || { echo "report $i: the connection closed" >&2; exit 1; }
    if ! [[ "$reply" =~ \"ok\"[[:space:]]*:[[:space:]]*true ]]; then
      echo "report $i refused: $reply" >&2
      exit 1
    fi
  fi
  rm -rf "$checkpoint"  # copied by the time the reply came
  if [[ "$sleep_s" != 0 ]]; then sleep "$sleep_s"; fi
done
