// Quantized weights in plain C++: GGML's reference dequantization (used by every Isa) and the portable
// integer-domain matmul, which follows the summation order in quant.h exactly, so that it equals the SIMD
// versions bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/kernels_internal.h"
#include "backends/cpu/kernels/quant.h"

namespace tracelm::cpu {
namespace {

using namespace quant;

float f16_at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
}

// GGML's get_scale_min_k4: the 6-bit scale and min of sub-block j of a Q4_K/Q5_K block.
void scale_min_k4(int j, const uint8_t* s, int& sc, int& m) {
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// The integer weights of one block, offsets applied: q[i] is element i's multiplier of the block scale.
void ints_q8_0(const BlockQ8_0& b, int* q) {
    for (int i = 0; i < 32; ++i) q[i] = b.qs[i];
}
// Q4_0/Q4_1 nibbles (offset subtracted), plus the high bits of Q5_0/Q5_1 when qh is given.
void ints_4_5(const uint8_t* qs, const uint8_t* qh, int offset, int* q) {
    uint32_t h = 0;
    if (qh != nullptr) std::memcpy(&h, qh, 4);
    for (int j = 0; j < 16; ++j) {
        q[j] = ((qs[j] & 0xF) | static_cast<int>(((h >> j) & 1u) << 4)) - offset;
        q[j + 16] = ((qs[j] >> 4) | static_cast<int>(((h >> (j + 16)) & 1u) << 4)) - offset;
    }
}
// Q4_K/Q5_K: element 32j + l of sub-block j.
void ints_k45(const uint8_t* qs, const uint8_t* qh, int* q) {
    for (int j = 0; j < 8; ++j)
        for (int l = 0; l < 32; ++l) {
            const uint8_t byte = qs[32 * (j / 2) + l];
            const int hi = qh != nullptr ? ((qh[l] >> j) & 1) << 4 : 0;
            q[32 * j + l] = ((j % 2 == 0 ? byte & 0xF : byte >> 4) | hi);
        }
}
void ints_q6_k(const BlockQ6_K& b, int* q) {
    for (int h = 0; h < 2; ++h)
        for (int c = 0; c < 4; ++c)
            for (int l = 0; l < 32; ++l) {
                const uint8_t lo = b.ql[64 * h + 32 * (c & 1) + l];
                const int hi = (b.qh[32 * h + l] >> (2 * c)) & 3;
                q[128 * h + 32 * c + l] = ((c < 2 ? lo & 0xF : lo >> 4) | (hi << 4)) - 32;
            }
}

}  // namespace

// Element values as GGML defines them, with its float operations in its order (no fused multiply-add).
void detail::dequantize_row(const void* src, DType dt, int64_t cols, float* out) {
    const auto* p = static_cast<const uint8_t*>(src);
    const int64_t nb = cols / dtype_block_elems(dt);
    const size_t bb = dtype_block_bytes(dt);
    int q[256];
    for (int64_t i = 0; i < nb; ++i, p += bb) {
        switch (dt) {
            case DType::Q8_0: {
                const auto& b = *reinterpret_cast<const BlockQ8_0*>(p);
                ints_q8_0(b, q);
                for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(q[j]) * f16_at(b.d);
                break;
            }
            case DType::Q4_0:
            case DType::Q5_0: {
                const bool five = dt == DType::Q5_0;
                const uint8_t* qs = five ? reinterpret_cast<const BlockQ5_0*>(p)->qs : p + 2;
                ints_4_5(qs, five ? p + 2 : nullptr, five ? 16 : 8, q);
                for (int j = 0; j < 32; ++j) out[j] = f16_at(p) * static_cast<float>(q[j]);
                break;
            }
            case DType::Q4_1:
            case DType::Q5_1: {
                const bool five = dt == DType::Q5_1;
                const uint8_t* qs = five ? reinterpret_cast<const BlockQ5_1*>(p)->qs : p + 4;
                ints_4_5(qs, five ? p + 4 : nullptr, 0, q);
                for (int j = 0; j < 32; ++j) out[j] = f16_at(p) * static_cast<float>(q[j]) + f16_at(p + 2);
                break;
            }
            case DType::Q4_K:
            case DType::Q5_K: {
                const bool five = dt == DType::Q5_K;
                const auto& b4 = *reinterpret_cast<const BlockQ4_K*>(p);
                const auto& b5 = *reinterpret_cast<const BlockQ5_K*>(p);
                ints_k45(five ? b5.qs : b4.qs, five ? b5.qh : nullptr, q);
                const float d = f16_at(b4.d), dmin = f16_at(b4.dmin);
                for (int j = 0; j < 8; ++j) {
                    int sc, m;
                    scale_min_k4(j, b4.scales, sc, m);
                    const float dj = d * static_cast<float>(sc), mj = dmin * static_cast<float>(m);
                    for (int l = 0; l < 32; ++l) out[32 * j + l] = dj * static_cast<float>(q[32 * j + l]) - mj;
                }
                break;
            }
            case DType::Q6_K: {
                const auto& b = *reinterpret_cast<const BlockQ6_K*>(p);
                ints_q6_k(b, q);
                const float d = f16_at(b.d);
                for (int j = 0; j < 256; ++j)
                    out[j] = d * static_cast<float>(b.scales[j / 16]) * static_cast<float>(q[j]);
                break;
            }
            default: return;
        }
        out += dtype_block_elems(dt);
    }
}

namespace portable {
namespace {

// f16 rounding (to nearest even), as ggml stores its activation scales.
float round_f16(float v) { return f16_to_f32(f32_to_f16(v)); }

// Rounding is lrint's: to nearest even, as vroundps / vcvtps2dq and ggml's nearest_int.
void quantize_block32(const float* x, bool with_s, ActBlock32& a) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
        a.q[i] = static_cast<int8_t>(std::lrint(x[i] * id));
        sum += a.q[i];
    }
    a.d = round_f16(d);
    a.s = with_s ? round_f16(d * static_cast<float>(sum)) : 0.0f;
}

void quantize_block256(const float* x, ActBlock256& a) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 256; ++i)
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            max = x[i];
        }
    const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
    for (int i = 0; i < 256; ++i) a.q[i] = static_cast<int8_t>(std::min(127L, std::lrint(iscale * x[i])));
    a.d = amax != 0.0f ? 1.0f / iscale : 0.0f;
    for (int g = 0; g < 16; ++g) {
        int s = 0;
        for (int j = 0; j < 16; ++j) s += a.q[16 * g + j];
        a.bsums[g] = static_cast<int16_t>(s);
    }
}

