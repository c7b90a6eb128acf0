// CpuBackend::sample and adjust_logits (semantics in ops/sampling/sampling.h). Work items of sample are scratch
// slots, one per pool thread, each sampling a contiguous share of the rows. The k best tokens are found in O(V) (a
// block-maxima prefilter, then dsa_topk's radix selection over the survivors) and only they are sorted.
#include <algorithm>
#include <cmath>

#include "backends/cpu/ops/op_support.h"
#include "backends/cpu/kernels/dsa_topk.h"
#include "ops/sampling/sampling.h"

namespace tracelm::cpu {

namespace {

using sampling::RowParams;

struct SampleArgs {
    float* logits;  // [rows, vocab], penalised in place
    const RowParams* params;
    int32_t* counts;
    const int32_t* step;
    int32_t* ids;
    float* logprobs;
    int32_t* top_ids;
    unsigned char* scratch;
    int64_t rows, vocab, slot_bytes, slots;
    int step_offset;
    Isa isa;
};

// One slot: dsa_topk's scratch, the selected ids (ascending), candidates in rank order, prefiltered logits.
constexpr int64_t slot_bytes(int64_t vocab) {
    return dsa::topk_cpu_slot_elems(vocab) * 4 + vocab * 8 + vocab * 4 + vocab * 4;
}

class Row {
   public:
    Row(const SampleArgs& a, int64_t r, unsigned char* slot)
        : a_(a), x_(a.logits + r * a.vocab), V_(a.vocab), keys_(reinterpret_cast<uint32_t*>(slot)),
          sel_(reinterpret_cast<int64_t*>(slot + dsa::topk_cpu_slot_elems(a.vocab) * 4)),
          cand_(reinterpret_cast<int32_t*>(slot + dsa::topk_cpu_slot_elems(a.vocab) * 4 + a.vocab * 8)),
          vals_(reinterpret_cast<float*>(slot + dsa::topk_cpu_slot_elems(a.vocab) * 4 + a.vocab * 12)) {}

    // The rank-order ids of the k best non-NaN tokens (k <= valid) in cand_, and their mass at temperature 1
    // summed in ascending id order.
    double best(int64_t k) {
        const int64_t start = 0;
        if (k == valid_) {
            int64_t n = 0;
            for (int64_t v = 0; v < V_; ++v)
                if (!std::isnan(x_[v])) sel_[n++] = v;
        } else {
            // Prefilter: the smallest of the maxima of k disjoint blocks is at most the k-th best logit (those
            // k maxima are k tokens at or above it), so the k best are among the tokens at or above it, kept in
            // id order (cand_ holds their ids); the radix selection then runs over those only.
            float floor = INFINITY;
            for (int64_t b = 0; b < k; ++b) {
                float bm = -INFINITY;
                for (int64_t v = V_ * b / k, e = V_ * (b + 1) / k; v < e; ++v) bm = x_[v] > bm ? x_[v] : bm;
                floor = bm < floor ? bm : floor;
            }
            int64_t n = 0;
            for (int64_t v = 0; v < V_; ++v) {
                if (x_[v] >= floor) {
                    vals_[n] = x_[v];
                    cand_[n++] = static_cast<int32_t>(v);
                }
            }
            const int64_t end_n = n;
            dsa::topk_cpu_range(dsa::TopkCpuArgs{vals_, &start, &end_n, sel_, keys_, 1, n, k, 0, 1, a_.isa, {}}, 0, 1);
            for (int64_t i = 0; i < k; ++i) sel_[i] = cand_[sel_[i]];
        }
        double z = 0.0;
        for (int64_t i = 0; i < k; ++i) {
            cand_[i] = static_cast<int32_t>(sel_[i]);
            z += sampling::weight(x_[sel_[i]], m_, 1.0);
        }
        std::sort(cand_, cand_ + k, [&](int32_t p, int32_t q) { return sampling::ranks_before(x_[p], p, x_[q], q); });
        return z;
    }

