#!/usr/bin/env bash
# Builds the threaded tests under ThreadSanitizer into ${TSAN_BUILD_DIR:-build-tsan} (Release, which compiles faster
# than with debug info; CUDA off; only the test files the filter reads, CMakeLists.txt) and runs the thread pool's
# tests, engine tests that replay and dispatch on a pool of several threads, the serving scheduler's thread handing
# tokens to its streams, and the HTTP server (io threads, work pool, the scheduler's notifications posted to
# connections). Exits non-zero on any report.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${TSAN_BUILD_DIR:-build-tsan}
bash scripts/install_deps.sh
export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}  # as scripts/build.sh
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DTRACELM_WERROR=ON -DTRACELM_TSAN=ON \
  -DTRACELM_CUDA=OFF >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" --target tracelm_tests
# The two longest replay tests are left to the other stages: their threads do what the shorter ones' do.
FILTER='Pool*:PoolOversubscribed.*:GraphBarriers.*:Replay.*:BatchBuckets.*:QuantBackend.*:Scheduler.CancelledRequestsFreeTheirBlocks:Scheduler.StopIds*:Scheduler.OnUpdateTellsWhenTokensAreReady:Scheduler.PreemptingASequenceOnlyTheSchedulerHoldsRequeuesIt:SchedulerFaults.*:HttpServer*-Replay.EqualsEagerThreeSequencesBf16:Replay.EqualsEagerOneSequence300StepsF32'
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
  "$BUILD_DIR"/tracelm_tests --gtest_filter="$FILTER"