void quantize_rows(const float* x, int64_t T, int64_t K, DType wt, void* act) {
    if (dtype_block_elems(wt) == 32) {
        const bool with_s = wt == DType::Q4_1 || wt == DType::Q5_1;
        auto* a = static_cast<ActBlock32*>(act);
        for (int64_t i = 0; i < T * K / 32; ++i) quantize_block32(x + 32 * i, with_s, a[i]);
    } else {
        auto* a = static_cast<ActBlock256*>(act);
        for (int64_t i = 0; i < T * K / 256; ++i) quantize_block256(x + 256 * i, a[i]);
    }
}

// The integer weights of one block of a 32-element type, offsets applied.
void ints32(DType wt, const uint8_t* w, int* q) {
    switch (wt) {
        case DType::Q8_0: ints_q8_0(*reinterpret_cast<const BlockQ8_0*>(w), q); break;
        case DType::Q4_0: ints_4_5(w + 2, nullptr, 8, q); break;
        case DType::Q5_0: ints_4_5(w + 6, w + 2, 16, q); break;
        case DType::Q4_1: ints_4_5(w + 4, nullptr, 0, q); break;
        default: ints_4_5(w + 8, w + 4, 0, q); break;  // Q5_1
    }
}

// The dot product of 4 integer weights with 4 activations: one of quant.h's lanes (before scales).
int dot4(const int* q, const int8_t* x) { return q[0] * x[0] + q[1] * x[1] + q[2] * x[2] + q[3] * x[3]; }

