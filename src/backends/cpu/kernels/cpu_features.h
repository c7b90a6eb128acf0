// What the CPU (and the OS, which must save the wider register state) lets the kernels use, and which
// kernel implementation is chosen.
#pragma once

namespace tracelm::cpu {

// A feature reads as absent when the OS does not save the register state it needs (YMM for AVX*,
// opmask/ZMM for AVX-512), since using it would then corrupt state across context switches.
struct CpuFeatures {
    bool avx2 = false;
    bool fma = false;
    bool f16c = false;
    bool avx512f = false;
    bool avx512bw = false;
    bool avx512vl = false;
    bool avx512dq = false;
    bool avx512_bf16 = false;
    bool avx512_vnni = false;
};

const CpuFeatures& cpu_features();

// Kernel implementations, each needing a superset of the one before.
enum class Isa { Portable, Avx2, Avx512 };

// The widest implementation this machine can run.
Isa best_isa();
// best_isa(), or TRACELM_ISA=portable|avx2|avx512 clamped to best_isa(); read once.
Isa active_isa();
const char* isa_name(Isa isa);

}  // namespace tracelm::cpu
