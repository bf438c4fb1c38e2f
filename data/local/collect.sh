#!/bin/sh
# The collection of data/local (see PROVENANCE.md). Every phase resumes where a previous run stopped, so the
# script can simply be rerun after an interruption. Run from the crate root with a copy of the binary, so that
# a rebuild during the collection does not swap the executable mid-run, on an otherwise idle machine:
#   cp target/debug/perfmodel /tmp/perfmodel-collect && nohup sh data/local/collect.sh > /tmp/collect-local.log 2>&1 &
# DATA_DIR=DIR collects into DIR/local instead of data/local (e.g. to re-collect without touching the shipped set).
set -e
BIN=${BIN:-/tmp/perfmodel-collect}
DIR=${DATA_DIR:-data}
echo "start $(date -u +%FT%TZ)"
# 1. Dilated convolutions (a quarter of the conv2d configs; target >= 300 samples). configs-dilated.json is
#    zoo/configs.json filtered to conv2d configs with a dilation > 1 (same configs, same keys).
$BIN collect --device local --data-dir "$DIR" --configs data/local/configs-dilated.json --layers conv2d --max-samples 330 --time-budget 12m
echo "phase 1 done $(date -u +%FT%TZ)"
# 2. The layer types with accuracy targets, round-robin across types, random order within a type.
$BIN collect --device local --data-dir "$DIR" --layers conv2d,depthwise_conv2d,dense,max_pool2d,avg_pool2d --time-budget 48m
echo "phase 2 done $(date -u +%FT%TZ)"
# 3. Every other layer type (needed to estimate whole networks).
$BIN collect --device local --data-dir "$DIR" --time-budget 20m
# 4. Grouped and channel-variant convolutions (configs-grouped.json / configs-channels.json are the
#    augment:grouped / augment:channels entries of zoo/configs.json; phase 2 also reaches them, last).
$BIN collect --device local --data-dir "$DIR" --configs data/local/configs-grouped.json --layers conv2d --time-budget 10m
$BIN collect --device local --data-dir "$DIR" --configs data/local/configs-channels.json --layers conv2d --time-budget 20m

# 5. Wide and grouped-channel convolutions (configs-wide-grouped.json = the augment:wide and
#    augment:grouped_channels entries of zoo/configs.json, added in session 6).
$BIN collect --device local --data-dir "$DIR" --configs data/local/configs-wide-grouped.json --layers conv2d --time-budget 30m
echo "phase 5 done $(date -u +%FT%TZ)"

# 6. First-layer convolutions of small-image networks (configs-first-layer.json = the augment:first_layer
#    entries of zoo/configs.json, added in session 8).
$BIN collect --device local --data-dir "$DIR" --configs data/local/configs-first-layer.json --layers conv2d --time-budget 15m
echo "phase 6 done $(date -u +%FT%TZ)"
echo "end $(date -u +%FT%TZ)"
