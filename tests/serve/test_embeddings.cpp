// Embed requests through the scheduler against an independent forward: testdata/goldens/qwen3_tiny_embeddings.json
// holds, for the prompts of qwen3_tiny_f32.json, the final-norm hidden state of the last token, L2-normalised, from
// scripts/make_embedding_goldens.py's numpy Qwen3 (whose logits it checks against transformers').
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "checkpoint/random_checkpoint.h"
#include "serve/scheduler.h"
#include "support/scheduler_support.h"
#include "support/test_support.h"
#include "support/tokenizer_goldens.h"

namespace tracelm {
namespace {

std::vector<float> normalised(std::vector<float> v) {
    double sum = 0;
    for (const float x : v) sum += static_cast<double>(x) * x;
    for (float& x : v) x = static_cast<float>(x / std::sqrt(sum));
    return v;
}

// An embed request's vector (waits for its end, bounded).
std::vector<float> embedding_of(serve::Stream& s) {
    const testing::Outcome o = testing::drain(s);
    EXPECT_EQ(o.finish, serve::Finish::Stop) << o.error;
    EXPECT_TRUE(o.tokens.empty());  // an embed request delivers no token
    return s.embedding();
}

// Every prompt's embedding is the reference's, twice (the second time its blocks come from the prefix cache), with
// prompts cut into pieces (max_batched_tokens 8) while a generation decodes beside them; the generation's tokens are
// still those it gives alone.
TEST(Embeddings, ThePooledFinalHiddenStateIsTheReferences) {
    const auto g = testing::read_json(testing::repo_path("testdata/goldens/qwen3_tiny_embeddings.json"));
    const std::string dir = testing::golden_checkpoint(g["checkpoint"]);
    cpu::CpuBackend be(2);
    const auto model = Model::load(dir, be);
    serve::SchedulerOptions opt;
    opt.max_seqs = 4;
    opt.context = 256;
    opt.max_batched_tokens = 8;
    serve::Scheduler s(*model, be, opt);

    serve::GenerationRequest gen;
    gen.prompt = g["prompts"][0]["prompt_ids"].get<std::vector<int32_t>>();
    gen.max_new_tokens = 24;
    const auto generating = s.submit(gen);
    ASSERT_GE(g["prompts"].size(), 5u);
    for (int pass = 0; pass < 2; ++pass) {
        std::vector<std::shared_ptr<serve::Stream>> streams;
        for (const auto& p : g["prompts"]) {
            serve::GenerationRequest r;
            r.prompt = p["prompt_ids"].get<std::vector<int32_t>>();
            r.embed = true;
            streams.push_back(s.submit(r));
        }
        for (size_t i = 0; i < streams.size(); ++i) {
            SCOPED_TRACE(::testing::Message() << "pass " << pass << ", prompt " << i);
            const auto want = g["prompts"][i]["embedding"].get<std::vector<double>>();
            const std::vector<float> got = normalised(embedding_of(*streams[i]));
            ASSERT_EQ(got.size(), want.size());
            ASSERT_EQ(static_cast<int>(got.size()), model->config().hidden_size);
            double max_diff = 0;
            for (size_t j = 0; j < got.size(); ++j) max_diff = std::max(max_diff, std::abs(got[j] - want[j]));
            EXPECT_LT(max_diff, 1e-4);
        }
    }
    const testing::Outcome out = testing::drain(*generating);
    EXPECT_EQ(out.finish, serve::Finish::Length);
    EXPECT_EQ(out.tokens, testing::alone(*model, be, gen, opt.context));
}

}  // namespace
}  // namespace tracelm
