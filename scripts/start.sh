#!/usr/bin/env bash
# Sets up and builds ft, then runs the main job. Until `ft serve` and the embedded default model
# land, the main job is a greedy generation on the bundled tiny Qwen3-MoE checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
./build/ft --version
model=tests/fixtures/qwen3_moe
echo "ft run --model $model --prompt-ids 10,20,30,40 -n 16"
exec ./build/ft run --model "$model" --prompt-ids 10,20,30,40 -n 16
