#!/usr/bin/env bash
# Builds the tests under ThreadSanitizer into ${TSAN_BUILD_DIR:-build-tsan} (Release, which compiles faster than
# with debug info; CUDA off) and runs the thread pool's tests, engine tests that replay and dispatch on a pool of
# several threads, the serving scheduler's thread handing tokens to its streams, and the HTTP server (io threads, work
# pool, the scheduler's notifications posted to connections). Exits non-zero on any report.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${TSAN_BUILD_DIR:-build-tsan}
bash scripts/install_deps.sh
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DTRACELM_WERROR=ON -DTRACELM_TSAN=ON \
  -DTRACELM_CUDA=OFF >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" --target tracelm_tests
FILTER='Pool*:PoolOversubscribed.*:GraphBarriers.*:Replay.*:BatchBuckets.*:QuantBackend.*:Scheduler.CancelledRequestsFreeTheirBlocks:Scheduler.StopIds*:Scheduler.OnUpdateTellsWhenTokensAreReady:Scheduler.PreemptingASequenceOnlyTheSchedulerHoldsRequeuesIt:SchedulerFaults.*:HttpServer*'
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
  "$BUILD_DIR"/tracelm_tests --gtest_filter="$FILTER"
