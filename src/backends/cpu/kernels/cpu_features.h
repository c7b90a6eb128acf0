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
    bool avx_vnni = false;  // vpdpbusd on VEX-coded 128/256-bit vectors (Intel's cores since Alder Lake)
};

const CpuFeatures& cpu_features();

// Kernel implementations, from the narrowest. AvxVnni is the AVX2 one whose quantized products sum with AVX-VNNI's
// vpdpbusd (the same integers, so the same results): the int8 path of AVX2-only CPUs that have it. Avx512 does not
// need AVX-VNNI, so a CPU may run Avx512 and not AvxVnni; every other Isa needs what the ones before it need.
enum class Isa { Portable, Avx2, AvxVnni, Avx512 };

bool can_run(Isa isa);
// The widest implementation this machine can run.
Isa best_isa();
// best_isa(), or TRACELM_ISA=portable|avx2|avxvnni|avx512: the widest Isa this machine runs at or below it; read
// once.
Isa active_isa();
const char* isa_name(Isa isa);

}  // namespace tracelm::cpu
