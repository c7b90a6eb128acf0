// Greedy continuations with the hash of every step's logits, as the llama.cpp golden scripts record them
// (scripts/make_gemma3_norepack_goldens.py, make_moe_llamacpp_goldens.py), so a test checks every logit bit for bit.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace tracelm::testing {

// The FNV-1a 64 hash of the logits' little-endian f32 bytes, as the golden script takes it (hex).
inline std::string logits_hash(const std::vector<float>& logits) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (float v : logits) {
        uint8_t b[4];
        std::memcpy(b, &v, 4);  // x86 is little-endian
        for (uint8_t c : b) h = (h ^ c) * 0x100000001B3ull;
    }
    char s[17];
    std::snprintf(s, sizeof(s), "%016llx", static_cast<unsigned long long>(h));
    return s;
}

struct GreedySteps {
    std::vector<int32_t> tokens;
    std::vector<std::string> hashes;  // of the logits each token was taken from
};

// The engine's greedy continuation of `prompt`, `n` tokens, and the hash of the logits of every step.
inline GreedySteps greedy_steps(Engine& engine, const std::vector<int32_t>& prompt, size_t n) {
    GreedySteps s;
    s.tokens.push_back(engine.start({prompt}, static_cast<int>(n))[0]);
    s.hashes.push_back(logits_hash(engine.logits()));
    while (s.tokens.size() < n) {
        engine.step();
        s.tokens.push_back(engine.sampled()[0]);
        s.hashes.push_back(logits_hash(engine.logits()));
    }
    engine.finish();
    return s;
}

}  // namespace tracelm::testing