// ggml's hsum_float_8.
float hsum8(const float (&acc)[8]) {
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

// One output: the weight row w (nb blocks) against one quantized activation row, in quant.h's order.
float dot_row(DType wt, const uint8_t* w, int64_t nb, const void* act) {
    const size_t bb = dtype_block_bytes(wt);
    float acc[8] = {};
    float summs = 0.0f, accm[4] = {};
    int q[256], lane[8];
    for (int64_t i = 0; i < nb; ++i, w += bb) {
        if (dtype_block_elems(wt) == 32) {
            const ActBlock32& a = static_cast<const ActBlock32*>(act)[i];
            ints32(wt, w, q);
            for (int l = 0; l < 8; ++l) lane[l] = dot4(q + 4 * l, a.q + 4 * l);
            const float d = f16_at(w) * a.d;
            for (int l = 0; l < 8; ++l) acc[l] = std::fma(d, static_cast<float>(lane[l]), acc[l]);
            if (wt == DType::Q4_1 || wt == DType::Q5_1) summs = std::fma(f16_at(w + 2), a.s, summs);
            continue;
        }
        const ActBlock256& a = static_cast<const ActBlock256*>(act)[i];
        for (int& l : lane) l = 0;
        float wd;
        if (wt == DType::Q6_K) {
            const auto& b = *reinterpret_cast<const BlockQ6_K*>(w);
            ints_q6_k(b, q);
            for (int& v : q) v += 32;  // quant.h: unsigned q here, the 32 taken out per lane below
            for (int c = 0; c < 8; ++c)
                for (int l = 0; l < 8; ++l) lane[l] += b.scales[2 * c + l / 4] * dot4(q + 32 * c + 4 * l, a.q + 32 * c + 4 * l);
            for (int l = 0; l < 8; ++l)
                lane[l] -= 32 * (b.scales[2 * l] * a.bsums[2 * l] + b.scales[2 * l + 1] * a.bsums[2 * l + 1]);
            wd = f16_at(b.d);
        } else {
            const auto& b4 = *reinterpret_cast<const BlockQ4_K*>(w);
            const auto& b5 = *reinterpret_cast<const BlockQ5_K*>(w);
            const bool five = wt == DType::Q5_K;
            ints_k45(five ? b5.qs : b4.qs, five ? b5.qh : nullptr, q);
            int prod[4] = {};
            for (int j = 0; j < 8; ++j) {
                int sc, mn;
                scale_min_k4(j, b4.scales, sc, mn);
                for (int l = 0; l < 8; ++l) lane[l] += sc * dot4(q + 32 * j + 4 * l, a.q + 32 * j + 4 * l);
                prod[j / 2] += mn * (a.bsums[2 * j] + a.bsums[2 * j + 1]);
            }
            const float dmin = -a.d * f16_at(b4.dmin);
            if (five)
                summs = std::fma(dmin, static_cast<float>(prod[0] + prod[1] + prod[2] + prod[3]), summs);
            else
                for (int j = 0; j < 4; ++j) accm[j] = std::fma(dmin, static_cast<float>(prod[j]), accm[j]);
            wd = f16_at(b4.d);
        }
        const float d = a.d * wd;
        for (int l = 0; l < 8; ++l) acc[l] = std::fma(d, static_cast<float>(lane[l]), acc[l]);
    }
    switch (wt) {
        case DType::Q4_1:
        case DType::Q5_1:
        case DType::Q5_K: return hsum8(acc) + summs;
        case DType::Q4_K: return hsum8(acc) + ((accm[0] + accm[2]) + (accm[1] + accm[3]));
        default: return hsum8(acc);
    }
}

// One output in the tiled order of quant.h (K types): an exact integer sum per block, then d * s1, the min term, and
// one FMA by the activation scale.
float dot_row_tiled(DType wt, const uint8_t* w, int64_t nb, const ActBlock256* a) {
    const size_t bb = dtype_block_bytes(wt);
    float y = 0.0f;
    int q[256];
    for (int64_t i = 0; i < nb; ++i, w += bb) {
        int s1 = 0, s2 = 0;
        float res;
        if (wt == DType::Q6_K) {
            const auto& b = *reinterpret_cast<const BlockQ6_K*>(w);
            ints_q6_k(b, q);
            for (int s = 0; s < 16; ++s) {
                int dot = 0;
                for (int l = 0; l < 16; ++l) dot += q[16 * s + l] * a[i].q[16 * s + l];
                s1 += b.scales[s] * dot;
            }
            res = f16_at(b.d) * static_cast<float>(s1);
        } else {
            const auto& b4 = *reinterpret_cast<const BlockQ4_K*>(w);
            const auto& b5 = *reinterpret_cast<const BlockQ5_K*>(w);
            const bool five = wt == DType::Q5_K;
            ints_k45(five ? b5.qs : b4.qs, five ? b5.qh : nullptr, q);
            for (int j = 0; j < 8; ++j) {
                int sc, mn, dot = 0;
                scale_min_k4(j, b4.scales, sc, mn);
                for (int l = 0; l < 32; ++l) dot += q[32 * j + l] * a[i].q[32 * j + l];
                s1 += sc * dot;
                s2 += mn * (a[i].bsums[2 * j] + a[i].bsums[2 * j + 1]);
            }
            res = std::fma(-f16_at(b4.dmin), static_cast<float>(s2), f16_at(b4.d) * static_cast<float>(s1));
        }
        y = std::fma(res, a[i].d, y);
    }
    return y;
}

// Block b of row n of a repacked matrix (N rows of nb blocks of GGML type bt) in GGML's layout (formats/repack.h).
void ggml_block(const uint8_t* w, DType bt, int64_t N, int64_t nb, int64_t n, int64_t b, uint8_t* blk) {
    const size_t bb = dtype_block_bytes(bt);
    if (n >= N / kRepackRows * kRepackRows) {  // past the last whole group: not moved
        std::memcpy(blk, w + static_cast<size_t>(n * nb + b) * bb, bb);
        return;
    }
    const uint8_t* p = w + static_cast<size_t>((n / kRepackRows) * nb + b) * kRepackRows * bb;
    const int r = static_cast<int>(n % kRepackRows);
    const bool q8 = bt == DType::Q8_0, has_m = bt == DType::Q4_1 || bt == DType::Q5_1;
    std::memcpy(blk, p + 2 * r, 2);
    p += 2 * kRepackRows;
    if (has_m) {
        std::memcpy(blk + 2, p + 2 * r, 2);
        p += 2 * kRepackRows;
    }
    if (bt == DType::Q5_0 || bt == DType::Q5_1) {
        uint32_t h = 0;
        for (int j = 0; j < 8; ++j)
            for (int i = 0; i < 4; ++i) {
                const int bit = 4 * r + i;
                h |= static_cast<uint32_t>((p[8 * j + bit / 8] >> (bit % 8)) & 1) << (4 * j + i);
            }
        std::memcpy(blk + (has_m ? 4 : 2), &h, 4);
        p += 8 * 8;
    }
    const size_t qs = bb - (q8 ? 32 : 16);
    for (int j = 0; j < (q8 ? 8 : 4); ++j) std::memcpy(blk + qs + 4 * j, p + 64 * j + 4 * r, 4);
}

// Block b of row n of a repacked Q4_K/Q5_K matrix (N rows of nb blocks): unsigned q, 6-bit scales and mins, d and
// dmin (formats/repack.h).
struct KBlock {
    int q[256], sc[8], m[8];
    float d, dmin;
};
void k_block(const uint8_t* w, DType bt, int64_t N, int64_t nb, int64_t n, int64_t b, KBlock& k) {
    const size_t bb = dtype_block_bytes(bt);
    const bool five = bt == DType::Q5_K;
    if (n >= N / kRepackRows * kRepackRows) {  // past the last whole group: GGML's block
        const uint8_t* p = w + static_cast<size_t>(n * nb + b) * bb;
        ints_k45(p + (five ? 48 : 16), five ? p + 16 : nullptr, k.q);
        for (int j = 0; j < 8; ++j) scale_min_k4(j, p + 4, k.sc[j], k.m[j]);
        k.d = f16_at(p);
        k.dmin = f16_at(p + 2);
        return;
    }
    const uint8_t* p = w + static_cast<size_t>((n / kRepackRows) * nb + b) * kRepackRows * bb;
    const int r = static_cast<int>(n % kRepackRows);
    k.d = f16_at(p + 2 * r);
    k.dmin = f16_at(p + 2 * kRepackRows + 2 * r);
    const uint8_t* sc_lo = p + 4 * kRepackRows;
    uint32_t hi;
    std::memcpy(&hi, sc_lo + 8 * kRepackRows + 4 * r, 4);
    for (int j = 0; j < 8; ++j) {
        const int h = static_cast<int>(hi >> (4 * j)) & 15;
        k.sc[j] = (sc_lo[16 * j + r] & 15) | (h & 3) << 4;
        k.m[j] = (sc_lo[16 * j + r] >> 4) | (h >> 2) << 4;
    }
    const uint8_t* qh = sc_lo + 12 * kRepackRows;
    const uint8_t* qs = qh + (five ? 32 * kRepackRows : 0);
    for (int j = 0; j < 8; ++j)
        for (int c = 0; c < 8; ++c)
            for (int i = 0; i < 4; ++i) {
                const uint8_t byte = qs[64 * (8 * (j / 2) + c) + 4 * r + i];
                const int bit = 4 * r + i;
                const int high = five ? ((qh[64 * j + 8 * c + bit / 8] >> (bit % 8)) & 1) << 4 : 0;
                k.q[32 * j + 4 * c + i] = (j % 2 == 0 ? byte & 15 : byte >> 4) | high;
            }
}

// The fast numerics of Q4_K/Q5_K (quant.h): one output of row n against one activation row a.
float dot_row_fast_k(DType bt, const uint8_t* w, int64_t N, int64_t nb, int64_t n, const ActBlock256* a) {
    float acc = 0.0f;
    KBlock k;
    for (int64_t b = 0; b < nb; ++b) {
        k_block(w, bt, N, nb, n, b, k);
        int isum = 0, msum = 0;
        for (int j = 0; j < 8; ++j) {
            int dot = 0;
            for (int l = 0; l < 32; ++l) dot += k.q[32 * j + l] * a[b].q[32 * j + l];
            isum += k.sc[j] * dot;
            msum += k.m[j] * (a[b].bsums[2 * j] + a[b].bsums[2 * j + 1]);
        }
        acc = std::fma(static_cast<float>(isum), k.d * a[b].d, acc);
        acc = std::fma(-static_cast<float>(msum), k.dmin * a[b].d, acc);
    }
    return acc;
}

// Block b of row n of a repacked Q6_K matrix (N rows of nb blocks): unsigned q, int8 scales, d.
struct Q6Block {
    int q[256], sc[16];
    float d;
};
void q6k_block(const uint8_t* w, int64_t N, int64_t nb, int64_t n, int64_t b, Q6Block& k) {
    constexpr size_t bb = 210;
    if (n >= N / kRepackRows * kRepackRows) {  // past the last whole group: GGML's block
        const auto& blk = *reinterpret_cast<const BlockQ6_K*>(w + static_cast<size_t>(n * nb + b) * bb);
        ints_q6_k(blk, k.q);
        for (int& v : k.q) v += 32;
        for (int s = 0; s < 16; ++s) k.sc[s] = blk.scales[s];
        k.d = f16_at(blk.d);
        return;
    }
    const uint8_t* p = w + static_cast<size_t>((n / kRepackRows) * nb + b) * kRepackRows * bb;
    const int r = static_cast<int>(n % kRepackRows);
    k.d = f16_at(p + 2 * r);
    const uint8_t* scs = p + 2 * kRepackRows;
    const uint8_t* ql = scs + 16 * kRepackRows;
    const uint8_t* qh = ql + 128 * kRepackRows;
    for (int s = 0; s < 16; ++s) {
        k.sc[s] = static_cast<int8_t>(scs[16 * s + r]);
        for (int j = 0; j < 4; ++j)
            for (int i = 0; i < 4; ++i) {
                const int lo = (ql[64 * (2 * s + j / 2) + 4 * r + i] >> (4 * (j % 2))) & 15;
                k.q[16 * s + 4 * j + i] = lo | ((qh[64 * s + 4 * r + i] >> (2 * j)) & 3) << 4;
            }
    }
}

// The fast numerics of Q6_K (quant.h): one output of row n against one activation row a.
float dot_row_fast_q6k(const uint8_t* w, int64_t N, int64_t nb, int64_t n, const ActBlock256* a) {
    float acc = 0.0f;
    Q6Block k;
    for (int64_t b = 0; b < nb; ++b) {
        q6k_block(w, N, nb, n, b, k);
        const int* q = k.q;
        const int* sc = k.sc;
        const float d = k.d;
        int isum = 0;
        for (int s = 0; s < 16; ++s) {
            int dot = -32 * a[b].bsums[s];
            for (int l = 0; l < 16; ++l) dot += q[16 * s + l] * a[b].q[16 * s + l];
            isum += sc[s] * dot;
        }
        acc = std::fma(static_cast<float>(isum), d * a[b].d, acc);
    }
    return acc;
}

// The fast numerics (quant.h): one output of row n of a repacked matrix against one activation row a.
float dot_row_fast(DType bt, const uint8_t* w, int64_t N, int64_t nb, int64_t n, const ActBlock32* a) {
    const bool has_m = bt == DType::Q4_1 || bt == DType::Q5_1;
    float acc = 0.0f, macc = 0.0f;
    uint8_t blk[34];
    int q[32];
    for (int64_t b = 0; b < nb; ++b) {
        ggml_block(w, bt, N, nb, n, b, blk);
        ints32(bt, blk, q);
        int isum = 0;
        for (int i = 0; i < 32; ++i) isum += q[i] * a[b].q[i];
        acc = std::fma(static_cast<float>(isum), f16_at(blk) * a[b].d, acc);
        if (has_m) macc = std::fma(f16_at(blk + 2), a[b].s, macc);
    }
    return has_m ? acc + macc : acc;
}

void quantize(const float* x, int64_t T, int64_t K, DType wt, void* act) {
    if (T > 0) quantize_rows(x, T, K, dtype_is_repacked(wt) ? dtype_unpacked(wt) : wt, act);
}

void product(const void* act, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y, int64_t N,
             int64_t n0, int64_t n1, QuantOrder order) {
    if (T <= 0 || n1 <= n0) return;
    if (dtype_is_repacked(wt)) {
        const DType bt = dtype_unpacked(wt);
        const int64_t nb = K / dtype_block_elems(bt);
        const auto* wb = static_cast<const uint8_t*>(w);
        for (int64_t n = n0; n < n1; ++n)
            for (int64_t t = 0; t < T; ++t) {
                const auto* ak = static_cast<const ActBlock256*>(act) + t * nb;
                const float s = bt == DType::Q6_K                ? dot_row_fast_q6k(wb, N, nb, n, ak)
                                : dtype_block_elems(bt) == 256 ? dot_row_fast_k(bt, wb, N, nb, n, ak)
                                                               : dot_row_fast(bt, wb, N, nb, n,
                                                                              static_cast<const ActBlock32*>(act) + t * nb);
                y[t * N + n] = bias != nullptr ? s + bias[n] : s;
            }
        return;
    }
    const int64_t nb = K / dtype_block_elems(wt);
    const size_t act_row = static_cast<size_t>(nb) * (dtype_block_elems(wt) == 32 ? sizeof(ActBlock32)
                                                                                    : sizeof(ActBlock256));
    const size_t row_bytes = dtype_row_bytes(wt, K);
    const bool tiled = order == QuantOrder::Tiled && dtype_block_elems(wt) == 256;
    // Rows outside, tokens inside: a weight row is read from memory once and reused from L1 for every token.
    for (int64_t n = n0; n < n1; ++n) {
        const auto* wr = static_cast<const uint8_t*>(w) + static_cast<size_t>(n) * row_bytes;
        for (int64_t t = 0; t < T; ++t) {
            const char* at = static_cast<const char*>(act) + static_cast<size_t>(t) * act_row;
            const float s = tiled ? dot_row_tiled(wt, wr, nb, reinterpret_cast<const ActBlock256*>(at))
                                  : dot_row(wt, wr, nb, at);
            y[t * N + n] = bias != nullptr ? s + bias[n] : s;
        }
    }
}

void matmul(const float* x, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y, int64_t N,
            int64_t n0, int64_t n1, void* act, QuantOrder order) {
    if (T <= 0 || n1 <= n0) return;
    quantize(x, T, K, wt, act);
    product(act, T, K, w, wt, bias, y, N, n0, n1, order);
}

}  // namespace
}  // namespace portable