    void run(const RowParams& p, uint32_t draw, int64_t r) {
        if (p.penalised()) {
            const int32_t* c = a_.counts + r * V_;
            for (int64_t v = 0; v < V_; ++v) x_[v] = sampling::penalise(x_[v], c[v], p);
        }
        const bool want_lp = p.logprobs >= 0;
        // Greedy (or forced) rows without logprobs need argmax only.
        if (p.temperature != 0.0f || want_lp) {
            // Branch-free so that it vectorises: a NaN never passes `>` and counts as invalid.
            float m = -INFINITY;
            int64_t nans = 0;
            for (int64_t v = 0; v < V_; ++v) {
                const float xv = x_[v];
                nans += xv != xv;
                m = xv > m ? xv : m;
            }
            m_ = m;
            valid_ = V_ - nans;
        }
        const bool live = m_ > -INFINITY;
        // Mass of every token at temperature 1 (top_p without top_k, logprobs).
        double z_all = -1.0;
        auto total = [&] {
            if (z_all < 0.0) {
                z_all = 0.0;
                for (int64_t v = 0; v < V_; ++v)
                    if (!std::isnan(x_[v])) z_all += sampling::weight(x_[v], m_, 1.0);
            }
            return z_all;
        };
        const int32_t id = p.forced > 0 && p.forced <= V_      ? p.forced - 1
                           : p.temperature != 0.0f && live ? draw_token(p, draw, total)
                                                           : static_cast<int32_t>(sampling::argmax_row(x_, V_));
        if (want_lp) {
            const double log_z = live ? std::log(total()) : 0.0;
            auto lp = [&](int32_t v) {
                return live ? static_cast<float>(sampling::log_weight(x_[v], m_) - log_z) : -INFINITY;
            };
            float* out = a_.logprobs + r * (1 + sampling::kMaxLogprobs);
            int32_t* top = a_.top_ids + r * sampling::kMaxLogprobs;
            out[0] = lp(id);
            const int64_t n = std::min<int64_t>(p.logprobs, valid_);
            if (n > 0) best(n);
            for (int64_t i = 0; i < sampling::kMaxLogprobs; ++i) {
                top[i] = i < n ? cand_[i] : -1;
                out[1 + i] = i < n ? lp(cand_[i]) : -INFINITY;
            }
        }
        a_.ids[r] = id;
        a_.counts[r * V_ + id] += 1;
    }

   private:
    template <typename Total>
    int32_t draw_token(const RowParams& p, uint32_t draw, Total& total) {
        const double inv_t = 1.0 / static_cast<double>(p.temperature);
        const double floor = sampling::min_p_floor(m_, p.min_p);
        const double u = sampling::uniform(p.seed_lo, p.seed_hi, draw);
        const bool top_k = p.top_k > 0 && p.top_k < valid_;
        if (!top_k && p.top_p >= 1.0f) {
            // Every valid token above the min_p floor, walked in id order without selection.
            double z = 0.0;
            for (int64_t v = 0; v < V_; ++v)
                if (!std::isnan(x_[v]) && x_[v] >= floor) z += sampling::weight(x_[v], m_, inv_t);
            const double target = u * z;
            double cum = 0.0;
            for (int64_t v = 0; v < V_; ++v) {
                if (std::isnan(x_[v]) || x_[v] < floor) continue;
                cum += sampling::weight(x_[v], m_, inv_t);
                if (cum > target) return static_cast<int32_t>(v);
            }
            return static_cast<int32_t>(sampling::argmax_row(x_, V_));
        }
        int64_t n = top_k ? p.top_k : std::min<int64_t>(64, valid_);
        double z = best(n);
        if (p.top_p < 1.0f) {
            if (!top_k) z = total();
            const double goal = static_cast<double>(p.top_p) * z;
            // The shortest rank prefix reaching the goal; without top_k, widen the selection until it holds one.
            for (;;) {
                double cum = 0.0;
                int64_t keep = 0;
                while (keep < n) {
                    cum += sampling::weight(x_[cand_[keep++]], m_, 1.0);
                    if (cum >= goal) break;
                }
                if (cum >= goal || top_k || n == valid_) {
                    n = keep;
                    break;
                }
                best(n = std::min<int64_t>(n * 8, valid_));
            }
        }
        n = std::remove_if(cand_, cand_ + n, [&](int32_t v) { return static_cast<double>(x_[v]) < floor; }) - cand_;
        std::sort(cand_, cand_ + n);
        double w = 0.0;
        for (int64_t i = 0; i < n; ++i) w += sampling::weight(x_[cand_[i]], m_, inv_t);
        const double target = u * w;
        double cum = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            cum += sampling::weight(x_[cand_[i]], m_, inv_t);
            if (cum > target) return cand_[i];
        }
        return static_cast<int32_t>(sampling::argmax_row(x_, V_));
    }

