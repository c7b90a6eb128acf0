// CpuBackend::submit, shared by every file that defines CpuBackend ops (cpu_backend.cpp, ops/*.cpp).
#pragma once

#include <cstring>
#include <type_traits>

#include "backends/cpu/cpu_backend.h"

namespace tracelm::cpu {

template <typename Args>
void CpuBackend::submit(void (*fn)(const Args&, int64_t, int64_t), const Args& args, const Footprint& fp,
                        int64_t items, int64_t grain, int64_t chunk) {
    static_assert(sizeof(Args) + sizeof(fn) <= CpuOp::kArgBytes, "op arguments too large");
    static_assert(std::is_trivially_copyable_v<Args>);
    CpuOp op;
    // Type erasure without casting function types: the packed bytes hold the typed entry point
    // followed by its arguments, and one trampoline per Args type unpacks them.
    op.fn = [](const void* packed, int64_t b, int64_t e) {
        void (*typed)(const Args&, int64_t, int64_t);
        Args a;
        std::memcpy(&typed, packed, sizeof(typed));
        std::memcpy(&a, static_cast<const unsigned char*>(packed) + sizeof(typed), sizeof(Args));
        typed(a, b, e);
    };
    op.items = items;
    op.grain = grain < 1 ? 1 : grain;
    op.chunk = chunk;
    std::memcpy(op.args, &fn, sizeof(fn));
    std::memcpy(op.args + sizeof(fn), &args, sizeof(Args));
    if (capturing()) {
        if (!recording_.empty() && phase_.admits(fp)) {
            recording_.back().barrier = false;
        } else {
            phase_.clear();
        }
        phase_.add(fp);
        recording_.push_back(op);
    } else {
        dispatch(&op, 1);
    }
}

}  // namespace tracelm::cpu
