// ggml_op_report FIXTURE_DIR MODEL.gguf: every tracelm CPU op fed llama.cpp's captured inputs, compared with
// llama.cpp's outputs, with the counts summed over every layer in the fixture; plus the tests/support/ggml_reference.h
// transcriptions of ggml (lines "ref ...", all 0 except the kq/kqv dot order llama.cpp uses at the other batch
// size: tinyBLAS for T >= 2, vec_dot_f16 for T = 1) and a few decompositions. Not a test: the mismatches it reports
// are the point. Make the fixture with
//   /tmp/llamavenv/bin/python scripts/dump_llamacpp_tensors.py --fixture /tmp/ggml_all --fixture-layers all
//     (plus --fixture-logits for the lm_head line)
// and run it on the SmolLM2-135M-Instruct Q4_1 GGUF the fixture came from (docs/ggml-numerics.md).
#include <cmath>
#include <cstdio>
#include <map>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels/kernels.h"
#include "support/ggml_reference.h"
#include "model/model.h"

using namespace tracelm;
using namespace tracelm::ggml_ref;

struct Acc {
    int64_t mism = 0, n = 0;
    double maxu = 0;
    double maxabs = 0;
};
std::map<std::string, Acc> stats;
std::vector<std::string> order;
std::string EV;
void add(const std::string& k0, const Diff& d) {
    const std::string k = EV + k0;
    if (!stats.count(k)) order.push_back(k);
    auto& a = stats[k];
    a.mism += d.mismatches;
    a.n += d.n;
    a.maxu = std::max(a.maxu, d.max_ulps);
    a.maxabs = std::max(a.maxabs, d.max_abs);
}
cpu::CpuBackend* BE;
Tensor up(const std::string& n, DType dt, int64_t r, int64_t c, const void* data, size_t bytes) {
    Tensor t = whole(BE->alloc(bytes, n), dt, r, c);
    BE->upload(t, data);
    return t;
}
Tensor upf(const std::string& n, int64_t r, int64_t c, const std::vector<float>& v) {
    return up(n, DType::F32, r, c, v.data(), v.size() * 4);
}
Tensor upi(const std::string& n, int64_t r, int64_t c, const std::vector<int32_t>& v) {
    return up(n, DType::I32, r, c, v.data(), v.size() * 4);
}
std::vector<float> down(const Tensor& t) {
    std::vector<float> v(t.numel());
    BE->download(t, v.data());
    return v;
}
std::vector<float> mm(const std::vector<float>& x, int64_t T, const Tensor& w) {
    Tensor xt = upf("x", T, w.cols, x);
    Tensor o = upf("o", T, w.rows, std::vector<float>(T * w.rows));
    BE->matmul(xt, w, nullptr, o);
    auto r = down(o);
    BE->free(xt.buf);
    BE->free(o.buf);
    return r;
}
std::vector<float> rms(const std::vector<float>& x, int64_t T, const Tensor& w, float eps) {
    Tensor xt = upf("x", T, w.numel(), x);
    Tensor o = upf("o", T, w.numel(), x);
    BE->rms_norm(xt, w, eps, o);
    auto r = down(o);
    BE->free(xt.buf);
    BE->free(o.buf);
    return r;
}
int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: ggml_op_report FIXTURE_DIR MODEL.gguf\n");
        return 2;
    }
    Fixture fx(argv[1]);
    cpu::CpuBackend be(1);
    BE = &be;
    auto model = Model::load(argv[2], be);
    const auto& W = model->weights();
    const auto& C = model->config();
    const float eps = (float)C.rms_norm_eps;
    const int H = C.num_attention_heads, KV = C.num_key_value_heads, hd = C.head_dim;
    printf("isa %d eps %g theta %g H %d KV %d hd %d layers %zu\n", static_cast<int>(cpu::active_isa()), eps,
           C.rope_theta, H, KV, hd, W.layers.size());
    int n_past = 0;
    for (int e = 0; e < 2; ++e) {
        const std::string p = std::string(e == 0 ? "e0_" : "e1_");
        EV = p;
        auto ids = fx.get(p + "ids").i32();
        const int64_t T = ids.size();
        std::vector<int32_t> pos(T);
        for (int t = 0; t < T; ++t) pos[t] = n_past + t;
        {
            Tensor it = upi("ids", 1, T, ids);
            Tensor o = upf("o", T, W.embed.cols, std::vector<float>(T * W.embed.cols));
            be.embedding(it, W.embed, 1.0f, o);
            add("embedding (get_rows q8_0)", compare(down(o), fx.get(p + "embd").f32()));
        }
        for (size_t L = 0; L < W.layers.size(); ++L) {
            const auto& lw = W.layers[L];
            const std::string q = p + "L" + std::to_string(L) + "_";
            if (!fx.has(q + "input")) continue;
            auto in = fx.get(q + "input").f32();
            add("rms_norm+w (tracelm)", compare(rms(in, T, lw.input_norm, eps), fx.get(q + "attn_norm").f32()));
            {
                std::vector<float> y(in.size());
                for (int t = 0; t < T; ++t) rms_norm(in.data() + t * 576, 576, eps, y.data() + t * 576);
                add("ref rms_norm", compare(y, fx.get(q + "attn_rms").f32()));
                auto w = down(lw.input_norm);
                for (int t = 0; t < T; ++t)
                    for (int i = 0; i < 576; ++i) y[t * 576 + i] *= w[i];
                add("ref rms_norm * w", compare(y, fx.get(q + "attn_norm").f32()));
            }
            auto an = fx.get(q + "attn_norm").f32();
            auto qp = fx.get(q + "q_proj").f32(), kp = fx.get(q + "k_proj").f32(), vp = fx.get(q + "v_proj").f32();
            add("matmul q4_1 q", compare(mm(an, T, lw.q_proj), gguf_rows_to_neox(qp, T, H, hd)));
            add("matmul q4_1 k", compare(mm(an, T, lw.k_proj), gguf_rows_to_neox(kp, T, KV, hd)));
            add("matmul q4_1 v", compare(mm(an, T, lw.v_proj), vp));
            auto qr = fx.get(q + "q_rope").f32(), kr = fx.get(q + "k_rope").f32();
            {
                auto x = gguf_rows_to_neox(qp, T, H, hd);
                Tensor xt = upf("q", T, H * hd, x);
                Tensor pt = upi("pos", 1, T, pos);
                be.rope_neox(xt, pt, H, hd, model->rope(0));
                add("rope q (tracelm)", compare(down(xt), gguf_rows_to_neox(qr, T, H, hd)));
                auto y = qp;
                rope_normal(y.data(), pos.data(), T, H, hd, (float)C.rope_theta);
                add("ref rope q", compare(y, qr));
                {  // tracelm's former angles (pos * inv_freq), ggml rotation; ggml angles, plain rotation
                    auto y1 = qp, y2 = qp;
                    const float ts = std::pow((float)C.rope_theta, -2.0f / 64);
                    std::vector<float> invf(32);
                    tracelm::rope_inv_freq(model->rope(0), 64, invf.data());
                    for (int t = 0; t < T; ++t) {
                        float th = (float)pos[t];
                        for (int i = 0; i < 32; ++i) {
                            float ca = std::cos(pos[t] * invf[i]), sa = std::sin(pos[t] * invf[i]);
                            float cb = std::cos(th), sb = std::sin(th);
                            th *= ts;
                            for (int h = 0; h < H; ++h) {
                                float* a = &y1[(t * H + h) * 64 + 2 * i];
                                float* b = &y2[(t * H + h) * 64 + 2 * i];
                                float x0 = a[0], x1 = a[1];
                                a[0] = std::fma(x0, ca, -(x1 * sa));
                                a[1] = std::fma(x0, sa, x1 * ca);
                                b[0] = x0 * cb - x1 * sb;
                                b[1] = x0 * sb + x1 * cb;
                            }
                        }
                    }
                    add("  rope: pos*inv_freq angles + ggml fma rotation", compare(y1, qr));
                    add("  rope: ggml angles + unfused rotation", compare(y2, qr));
                }
                auto yk = kp;
                rope_normal(yk.data(), pos.data(), T, KV, hd, (float)C.rope_theta);
                add("ref rope k", compare(yk, kr));
                Tensor kt = upf("k", T, KV * hd, gguf_rows_to_neox(kp, T, KV, hd));
                be.rope_neox(kt, pt, KV, hd, model->rope(0));
                add("rope k (tracelm)", compare(down(kt), gguf_rows_to_neox(kr, T, KV, hd)));
            }
            // caches
            const int n_kv = n_past + T;
            auto kc16 = fx.get(q + "k_cache").f16();
            auto vct16 = fx.get(q + "v_cache_t").f16();  // [n_kv, 192], [192, n_kv]
            {
                std::vector<float> got, want;
                for (int t = 0; t < T; ++t)
                    for (int i = 0; i < KV * hd; ++i) {
                        got.push_back(f16_to_f32(to_f16(kr[t * KV * hd + i])));
                        want.push_back(f16_to_f32(kc16[(n_past + t) * KV * hd + i]));
                    }
                add("ref set_rows k f16", compare(got, want));
            }
            // tracelm's caches in its layout: K heads un-permuted to NeoX order, V back to [n_kv, kv_dim]
            const auto kc_neox = gguf_rows_to_neox(kc16, n_kv, KV, hd);
            std::vector<uint16_t> vc16(vct16.size());
            for (int j = 0; j < n_kv; ++j)
                for (int i = 0; i < KV * hd; ++i) vc16[j * KV * hd + i] = vct16[i * n_kv + j];
            const auto f16_cache = [&](const char* n, const std::vector<uint16_t>& bits) {
                return up(n, DType::F16, n_kv, KV * hd, bits.data(), bits.size() * 2);
            };
            {  // kv_write into f16 caches of this eval's rows, compared with llama.cpp's cache rows
                Tensor kt = upf("k", T, KV * hd, gguf_rows_to_neox(kr, T, KV, hd)), vt = upf("v", T, KV * hd, vp);
                Tensor kct = f16_cache("kc", std::vector<uint16_t>(kc16.size())),
                       vct = f16_cache("vc", std::vector<uint16_t>(kc16.size()));
                be.kv_write(kt, vt, upi("slots", 1, T, pos), kct, vct);
                std::vector<uint16_t> gk(kc16.size()), gv(kc16.size());
                be.download(kct, gk.data());
                be.download(vct, gv.data());
                std::vector<float> got, want;
                for (int64_t i = static_cast<int64_t>(n_past) * KV * hd; i < static_cast<int64_t>(n_kv) * KV * hd; ++i) {
                    got.push_back(f16_to_f32(gk[i]));
                    want.push_back(f16_to_f32(kc_neox[i]));
                    got.push_back(f16_to_f32(gv[i]));
                    want.push_back(f16_to_f32(vc16[i]));
                }
                add("kv_write k+v (tracelm f16 cache)", compare(got, want));
            }
            {
                std::vector<float> got, want;
                for (int t = 0; t < T; ++t)
                    for (int i = 0; i < KV * hd; ++i) {
                        got.push_back(f16_to_f32(to_f16(vp[t * KV * hd + i])));
                        want.push_back(f16_to_f32(vct16[i * n_kv + n_past + t]));
                    }
                add("ref set_rows v f16", compare(got, want));
            }
            // kq
            auto kq = fx.get(q + "kq").f32();  // [H, T, n_kv]
            {
                std::vector<float> ref, trc, ref2;
                for (int h = 0; h < H; ++h)
                    for (int t = 0; t < T; ++t)
                        for (int j = 0; j < n_kv; ++j) {
                            const int kvh = h / (H / KV);
                            std::vector<uint16_t> qh(64), kh(64);
                            std::vector<float> qf(64), kf(64);
                            for (int d = 0; d < 64; ++d) {
                                qh[d] = to_f16(qr[(t * H + h) * 64 + d]);
                                kh[d] = kc16[j * KV * hd + kvh * 64 + d];
                                qf[d] = qr[(t * H + h) * 64 + d];
                                kf[d] = f16_to_f32(kh[d]);
                            }
                            ref.push_back(vec_dot_f16(64, kh.data(), qh.data()));
                            ref2.push_back(tinyblas_dot_f16(64, kh.data(), qh.data()));
                            trc.push_back(cpu::dot_f32(qf.data(), kf.data(), 64));
                        }
                add("ref kq (vec_dot_f16, q->f16)", compare(ref, kq));
                add("ref kq (tinyblas, q->f16)", compare(ref2, kq));
                add("kq (tracelm dot_f32, f32 q)", compare(trc, kq));
            }
            // softmax
            auto sm = fx.get(q + "kq_soft_max").f32();
            {
                std::vector<float> ref(sm.size());
                for (int h = 0; h < H; ++h)
                    for (int t = 0; t < T; ++t) {
                        int vis = n_past + t + 1;
                        int n = (n_kv + 7) / 8 * 8;
                        std::vector<float> x(n, 0.0f), m(n, -INFINITY), o(n);
                        for (int j = 0; j < n_kv; ++j) {
                            x[j] = kq[(h * T + t) * n_kv + j];
                            m[j] = j < vis ? 0.0f : -INFINITY;
                        }
                        soft_max(x.data(), m.data(), n, 0.125f, o.data());
                        for (int j = 0; j < n_kv; ++j) ref[(h * T + t) * n_kv + j] = o[j];
                    }
                add("ref soft_max", compare(ref, sm));
            }
            // kqv
            auto kqv = fx.get(q + "kqv_out").f32();  // [T, H*64]
            {
                std::vector<float> ref(kqv.size()), ref2(kqv.size());
                int n = (n_kv + 31) / 32 * 32;
                for (int h = 0; h < H; ++h)
                    for (int t = 0; t < T; ++t)
                        for (int d = 0; d < 64; ++d) {
                            const int kvh = h / (H / KV);
                            std::vector<uint16_t> ph(n, 0), vh(n, 0);
                            for (int j = 0; j < n_kv; ++j) {
                                ph[j] = to_f16(sm[(h * T + t) * n_kv + j]);
                                vh[j] = vct16[(kvh * 64 + d) * n_kv + j];
                            }
                            ref[(t * H + h) * 64 + d] = vec_dot_f16(n, vh.data(), ph.data());
                            ref2[(t * H + h) * 64 + d] = tinyblas_dot_f16(n, vh.data(), ph.data());
                        }
                add("ref kqv (f16 p . f16 v)", compare(ref, kqv));
                add("ref kqv (tinyblas)", compare(ref2, kqv));
            }
            // tracelm attention with llama's q (rope'd) and the f16 caches widened
            {
                auto qn = gguf_rows_to_neox(qr, T, H, hd);
                std::vector<float> kcache(n_kv * KV * hd), vcache(n_kv * KV * hd);
                for (int j = 0; j < n_kv; ++j)
                    for (int i = 0; i < KV * hd; ++i) {
                        kcache[j * KV * hd + i] = f16_to_f32(kc16[j * KV * hd + i]);
                        vcache[j * KV * hd + i] = f16_to_f32(vct16[i * n_kv + j]);
                    }
                // caches are in gguf order per head: convert to neox
                kcache = gguf_rows_to_neox(kcache, n_kv, KV, hd);
                Tensor qt = upf("q", T, H * hd, qn), kt = upf("kc", n_kv, KV * hd, kcache),
                       vt = upf("vc", n_kv, KV * hd, vcache);
                Tensor ot = upf("o", T, H * hd, std::vector<float>(T * H * hd));
                AttentionMeta meta{upi("bt", 1, 1, {0}), upi("sl", 1, 1, {n_kv}), upi("qsl", 1, 2, {0, (int)T}), 1,
                                   n_kv};
                be.attention(qt, kt, vt, meta, H, KV, hd, 0.125f, ot);
                add("attention (tracelm f32 cache, f16-valued)", compare(down(ot), kqv));
                meta.interleaved_pairs = true;
                be.attention(qt, f16_cache("kc16", kc_neox), f16_cache("vc16", vc16), meta, H, KV, hd, 0.125f, ot);
                add("attention (tracelm f16 cache)", compare(down(ot), kqv));
            }
            auto ao = fx.get(q + "attn_out").f32();
            add("matmul q4_1 o", compare(mm(kqv, T, lw.o_proj), ao));
            auto fi = fx.get(q + "ffn_inp").f32();
            {
                Tensor a = upf("a", T, 576, ao), b = upf("b", T, 576, in), o = upf("o", T, 576, in);
                be.add(a, b, o);
                add("add (tracelm)", compare(down(o), fi));
            }
            add("rms_norm+w ffn (tracelm)", compare(rms(fi, T, lw.post_norm, eps), fx.get(q + "ffn_norm").f32()));
            {
                Tensor x = upf("x", T, 576, in), d = upf("d", T, 576, ao), o = upf("o", T, 576, in);
                be.add_rms_norm(x, d, lw.post_norm, eps, o);
                add("add_rms_norm: sum (tracelm)", compare(down(x), fi));
                add("add_rms_norm: norm (tracelm)", compare(down(o), fx.get(q + "ffn_norm").f32()));
            }
            {
                std::vector<float> y(fi.size());
                for (int t = 0; t < T; ++t) rms_norm(fi.data() + t * 576, 576, eps, y.data() + t * 576);
                add("ref rms_norm", compare(y, fx.get(q + "ffn_rms").f32()));
            }
            auto fn = fx.get(q + "ffn_norm").f32();
            auto g = fx.get(q + "ffn_gate").f32(), u = fx.get(q + "ffn_up").f32();
            add("matmul q4_1 gate", compare(mm(fn, T, lw.gate_proj), g));
            add("matmul q4_1 up", compare(mm(fn, T, lw.up_proj), u));
            auto sw = fx.get(q + "ffn_swiglu").f32();
            {
                Tensor a = upf("a", T, 1536, g), b = upf("b", T, 1536, u), o = upf("o", T, 1536, g);
                be.glu(a, b, Activation::Silu, o);
                add("silu_mul (tracelm)", compare(down(o), sw));
                std::vector<float> y(g.size());
                swiglu(g.data(), u.data(), g.size(), y.data());
                add("ref swiglu", compare(y, sw));
            }
            auto fo = fx.get(q + "ffn_out").f32();
            add("matmul q4_1 down", compare(mm(sw, T, lw.down_proj), fo));
            {
                Tensor a = upf("a", T, 576, fo), b = upf("b", T, 576, fi), o = upf("o", T, 576, fi);
                be.add(a, b, o);
                add("add (tracelm)", compare(down(o), fx.get(q + "l_out").f32()));
            }
        }
        auto fin = fx.get(p + "final_input").f32();
        add("final rms_norm+w (tracelm)", compare(rms(fin, T, W.final_norm, eps), fx.get(p + "result_norm").f32()));
        if (fx.has(p + "result_output"))
            add("matmul q8_0 lm_head",
                compare(mm(fx.get(p + "result_norm").f32(), T, W.lm_head), fx.get(p + "result_output").f32()));
        n_past += T;
    }
    for (auto& k : order) {
        auto& a = stats[k];
        printf("%-52s %8lld / %8lld (%5.1f%%)  max %.3g ulp  max|d| %.3g\n", k.c_str(), (long long)a.mism,
               (long long)a.n, 100.0 * a.mism / a.n, a.maxu, a.maxabs);
    }
}
