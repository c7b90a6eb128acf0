// The scheduler with constrained decoding and logit_bias (docs/structured-output.md): a constrained, biased request
// gives the same tokens alone and among 15 others (some constrained, some biased; rows taken again as requests end),
// eagerly and replayed; every token
// a constrained request produced is one its constraint allowed; a token biased by -100 never appears and one biased
// by +100 always does.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "grammar/grammar.h"
#include "serve/scheduler.h"
#include "support/qwen3_tokenizer.h"
#include "support/scheduler_support.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

using serve::Finish;
using serve::GenerationRequest;
using serve::Scheduler;
using serve::SchedulerOptions;
using testing::drain;
using testing::Outcome;
using testing::prompt_of;

const char* kSchema = R"({"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]},
    "age": {"type": "integer", "minimum": 0, "maximum": 30}, "tags": {"type": "array", "items": {"type": "string"},
    "maxItems": 2}}, "required": ["kind", "age"]})";

struct ConstrainedFixture {
    cpu::CpuBackend be{2};
    std::unique_ptr<Model> model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    grammar::Compiler compiler{testing::qwen3_tokenizer(), model->config().vocab_size};
};

sampling::RowParams seeded_row(uint32_t seed) {
    sampling::RowParams p;
    p.temperature = 0.9f;
    p.top_k = 50;
    p.seed_lo = seed;
    return p;
}

// Request 0 is constrained by kSchema, seeded and biased; of the others every third is constrained to a JSON object,
// every fourth biased, and the rest plain.
std::vector<GenerationRequest> requests(const ConstrainedFixture& s) {
    const std::vector<int32_t> stops = testing::qwen3_tokenizer().end_of_generation_ids();
    std::vector<GenerationRequest> rs;
    for (int i = 0; i < 16; ++i) {
        GenerationRequest r;
        r.prompt = prompt_of(i, 5 + (i * 29) % 60);
        r.max_new_tokens = 40 - (i % 4) * 5;
        r.stop_ids = stops;
        if (i % 2 == 0) r.params = seeded_row(500u + static_cast<uint32_t>(i));
        if (i == 0) r.constraint = s.compiler.compile({grammar::Kind::JsonSchema, kSchema});
        if (i > 0 && i % 3 == 0) r.constraint = s.compiler.compile({grammar::Kind::JsonObject, ""});
        if (i % 4 == 0) r.logit_bias = {{220, 4.5f}, {1, -100.0f}, {90, 2.0f}};
        rs.push_back(r);
    }
    return rs;
}

// max_seqs below the requests' number: rows are taken again by new sequences, whose prompts prefill over several
// steps (max_batched_tokens) while the others decode.
std::vector<Outcome> run(ConstrainedFixture& s, const std::vector<GenerationRequest>& rs, bool capture, int max_seqs = 16) {
    SchedulerOptions o;
    o.max_seqs = max_seqs;
    o.context = 160;
    o.max_batched_tokens = 24;
    o.capture = capture;
    Scheduler sch(*s.model, s.be, o);
    std::vector<std::shared_ptr<serve::Stream>> streams;
    for (const auto& r : rs) streams.push_back(sch.submit(r));
    std::vector<Outcome> out;
    for (auto& st : streams) out.push_back(drain(*st));
    return out;
}

TEST(ConstrainedScheduler, AConstrainedRequestAloneEqualsItselfAmongFifteenOthers) {
    ConstrainedFixture s;
    const std::vector<GenerationRequest> rs = requests(s);
    const Outcome alone = run(s, {rs[0]}, true).front();
    const std::vector<Outcome> together = run(s, rs, true, 5);
    EXPECT_EQ(together[0].tokens, alone.tokens);
    EXPECT_EQ(together[0].finish, alone.finish);
    EXPECT_FALSE(alone.tokens.empty());
    // The eager steps give what the replayed ones gave, masks and biases rewritten between them alike.
    const std::vector<Outcome> eager = run(s, rs, false, 5);
    for (size_t i = 0; i < rs.size(); ++i) {
        SCOPED_TRACE(::testing::Message() << "request " << i);
        EXPECT_EQ(eager[i].tokens, together[i].tokens);
        EXPECT_NE(together[i].finish, Finish::Error) << together[i].error;
        // A bias reorders the tokens the constraint allows; it cannot ban one the constraint requires (token 1 is '"').
        const bool banned = !rs[i].logit_bias.empty() && !rs[i].constraint;
        for (const int32_t id : together[i].tokens) EXPECT_FALSE(banned && id == 1) << "a token biased by -100";
        if (!rs[i].constraint) continue;
        // An independent matcher takes every token in turn; a request that stopped ended its answer.
        grammar::Matcher m(rs[i].constraint);
        for (const int32_t id : together[i].tokens) ASSERT_TRUE(m.accept(id)) << "token " << id;
        EXPECT_TRUE(together[i].finish != Finish::Stop || m.complete());
    }
}

TEST(ConstrainedScheduler, BiasOfMinus100BansATokenAndPlus100ForcesOne) {
    ConstrainedFixture s;
    GenerationRequest plain;
    plain.prompt = prompt_of(3, 20);
    plain.max_new_tokens = 12;
    const Outcome first = run(s, {plain}, true).front();
    ASSERT_FALSE(first.tokens.empty());
    GenerationRequest banned = plain;
    banned.logit_bias = {{first.tokens[0], -100.0f}};
    const Outcome without = run(s, {banned}, true).front();
    EXPECT_EQ(without.tokens.size(), 12u);
    for (const int32_t id : without.tokens) EXPECT_NE(id, first.tokens[0]);
    GenerationRequest forced = plain;
    forced.params = seeded_row(9);
    forced.logit_bias = {{4242, 100.0f}};
    const Outcome only = run(s, {forced}, true).front();
    EXPECT_EQ(only.tokens, std::vector<int32_t>(12, 4242));
}

TEST(ConstrainedScheduler, InvalidLogitBiasIsRefused) {
    ConstrainedFixture s;
    SchedulerOptions o;
    o.context = 64;
    Scheduler sch(*s.model, s.be, o);
    GenerationRequest r;
    r.prompt = prompt_of(1, 4);
    r.logit_bias = {{static_cast<int32_t>(s.model->config().vocab_size), 1.0f}};
    EXPECT_THROW(sch.submit(r), serve::RequestError);
    r.logit_bias.assign(sampling::kMaxLogitBias + 1, {5, 1.0f});
    EXPECT_THROW(sch.submit(r), serve::RequestError);
}

}  // namespace
}  // namespace tracelm
