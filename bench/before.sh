#!/usr/bin/env bash
# The concurrency bench against an earlier commit (default: 568cfd3, where
# the work on performance started), for docs/benchmarks.md's "before and
# after": its results go to bench/results/before.json; then run
# bench/report.py. Usage: bench/before.sh [commit] [visitors...]
set -euo pipefail
cd "$(dirname "$0")/.."
commit=${1:-568cfd3}
shift || true
levels=${*:-100 200}
tree=$(mktemp -d)
git worktree add -q --detach "$tree" "$commit"
trap 'git worktree remove --force "$tree"' EXIT
# Today's bench, on yesterday's code (which had no chat/engine/fastjson).
cp bench/harness.py bench/relay.py bench/client.mjs bench/provider.py bench/concurrency.py bench/cpu_profile.py "$tree/bench/"
sed -i 's/^from chat.engine import fastjson$/import json as fastjson/' "$tree/bench/relay.py"
(cd "$tree/bench" && "$OLDPWD/.venv/bin/python" concurrency.py $levels --seconds 20 --name before)
mkdir -p bench/results
cp "$tree/bench/results/before.json" bench/results/before.json
