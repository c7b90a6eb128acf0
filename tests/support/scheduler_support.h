// Helpers of the scheduler's tests: reading a stream to its end, and what a request gives on an engine of its own.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "serve/scheduler.h"

namespace tracelm::testing {

struct Outcome {
    std::vector<int32_t> tokens;
    serve::Finish finish = serve::Finish::None;
    std::string error;  // with Finish::Error
};

// Reads a stream to its end (bounded: a stuck scheduler fails the test instead of hanging it).
inline Outcome drain(serve::Stream& s) {
    Outcome o;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (o.finish == serve::Finish::None && std::chrono::steady_clock::now() < deadline) {
        serve::StreamUpdate u = s.next(std::chrono::milliseconds(200));
        o.tokens.insert(o.tokens.end(), u.tokens.begin(), u.tokens.end());
        o.finish = u.finish;
        o.error = u.error;
    }
    return o;
}

// The tokens a request gives on an engine of its own, one sequence: first token, then one per step until
// max_new_tokens or a stop id.
inline std::vector<int32_t> alone(const Model& model, Backend& be, const serve::GenerationRequest& r, int64_t context) {
    EngineOptions opt;
    opt.context = context;
    Engine e(model, be, opt);
    std::vector<int32_t> out = e.start({r.prompt}, r.max_new_tokens, {r.params});
    auto stopped = [&] { return std::find(r.stop_ids.begin(), r.stop_ids.end(), out.back()) != r.stop_ids.end(); };
    while (!stopped() && static_cast<int>(out.size()) < r.max_new_tokens) {
        e.step();
        out.push_back(e.sampled()[0]);
    }
    if (stopped()) out.pop_back();
    return out;
}

inline std::vector<int32_t> prompt_of(int i, int len) {
    std::vector<int32_t> p;
    for (int j = 0; j < len; ++j) p.push_back(static_cast<int32_t>((i * 7919 + j * 104729) % 30000 + 100));
    return p;
}

// Waits (up to a minute) until the scheduler's published stats satisfy `done`; returns whether they did.
inline bool wait_for_stats(const serve::Scheduler& s, const std::function<bool(const serve::SchedulerStats&)>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
        if (done(s.stats())) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return done(s.stats());
}

}  // namespace tracelm::testing
