// The CPU backend's buffers.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "backends/cpu/cpu_backend.h"

namespace tracelm {
namespace {

// Weight-sized buffers start on a 2 MiB boundary (where transparent huge pages can back them) and are usable
// to their last byte; small ones are unaffected. Both are given back.
TEST(CpuMemory, LargeBuffersAreHugePageAligned) {
    cpu::CpuBackend be(1);
    constexpr size_t kHuge = size_t{2} << 20;
    for (const size_t bytes : {kHuge, 3 * kHuge + 4096 + 7}) {
        Buffer* b = be.alloc(bytes, "weights");
        EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data) % kHuge, 0u) << bytes;
        EXPECT_EQ(b->bytes, bytes);
        std::memset(b->data, 0x5a, bytes);
        EXPECT_EQ(static_cast<unsigned char*>(b->data)[bytes - 1], 0x5a);
        be.free(b);
    }
    Buffer* small = be.alloc(100, "norm");
    std::memset(small->data, 1, 100);
    be.free(small);
}

}  // namespace
}  // namespace tracelm
