#include "backends/cpu/cpu_backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "backends/cpu/kernels/cpu_features.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/ops/op_support.h"
#include "backends/cpu/paged_attention.h"
#include "runtime/op_checks.h"

namespace tracelm::cpu {

CpuBackend::CpuBackend(int threads) : pool_(threads) {
    // Every pool thread makes its kernel scratch now (item t runs on thread t), so that no thread's first use of
    // it, in a replay perhaps, allocates.
    struct NoArgs {};
    submit(+[](const NoArgs&, int64_t, int64_t) { reserve_thread_scratch(); }, NoArgs{}, Footprint{}, pool_.size());
}

const BackendCapabilities& CpuBackend::static_capabilities() {
    // The portable products of the repacked types are a slow reference; the SIMD ones outrun GGML's order on most
    // types (up to 1.7x on AVX2, about 3x with AVX-512 VNNI; docs/performance.md).
    static const BackendCapabilities caps{checks::all_weight_types(), {DType::F32, DType::F16}, kMaxHeadDim,
                                          active_isa() != Isa::Portable, /*moe=*/true};
    return caps;
}

CpuBackend::~CpuBackend() {
    for (auto& b : buffers_) munmap(b->map_base, b->map_bytes);
}

void CpuBackend::dispatch(const CpuOp* ops, size_t n) {
    const auto t0 = std::chrono::steady_clock::now();
    pool_.run(ops, n);
    busy_ns_ += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
    ops_executed_ += n;
}

// ---- memory ----

// Decode reads every weight once per token, as a few long streams. On 4 KiB pages such a stream takes a TLB
// miss and page walk every 4 KiB; on 2 MiB pages it does not, which made qwen3-0.6b bf16 decode about a tenth
// faster here. So a buffer of at least one huge page starts on a huge-page boundary (the mapping is one huge
// page longer, to have room to align) and asks for transparent huge pages. It is only advice: where THP is
// off, the buffer works the same on small pages.
constexpr size_t kHugePage = size_t{2} << 20;

Buffer* CpuBackend::do_alloc(size_t bytes, const std::string& name) {
    const size_t size = bytes == 0 ? 1 : bytes;
    const bool huge = size >= kHugePage;
    const size_t mapped = huge ? size + kHugePage : size;
    void* base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        throw std::runtime_error("cpu backend: cannot allocate " + std::to_string(bytes) + " bytes for '" + name + "'");
    }
    auto b = std::make_unique<CpuBuffer>();
    b->map_base = base;
    b->map_bytes = mapped;
    auto* data = static_cast<unsigned char*>(base);
    if (huge) {
        data += (kHugePage - reinterpret_cast<uintptr_t>(base) % kHugePage) % kHugePage;
        madvise(data, size, MADV_HUGEPAGE);
    }
    b->data = data;
    b->bytes = size;
    b->name = name;
    buffers_.push_back(std::move(b));
    return buffers_.back().get();
}

void CpuBackend::do_free(Buffer* b) {
    auto it = std::find_if(buffers_.begin(), buffers_.end(), [&](const auto& p) { return p.get() == b; });
    if (it == buffers_.end()) throw std::invalid_argument("cpu backend: free of unknown buffer");
    munmap((*it)->map_base, (*it)->map_bytes);
    buffers_.erase(it);
}

void CpuBackend::do_upload(const Tensor& dst, const void* src) { std::memcpy(dst.raw(), src, dst.nbytes()); }

void CpuBackend::do_download(const Tensor& src, void* dst) { std::memcpy(dst, src.raw(), src.nbytes()); }

// ---- graphs ----

void CpuBackend::do_begin_capture() {
    recording_.clear();
    phase_.clear();
}

GraphId CpuBackend::do_end_capture() {
    graphs_.push_back(std::move(recording_));
    recording_ = {};
    return static_cast<GraphId>(graphs_.size() - 1);
}

void CpuBackend::do_replay(GraphId g) {
    if (g < 0 || static_cast<size_t>(g) >= graphs_.size()) throw std::invalid_argument("replay of unknown graph");
    const auto& ops = graphs_[static_cast<size_t>(g)];
    dispatch(ops.data(), ops.size());
}

size_t CpuBackend::graph_barriers(GraphId g) const {
    const auto& ops = graphs_.at(static_cast<size_t>(g));
    // The last op always ends with one (it signals completion).
    return ops.empty() ? 0
                       : 1 + static_cast<size_t>(std::count_if(ops.begin(), ops.end() - 1,
                                                                [](const CpuOp& op) { return op.barrier; }));
}

void CpuBackend::do_destroy_graph(GraphId g) {
    if (g < 0 || static_cast<size_t>(g) >= graphs_.size()) throw std::invalid_argument("destroy of unknown graph");
    graphs_[static_cast<size_t>(g)] = {};
}

// A scratch buffer is found or made at submission, so that no eager call and no replay allocates. It only grows:
// a recorded graph keeps pointing at the buffer it was recorded with, so a larger need makes a new buffer (twice
// the largest of that name, to bound their number) and the old ones live as long as the backend. Being internal,
// it is made even inside a capture, where user allocations are refused.
Buffer* CpuBackend::scratch_buffer(const char* name, size_t need) {
    size_t largest = 0;
    for (const auto& b : buffers_) {
        if (b->name != name) continue;
        largest = std::max(largest, b->bytes);
        if (b->bytes >= need) return b.get();
    }
    return do_alloc(std::max(need, 2 * largest), name);
}

}  // namespace tracelm::cpu