    const SampleArgs& a_;
    float* x_;
    int64_t V_;
    uint32_t* keys_;
    int64_t* sel_;
    int32_t* cand_;
    float* vals_;
    float m_ = -INFINITY;
    int64_t valid_ = 0;
};

void run_sample(const SampleArgs& a, int64_t b, int64_t e) {
    const int32_t step = *a.step;
    for (int64_t slot = b; slot < e; ++slot) {
        unsigned char* scratch = a.scratch + slot * a.slot_bytes;
        const int64_t r1 = a.rows * (slot + 1) / a.slots;
        for (int64_t r = a.rows * slot / a.slots; r < r1; ++r) Row(a, r, scratch).run(a.params[r], sampling::draw_number(step, a.step_offset, a.params[r]), r);
    }
}

struct AdjustArgs {
    float* logits;  // [rows, vocab]
    const int32_t* flags;
    const uint32_t* mask;
    const int32_t* bias_ids;
    const float* bias_values;
    int64_t vocab, words;
};

// Rows [b, e): the bias entries, then the mask a word at a time (a word of all-allowed tokens is one compare).
void run_adjust(const AdjustArgs& a, int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
        const int32_t mask_on = a.flags[2 * r], n = std::clamp(a.flags[2 * r + 1], 0, sampling::kMaxLogitBias);
        if (mask_on == 0 && n == 0) continue;
        float* x = a.logits + r * a.vocab;
        const int32_t* ids = a.bias_ids + r * sampling::kMaxLogitBias;
        const float* vals = a.bias_values + r * sampling::kMaxLogitBias;
        for (int32_t j = 0; j < n; ++j)
            if (ids[j] >= 0 && ids[j] < a.vocab) x[ids[j]] += vals[j];
        if (mask_on == 0) continue;
        const uint32_t* m = a.mask + r * a.words;
        for (int64_t w = 0; w < a.words; ++w) {
            const uint32_t bits = m[w];
            if (bits == ~0u) continue;
            float* xw = x + 32 * w;
            const int64_t end = std::min<int64_t>(32, a.vocab - 32 * w);
            // Branch-free selects: a constrained row's words are mostly all-forbidden, and these loops vectorise.
            if (bits == 0) {
                for (int64_t i = 0; i < end; ++i) xw[i] = -INFINITY;
            } else {
                for (int64_t i = 0; i < end; ++i) xw[i] = ((bits >> i) & 1u) != 0 ? xw[i] : -INFINITY;
            }
        }
    }
}

}  // namespace

void CpuBackend::do_adjust_logits(const Tensor& logits, const LogitAdjustIo& io) {
    if (logits.rows == 0) return;
    submit(run_adjust,
           AdjustArgs{logits.ptr<float>(), io.flags.ptr<int32_t>(), reinterpret_cast<const uint32_t*>(io.mask.raw()),
                      io.bias_ids.ptr<int32_t>(), io.bias_values.ptr<float>(), logits.cols, io.mask.cols},
           Footprint().read(io.flags).read(io.mask).read(io.bias_ids).read(io.bias_values).write(logits), logits.rows);
}

size_t CpuBackend::sampling_workspace_bytes(int64_t, int64_t vocab) const {
    // One slot per pool thread, whatever the number of rows.
    return static_cast<size_t>(threads()) * static_cast<size_t>(slot_bytes(vocab));
}

void CpuBackend::do_sample(const Tensor& logits, const SamplingIo& io, const Tensor& ids) {
    if (logits.rows == 0) return;
    const ByteRange ws{reinterpret_cast<uintptr_t>(io.ws.buffer->data),
                       reinterpret_cast<uintptr_t>(io.ws.buffer->data) + io.ws.buffer->bytes};
    submit(run_sample,
           SampleArgs{logits.ptr<float>(), reinterpret_cast<const RowParams*>(io.params.raw()), io.counts.ptr<int32_t>(),
                      io.step.ptr<int32_t>(), ids.ptr<int32_t>(), io.logprobs.ptr<float>(), io.top_ids.ptr<int32_t>(),
                      static_cast<unsigned char*>(io.ws.buffer->data), logits.rows, logits.cols,
                      slot_bytes(io.ws.vocab), threads(), io.step_offset, active_isa()},
           Footprint()
               .read(io.params)
               .read(io.step)
               .write(logits)
               .write(io.counts)
               .write(ids)
               .write(io.logprobs)
               .write(io.top_ids)
               .write(ws),
           threads());
}

}  // namespace tracelm::cpu
