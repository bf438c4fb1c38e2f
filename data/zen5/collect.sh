#!/bin/sh
# The collection of data/zen5 (see PROVENANCE.md): every sampled config of zoo/configs.json, all layer types
# round-robin (a deterministic shuffle within each type, so a budget-limited run is a random subsample), at the
# profile's batch sizes. Resumes where a previous run stopped. Run from the crate root with a copy of the
# binary, on an otherwise idle machine:
#   cp target/debug/perfmodel /tmp/perfmodel-collect && nohup sh data/zen5/collect.sh > /tmp/collect-zen5.log 2>&1 &
set -e
BIN=${BIN:-/tmp/perfmodel-collect}
DIR=${DATA_DIR:-data}
echo "start $(date -u +%FT%TZ)"
$BIN collect --device zen5 --data-dir "$DIR" --time-budget ${BUDGET:-40m}
echo "end $(date -u +%FT%TZ)"
