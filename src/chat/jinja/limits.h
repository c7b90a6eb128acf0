// Bounds on one template and one render. Chat templates come with model files and requests, so they are
// untrusted: each limit ends a hostile template with an Error of kind Limit in bounded time and memory, far
// above what real chat templates need (docs/security.md).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tracelm::jinja {

struct Limits {
    size_t max_template_bytes = size_t{1} << 20;    // the source text (real templates: under 20 KB)
    int max_nesting = 64;                           // nested blocks, and nested expressions, while parsing
    int max_call_depth = 64;                        // macro calls within macro calls
    uint64_t max_loop_iterations = 1'000'000;       // all loop iterations of one render
    uint64_t max_steps = 20'000'000;                // expressions and statements evaluated, plus bytes scanned / 256
    size_t max_output_bytes = size_t{16} << 20;     // the rendered text
    size_t max_allocated_bytes = size_t{256} << 20;  // every string and container built in one render, summed
};

}  // namespace tracelm::jinja