// Row n of a repacked table, as dequantize_row gives it for the GGML row (the same float operations).
void detail::dequantize_repacked_row(const void* table, DType dt, int64_t N, int64_t cols, int64_t n, float* out) {
    const DType bt = dtype_unpacked(dt);
    const int64_t be = dtype_block_elems(bt), nb = cols / be;
    const auto* w = static_cast<const uint8_t*>(table);
    for (int64_t b = 0; b < nb; ++b, out += be) {
        if (be == 32) {
            uint8_t blk[34];
            portable::ggml_block(w, bt, N, nb, n, b, blk);
            dequantize_row(blk, bt, 32, out);
        } else if (bt == DType::Q6_K) {
            portable::Q6Block k;
            portable::q6k_block(w, N, nb, n, b, k);
            for (int j = 0; j < 256; ++j) out[j] = k.d * static_cast<float>(k.sc[j / 16]) * static_cast<float>(k.q[j] - 32);
        } else {
            portable::KBlock k;
            portable::k_block(w, bt, N, nb, n, b, k);
            for (int j = 0; j < 8; ++j) {
                const float dj = k.d * static_cast<float>(k.sc[j]), mj = k.dmin * static_cast<float>(k.m[j]);
                for (int l = 0; l < 32; ++l) out[32 * j + l] = dj * static_cast<float>(k.q[32 * j + l]) - mj;
            }
        }
    }
}

const QuantKernels detail::portable_quant = {portable::matmul, portable::quantize, portable::product};

}  // namespace tracelm::cpu
