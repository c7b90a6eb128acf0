#include "backends/cpu/kernels/cpu_features.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace tracelm::cpu {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// Inline asm rather than _xgetbv(), which would need -mxsave for this baseline-compiled file.
uint64_t xgetbv0() {
    uint32_t lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (static_cast<uint64_t>(hi) << 32) | lo;
}

CpuFeatures detect() {
    CpuFeatures f;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool osxsave = (c >> 27) & 1u, avx = (c >> 28) & 1u;
    if (!osxsave || !avx) return f;
    const uint64_t xcr0 = xgetbv0();
    const bool ymm_state = (xcr0 & 0x6u) == 0x6u;    // SSE + AVX state
    const bool zmm_state = (xcr0 & 0xe6u) == 0xe6u;  // + opmask, ZMM_Hi256, Hi16_ZMM
    if (!ymm_state) return f;
    f.fma = (c >> 12) & 1u;
    f.f16c = (c >> 29) & 1u;

    unsigned max_leaf = __get_cpuid_max(0, nullptr);
    if (max_leaf < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned sub_leaves = a;
    f.avx2 = (b >> 5) & 1u;
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;  // sub-leaf 1
    if (sub_leaves >= 1) __cpuid_count(7, 1, a1, b1, c1, d1);
    f.avx_vnni = (a1 >> 4) & 1u;
    if (zmm_state) {
        f.avx512f = (b >> 16) & 1u;
        f.avx512dq = (b >> 17) & 1u;
        f.avx512bw = (b >> 30) & 1u;
        f.avx512vl = (b >> 31) & 1u;
        f.avx512_vnni = (c >> 11) & 1u;
        f.avx512_bf16 = (a1 >> 5) & 1u;
    }
    return f;
}
#else
CpuFeatures detect() { return {}; }
#endif

std::optional<Isa> parse_isa(std::string_view s) {
    for (Isa isa : {Isa::Portable, Isa::Avx2, Isa::AvxVnni, Isa::Avx512})
        if (s == isa_name(isa)) return isa;
    return std::nullopt;
}

Isa choose_active() {
    const Isa best = best_isa();
    const char* env = std::getenv("TRACELM_ISA");
    if (env == nullptr || *env == '\0') return best;
    const std::optional<Isa> want = parse_isa(env);
    if (!want) {
        std::fprintf(stderr, "tracelm: ignoring TRACELM_ISA=%s (expected portable, avx2, avxvnni or avx512)\n", env);
        return best;
    }
    Isa isa = static_cast<int>(*want) < static_cast<int>(best) ? *want : best;
    while (!can_run(isa)) isa = static_cast<Isa>(static_cast<int>(isa) - 1);
    return isa;
}

}  // namespace

const CpuFeatures& cpu_features() {
    static const CpuFeatures f = detect();
    return f;
}

bool can_run(Isa isa) {
    const CpuFeatures& f = cpu_features();
    const bool avx2 = f.avx2 && f.fma && f.f16c;
    switch (isa) {
        case Isa::Portable: return true;
        case Isa::Avx2: return avx2;
        case Isa::AvxVnni: return avx2 && f.avx_vnni;
        case Isa::Avx512: return avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
    }
    return false;
}

Isa best_isa() {
    for (Isa isa : {Isa::Avx512, Isa::AvxVnni, Isa::Avx2})
        if (can_run(isa)) return isa;
    return Isa::Portable;
}

Isa active_isa() {
    static const Isa isa = choose_active();
    return isa;
}

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::Portable: return "portable";
        case Isa::Avx2: return "avx2";
        case Isa::AvxVnni: return "avxvnni";
        case Isa::Avx512: return "avx512";
    }
    return "?";
}

}  // namespace tracelm::cpu
