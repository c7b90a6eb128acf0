// Prefix caching: the block allocator's bookkeeping, and engine outputs bit for bit equal with caching on and off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/engine.h"
#include "kv/prefix_cache.h"
#include "support/engine_probe.h"
#include "support/engine_trace.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

// ---- The allocator alone ----

std::vector<int32_t> iota_tokens(int n, int32_t from) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = from + i;
    return t;
}

// Kinds of positions all computed in forwards of several rows (as a prompt's are).
const std::vector<uint8_t> kSeveralRows(64, 0);
const uint8_t* const kSeveral = kSeveralRows.data();

// Every block is in exactly one state: referenced, free, or unreferenced and cached (LRU); the counts add up.
void expect_consistent(const PrefixCache& c, int expected_refs) {
    int refs = 0, free = 0, lru = 0;
    for (int b = 0; b < c.num_blocks(); ++b) {
        const auto s = c.state(b);
        EXPECT_GE(s.refs, 0);
        EXPECT_EQ(s.refs > 0, !s.free && !s.in_lru) << "block " << b;
        EXPECT_FALSE(s.free && s.in_lru) << "block " << b;
        EXPECT_EQ(s.in_lru, s.cached && s.refs == 0) << "block " << b;
        refs += s.refs;
        free += s.free;
        lru += s.in_lru;
    }
    EXPECT_EQ(refs, expected_refs);
    EXPECT_EQ(free, c.free_count());
    EXPECT_EQ(lru, c.lru_count());
}

TEST(PrefixCacheAllocator, SharesPublishedLeadingBlocksAndCountsReferences) {
    PrefixCache c(8, 4, 1);
    const auto t = iota_tokens(12, 100);
    EXPECT_TRUE(c.match(t.data(), kSeveral, 3).empty());
    const auto a = c.allocate(3);
    EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 2}));
    c.publish(a, t.data(), kSeveral, 2);  // the third block is not full yet
    expect_consistent(c, 3);

    auto u = t;
    u[9] = 7;  // diverges inside the third block
    EXPECT_EQ(c.match(u.data(), kSeveral, 3), (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(c.state(0).refs, 2);
    EXPECT_EQ(c.state(2).refs, 1);
    u[5] = 7;  // diverges inside the second block: only the first is shared
    EXPECT_EQ(c.match(u.data(), kSeveral, 3), (std::vector<int32_t>{0}));
    EXPECT_EQ(c.stats().hit_blocks, 3);
    EXPECT_EQ(c.stats().hit_tokens, 12);
    expect_consistent(c, 6);

    c.release({0});
    c.release({0, 1});
    c.release(a);
    expect_consistent(c, 0);
    EXPECT_EQ(c.lru_count(), 2);  // the published blocks stay cached
    EXPECT_EQ(c.free_count(), 6);
    EXPECT_THROW(c.release({0}), std::invalid_argument);  // not held any more
}

TEST(PrefixCacheAllocator, SameTokensComputedAnotherWayAreAnotherBlock) {
    // Blocks of 4: the first computed by forwards of several rows, the second with its last two positions computed
    // one row per forward (decode). A lookup with other kinds does not match either, and the other computation of
    // the same tokens is published beside it.
    PrefixCache c(6, 4, 3);
    const auto t = iota_tokens(8, 20);
    const std::vector<uint8_t> decoded = {0, 0, 0, 0, 0, 0, 1, 1}, prefilled(8, 0);
    std::vector<uint8_t> one_row_first = prefilled;
    one_row_first[3] = 1;
    const auto a = c.allocate(2);
    c.publish(a, t.data(), decoded.data(), 2);
    EXPECT_EQ(c.match(t.data(), decoded.data(), 2), a);
    EXPECT_EQ(c.match(t.data(), prefilled.data(), 2), (std::vector<int32_t>{a[0]}));
    EXPECT_TRUE(c.match(t.data(), one_row_first.data(), 2).empty());
    const auto b = c.allocate(1);
    c.publish({a[0], b[0]}, t.data(), prefilled.data(), 2);
    EXPECT_TRUE(c.state(b[0]).cached);
    EXPECT_EQ(c.match(t.data(), prefilled.data(), 2), (std::vector<int32_t>{a[0], b[0]}));
    EXPECT_EQ(c.match(t.data(), decoded.data(), 2), a);
    expect_consistent(c, 2 + 2 + 1 + 1 + 2 + 2);
}

TEST(PrefixCacheAllocator, EvictsLeastRecentlyReleasedTailFirstAndNeverHeldBlocks) {
    PrefixCache c(4, 2, 9);
    const auto t = iota_tokens(8, 1);
    const auto a = c.allocate(4);
    c.publish(a, t.data(), kSeveral, 4);
    c.release(a);  // tail first into the LRU list: 3, 2, 1, 0
    EXPECT_EQ(c.lru_count(), 4);
    const auto held = c.match(t.data(), kSeveral, 1);  // block 0 is in use again
    EXPECT_EQ(held, (std::vector<int32_t>{0}));
    EXPECT_EQ(c.allocate(2), (std::vector<int32_t>{3, 2}));
    EXPECT_EQ(c.stats().evictions, 2);
    // Only block 1 is evictable: asking for two more fails with a clear message and changes nothing.
    try {
        c.allocate(2);
        FAIL() << "expected KV cache full";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("KV cache full"), std::string::npos);
    }
    EXPECT_EQ(c.state(0).refs, 1);
    // Blocks 2 and 3 were evicted: the chain is found up to block 1 only.
    EXPECT_EQ(c.match(t.data(), kSeveral, 4), (std::vector<int32_t>{0, 1}));
    expect_consistent(c, 5);  // block 0 twice, 1 once, the two fresh blocks once
}

TEST(PrefixCacheAllocator, ChainOfAReusedParentIsNotMatched) {
    // Blocks 0 -> 1 cached; block 0 is evicted and rewritten with other tokens. Block 1 still holds the old second
    // block's tokens, but it followed the old block 0: a prompt starting with the new block 0 and the old second
    // block must not share it.
    PrefixCache c(3, 2, 5);
    const auto t = iota_tokens(4, 10);
    auto a = c.allocate(2);
    c.publish(a, t.data(), kSeveral, 2);
    c.release({a[0]});  // the head released first, so it is evicted first
    c.release({a[1]});
    const auto b = c.allocate(2);  // the free block 2, then the LRU head: block 0
    EXPECT_EQ(b, (std::vector<int32_t>{2, 0}));
    std::vector<int32_t> u = {50, 51, 12, 13};
    const std::vector<int32_t> rewritten = {0};
    c.publish(rewritten, u.data(), kSeveral, 1);  // block 0 now holds 50, 51
    EXPECT_EQ(c.match(u.data(), kSeveral, 2), (std::vector<int32_t>{0}));
    EXPECT_TRUE(c.match(t.data(), kSeveral, 2).empty());
}

TEST(PrefixCacheAllocator, RepublishedChainReplacesAnEntryWithAStaleParent) {
    // Blocks 0 -> 1 cached; block 0 is evicted while 1 stays cached, its parent gone. Publishing the same chain again
    // on other blocks replaces block 1's stale entry (unreferenced: it gives way), and the new chain is matched.
    PrefixCache c(4, 2, 5);
    const auto t = iota_tokens(4, 10);
    const auto a = c.allocate(2);
    c.publish(a, t.data(), kSeveral, 2);
    c.release({a[0]});
    c.release({a[1]});
    const auto b = c.allocate(3);  // the free blocks 2 and 3, then the LRU head: block 0
    EXPECT_EQ(b, (std::vector<int32_t>{2, 3, 0}));
    c.publish({2, 3}, t.data(), kSeveral, 2);
    EXPECT_EQ(c.stats().evictions, 2);  // block 0 for the allocation, block 1's stale entry for the publication
    EXPECT_TRUE(c.state(1).free);
    EXPECT_FALSE(c.state(1).cached);
    EXPECT_EQ(c.match(t.data(), kSeveral, 2), (std::vector<int32_t>{2, 3}));
    expect_consistent(c, 5);
    c.release({2, 3});
    c.release(b);
    expect_consistent(c, 0);
    EXPECT_EQ(c.free_count() + c.lru_count(), 4);
}

TEST(PrefixCacheAllocator, TwinsAreFoundOnlyAtTheirTwinsGeneration) {
    // The sliding-window pool publishes blocks under a twin (a global block and its generation).
    PrefixCache c(4, 2, 0);
    const auto a = c.allocate(3);
    c.publish_twin(a[0], 7, 1);
    c.publish_twin(a[0], 8, 1);  // published already: it stays the twin of 7
    EXPECT_EQ(c.find_twin(7, 1), a[0]);
    EXPECT_EQ(c.find_twin(7, 2), -1);  // block 7 handed out again: another prefix
    EXPECT_EQ(c.find_twin(8, 1), -1);
    c.publish_twin(a[1], 7, 1);  // the key is held by a block in use: a[1] stays private
    EXPECT_FALSE(c.state(a[1]).cached);
    EXPECT_THROW(c.share(a[1]), std::invalid_argument);
    c.share(a[0]);
    EXPECT_EQ(c.state(a[0]).refs, 2);
    EXPECT_EQ(c.stats().hit_blocks, 1);
    EXPECT_EQ(c.stats().hit_tokens, 2);
    // A twin's entry never answers a chain lookup (the block's tokens are not known to this pool).
    const std::vector<int32_t> t = {0, 0};
    EXPECT_TRUE(c.lookup(t.data(), kSeveral, 1).empty());
    c.release({a[0]});
    c.release(a);
    expect_consistent(c, 0);
    EXPECT_EQ(c.lru_count(), 1);
    const auto b = c.allocate(4);  // the three free blocks, then the cached twin
    EXPECT_EQ(c.find_twin(7, 1), -1);
    EXPECT_EQ(c.stats().evictions, 1);
    c.release(b);
    EXPECT_THROW(c.publish_twin(b[0], 7, 1), std::invalid_argument);  // not held
    expect_consistent(c, 0);
}

// ---- The engine: caching on equals caching off ----

using testing::expect_same;
using testing::Trace;

// Nothing is held after finish(): reference counts are zero and every block is free or cached (evictable), in the
// global pool and in the sliding-window layers' own pool.
void expect_all_returned(const Engine& e) {
    const testing::EngineProbe probe(e);
    const bool slides = e.kv_sliding_blocks_total() > 0;
    for (const PrefixCache* c : {&probe.prefix_cache(), slides ? &probe.sliding_cache() : nullptr}) {
        if (!c) continue;
        for (int b = 0; b < c->num_blocks(); ++b) {
            const auto s = c->state(b);
            EXPECT_EQ(s.refs, 0) << "block " << b;
            EXPECT_TRUE(s.free != s.in_lru) << "block " << b;
        }
        EXPECT_EQ(c->free_count() + c->lru_count(), c->num_blocks());
    }
}

// The engine tests run on the tiny generated Qwen3 checkpoint and on the tiny Gemma 3 checkpoint, whose
// sliding-window layers (window 8) keep their KV in a pool of their own: a shared prefix there also needs the window
// before its end, shared from that pool (its blocks published under their global twins).
struct EngineSetup {
    bool sliding;
    DType kv;
};

class PrefixCacheEngine : public ::testing::TestWithParam<EngineSetup> {
   protected:
    PrefixCacheEngine()
        : model_(Model::load(GetParam().sliding ? testing::repo_path("testdata/models/tiny-gemma3")
                                                : testing::generated_checkpoint("tiny", 7, DType::F32),
                             be_)) {}

    EngineOptions options(bool cache) const {
        EngineOptions o;
        o.kv_dtype = GetParam().kv;
        o.block_size = 16;
        o.context = 256;
        o.prefill_chunk = 32;  // small chunks: the chunk boundaries are cheap to reach
        o.prefix_cache = cache;
        return o;
    }

    static Trace run(Engine& e, const std::vector<std::vector<int32_t>>& prompts, int steps) {
        Trace t;
        t.tokens = e.start(prompts, steps + 1);
        if (prompts.size() == 1) t.logits.push_back(e.logits());  // after a batch's prefill only the last row is set
        for (int i = 0; i < steps; ++i) {
            e.step();
            const auto s = e.sampled();
            t.tokens.insert(t.tokens.end(), s.begin(), s.end());
            t.logits.push_back(e.logits());
        }
        e.finish();
        return t;
    }

    std::vector<int32_t> random_tokens(int n) {
        std::uniform_int_distribution<int32_t> d(0, model_->config().vocab_size - 1);
        std::vector<int32_t> t(static_cast<size_t>(n));
        for (auto& x : t) x = d(rng_);
        return t;
    }
    static std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
        a.insert(a.end(), b.begin(), b.end());
        return a;
    }
    static std::vector<int32_t> head(const std::vector<int32_t>& a, size_t n) { return {a.begin(), a.begin() + n}; }

    // Runs the prompts one after the other through a caching engine and a fresh non-caching one and compares.
    void expect_on_equals_off(Engine& on, Engine& off, const std::vector<std::vector<int32_t>>& prompts, int steps) {
        for (size_t i = 0; i < prompts.size(); ++i) {
            expect_same(run(on, {prompts[i]}, steps), run(off, {prompts[i]}, steps),
                        "prompt " + std::to_string(i) + " of " + std::to_string(prompts[i].size()) + " tokens");
        }
        expect_all_returned(on);
    }

    cpu::CpuBackend be_{2};
    std::unique_ptr<Model> model_;
    std::mt19937 rng_{42};
};

TEST_P(PrefixCacheEngine, PromptsSharingALongPrefixReuseItsBlocksAndChangeNoBit) {
    Engine on(*model_, be_, options(true)), off(*model_, be_, options(false));
    const auto base = random_tokens(100);
    expect_on_equals_off(on, off,
                         {cat(base, random_tokens(20)), cat(base, random_tokens(35)), cat(base, random_tokens(3))}, 6);
    // The second and third prompt share the 6 full blocks of the first's 100 shared tokens.
    EXPECT_EQ(on.prefix_stats().hit_blocks, 12);
    EXPECT_EQ(on.prefix_stats().hit_tokens, 12 * 16);
    EXPECT_EQ(off.prefix_stats().hit_blocks, 0);
}

TEST_P(PrefixCacheEngine, AnExactPrefixOfAnotherPromptAndBackAgainChangesNoBit) {
    Engine on(*model_, be_, options(true)), off(*model_, be_, options(false));
    const auto p = random_tokens(90);
    // 64 tokens: its 4 full blocks are cached, but one token must be computed: 3 are shared.
    expect_on_equals_off(on, off, {p, head(p, 64), head(p, 40), p, cat(p, random_tokens(10))}, 4);
    EXPECT_EQ(on.prefix_stats().hit_blocks, 3 + 2 + 5 + 5);
}

TEST_P(PrefixCacheEngine, PrefixesEndingAtOrJustBeforeABlockBoundaryChangeNoBit) {
    Engine on(*model_, be_, options(true)), off(*model_, be_, options(false));
    const auto p = random_tokens(120);
    // Block size 16, chunks of 32. Prompts ending at a block boundary (48, 64, 16) and one token before one (47),
    // and prompts one token past a cached boundary: inside a chunk (17, 49: the uncached run computes that token in
    // a forward of several rows, so one block fewer is shared) and right after a chunk boundary (33, 65: the
    // uncached run's last chunk is that single token too). Last, 49 tokens sharing one block: recomputed from 16,
    // cut at 32 (cut at 48 instead, token 48 would be a forward of one row).
    const std::vector<std::vector<int32_t>> prompts = {head(p, 48), head(p, 49), head(p, 47), head(p, 64),
                                                       head(p, 65), head(p, 16), head(p, 17), head(p, 33),
                                                       head(p, 120), cat(head(p, 16), random_tokens(33))};
    // Blocks shared by each: 49 tokens share 2 of 48's 3 cached blocks (token 48 alone would be a forward of one row
    // where the uncached run's [32, 49) has 17); 47 its 2 full ones; 64 the 3 cached; 65 all 4 (the uncached run
    // computes token 64 alone too); 16 none (one token must be computed); 17 none (token 16 alone); 33 two (token 32
    // alone in both runs); 120 the 4 whose kinds match (block 4 was never full in a prompt); the last one block.
    // On the tiny Gemma 3 the last one shares nothing: the sliding pool's block of the window before position 16 was
    // evicted by then (the pool keeps 4 windows, 8 blocks, beyond the reserve, and the 120-token prompt's moving
    // window published newer ones); with room for all of them it shares 1 block there too.
    const std::vector<int64_t> shared = {0, 2, 2, 3, 4, 0, 0, 2, 4, GetParam().sliding ? 0 : 1};
    for (size_t i = 0; i < prompts.size(); ++i) {
        const int64_t before = on.prefix_stats().hit_blocks;
        expect_same(run(on, {prompts[i]}, 3), run(off, {prompts[i]}, 3), "prompt " + std::to_string(i));
        EXPECT_EQ(on.prefix_stats().hit_blocks - before, shared[i]) << "prompt of " << prompts[i].size() << " tokens";
    }
    expect_all_returned(on);
}

TEST_P(PrefixCacheEngine, DivergingInsideASharedBlockChangesNoBit) {
    Engine on(*model_, be_, options(true)), off(*model_, be_, options(false));
    const auto base = random_tokens(40);  // 2.5 blocks
    const auto a = cat(base, random_tokens(30)), b = cat(base, random_tokens(30));
    expect_on_equals_off(on, off, {a, b, a, b}, 5);
    EXPECT_EQ(on.prefix_stats().hit_blocks, 2 + 4 + 4);
}

TEST_P(PrefixCacheEngine, ABatchSharingCachedBlocksChangesNoBit) {
    EngineOptions o_on = options(true), o_off = options(false);
    o_on.max_seqs = o_off.max_seqs = 3;
    Engine on(*model_, be_, o_on), off(*model_, be_, o_off);
    const auto base = random_tokens(70);
    const std::vector<std::vector<int32_t>> batch = {cat(base, random_tokens(5)), cat(base, random_tokens(19)),
                                                     head(base, 33)};
    expect_same(run(on, {base}, 2), run(off, {base}, 2), "the prefix alone");
    expect_same(run(on, batch, 6), run(off, batch, 6), "batch");
    EXPECT_EQ(on.prefix_stats().hit_blocks, 4 + 4 + 2);
    expect_all_returned(on);
}

TEST_P(PrefixCacheEngine, ATenTurnChatChangesNoBitAndReusesEachPreviousPrompt) {
    Engine on(*model_, be_, options(true)), off(*model_, be_, options(false));
    std::vector<int32_t> conversation = random_tokens(37);  // a system prompt
    for (int turn = 0; turn < 10; ++turn) {
        conversation = cat(conversation, random_tokens(3 + turn));  // the user's turn
        const Trace t_on = run(on, {conversation}, 4), t_off = run(off, {conversation}, 4);
        expect_same(t_on, t_off, "turn " + std::to_string(turn));
        conversation = cat(conversation, t_on.tokens);  // the reply
    }
    // Every turn after the first shares at least the blocks of the previous prompt.
    EXPECT_GE(on.prefix_stats().hit_blocks, 9 * 2);
    expect_all_returned(on);
}

// A conversation as `tracelm chat` runs it (chat/chat_session.h): each turn's prompt is every earlier prompt and
// reply as computed, then the user's new tokens; the replies are decoded spans.
struct Conversation {
    std::vector<int32_t> ids;
    std::vector<TokenSpan> decoded;
    int64_t prompt_len = 0;  // of the last turn

    // The user's tokens, then a greedy reply of `reply` tokens (logits after the prefill and after every step). The
    // whole reply joins the history, as chat keeps a reply's end-of-turn token.
    Trace turn(Engine& e, const std::vector<int32_t>& user, int reply) {
        ids.insert(ids.end(), user.begin(), user.end());
        prompt_len = static_cast<int64_t>(ids.size());
        Trace t;
        t.tokens = e.start({ids}, reply, {}, {decoded});
        t.logits.push_back(e.logits());
        for (int i = 1; i < reply; ++i) {
            e.step();
            t.tokens.push_back(e.sampled().at(0));
            t.logits.push_back(e.logits());
        }
        e.finish();
        decoded.push_back({prompt_len, prompt_len + reply});
        ids.insert(ids.end(), t.tokens.begin(), t.tokens.end());
        return t;
    }
};

// Prompt tokens a turn shares with a cache that holds the whole conversation before it (`history` tokens, the
// previous prompt `prev_prompt` long): every full block the previous turn wrote (all but its last sampled token),
// one block fewer when that leaves the previous prompt's last token to be recomputed alone (it was computed in a
// forward of several rows: segments here are at least 2 tokens, so only a chunk boundary makes it a forward of one).
int64_t expected_shared(int64_t history, int64_t prev_prompt, int bs, int chunk) {
    if (history == 0) return 0;
    int64_t b = (history - 1) / bs * bs;
    if (b > 0 && b == prev_prompt - 1 && (prev_prompt - 1) % chunk != 0) b -= bs;
    return b;
}

// The smallest reply (at least 1 token) after an n-token prompt that leaves the conversation at `residue` modulo bs.
int reply_to(int64_t n, int residue, int bs) {
    const int r = static_cast<int>(((residue - n) % bs + bs) % bs);
    return r == 0 ? bs : r;
}

// Ten turns, caching on and off: tokens and logits bit for bit at every turn, and every turn after the first
// prefills only its new tokens plus the tail of the history's last block (exactly expected_shared() is shared).
// Replies end exactly at a block boundary, one token before one, and right after a prompt that ends one token into
// a block (so its last token, computed with others, would be alone in the recomputed tail: one block fewer).
TEST_P(PrefixCacheEngine, TenTurnChatSharesItsReplies) {
    const EngineOptions o_on = options(true), o_off = options(false);
    const int bs = o_on.block_size, C = o_on.prefill_chunk;
    Engine on(*model_, be_, o_on), off(*model_, be_, o_off);
    Conversation c_on, c_off;
    // (user tokens, reply tokens); -1 user: to one token past a block boundary; reply -100 - r: to residue r.
    const std::vector<std::pair<int, int>> turns = {{37, 5},  {9, -100}, {20, -115}, {-1, 4}, {12, 18},
                                                    {3, -100}, {-1, 2},   {20, -115}, {5, 14}, {6, 2}};
    int fewer = 0, at_boundary = 0, one_before = 0, replies_shared = 0;
    for (size_t i = 0; i < turns.size(); ++i) {
        const int64_t history = static_cast<int64_t>(c_on.ids.size()), prev_prompt = c_on.prompt_len;
        int user = turns[i].first;
        if (user < 0) {  // one token past a block boundary that is not a chunk boundary
            user = reply_to(history, 1, bs);
            while (user < 2 || (history + user - 1) % C == 0) user += bs;
        }
        const int64_t n = history + user;
        const int reply = turns[i].second >= 0 ? turns[i].second : reply_to(n, -100 - turns[i].second, bs);
        at_boundary += (n + reply) % bs == 0;
        one_before += (n + reply) % bs == bs - 1;
        const auto tokens = random_tokens(user);
        const int64_t hits = on.prefix_stats().hit_tokens;
        const Trace t_on = c_on.turn(on, tokens, reply);
        const Trace t_off = c_off.turn(off, tokens, reply);
        expect_same(t_on, t_off, "turn " + std::to_string(i));
        const int64_t shared = on.prefix_stats().hit_tokens - hits;
        EXPECT_EQ(shared, expected_shared(history, prev_prompt, bs, C)) << "turn " << i;
        // Only the new turn and at most the history's last block are computed (two blocks in the `fewer` case).
        const int64_t tail = history - shared;
        fewer += tail > bs;
        EXPECT_LE(tail, i == 0 ? 0 : 2 * bs) << "turn " << i;
        replies_shared += shared > prev_prompt;  // blocks that decode wrote were shared
    }
    EXPECT_GE(fewer, 2);
    EXPECT_GE(replies_shared, 2);
    EXPECT_GE(at_boundary, 2);
    EXPECT_GE(one_before, 2);
    EXPECT_EQ(off.prefix_stats().hit_tokens, 0);
    expect_all_returned(on);
}

// The same on the real SmolLM2 GGUF with its f16 cache and the default chunks of 512: ten turns of short random
// messages and replies (1 to 20 tokens; the conversation ends at a block boundary or one before in some turns), tokens
// and logits bit for bit.
TEST(PrefixCacheSmolLM2, TenTurnChatSharesItsReplies) {
    TRACELM_NEED_SMOLLM2();
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::smollm2_gguf_path(), be);
    EngineOptions o;
    o.context = 256;
    ASSERT_EQ(kv_dtype_for(*model, o), DType::F16);
    Engine on(*model, be, o);
    o.prefix_cache = false;
    Engine off(*model, be, o);
    std::mt19937 rng(5);
    std::uniform_int_distribution<int32_t> id(0, model->config().vocab_size - 1);
    Conversation c_on, c_off;
    const std::vector<std::pair<int, int>> turns = {{13, 2}, {3, 2}, {4, 8},  {3, 1}, {4, 2},
                                                    {3, 1},  {4, 1}, {3, 20}, {3, 1}, {3, 1}};
    int64_t ends_at_boundary = 0, ends_one_before = 0, replies_shared = 0;
    for (size_t i = 0; i < turns.size(); ++i) {
        const int64_t history = static_cast<int64_t>(c_on.ids.size()), prev_prompt = c_on.prompt_len;
        replies_shared += expected_shared(history, prev_prompt, 16, 512) > prev_prompt;
        std::vector<int32_t> user(static_cast<size_t>(turns[i].first));
        for (auto& t : user) t = id(rng);
        const int64_t hits = on.prefix_stats().hit_tokens;
        expect_same(c_on.turn(on, user, turns[i].second), c_off.turn(off, user, turns[i].second),
                    "turn " + std::to_string(i));
        EXPECT_EQ(on.prefix_stats().hit_tokens - hits, expected_shared(history, prev_prompt, 16, 512)) << "turn " << i;
        ends_at_boundary += c_on.ids.size() % 16 == 0;
        ends_one_before += c_on.ids.size() % 16 == 15;
    }
    EXPECT_GE(ends_at_boundary, 1);
    EXPECT_GE(ends_one_before, 1);
    EXPECT_GE(replies_shared, 1);
    expect_all_returned(on);
}

// The real Gemma 3 270M GGUF (window 512 on 15 of its 18 layers, f16 cache, chunks of 512): two prompts behind one
// 700-token prefix share its 43 full blocks, the last 32 of them (the window before position 688) from the sliding
// layers' pool; then the first prompt's whole sequence continued. Tokens and logits bit for bit with caching off.
TEST(PrefixCacheGemma3, PromptsBehindAPrefixLongerThanTheWindowChangeNoBit) {
    TRACELM_NEED_GEMMA3();
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::gemma3_gguf_path(), be);
    EngineOptions o;
    o.context = 2048;  // a sliding pool needs a context longer than a window and a prefill chunk
    Engine on(*model, be, o);
    o.prefix_cache = false;
    Engine off(*model, be, o);
    ASSERT_GT(on.kv_sliding_blocks_total(), 0);
    std::mt19937 rng(9);
    std::uniform_int_distribution<int32_t> id(3, 200000);  // ordinary tokens
    const auto tokens = [&](int n) {
        std::vector<int32_t> t(static_cast<size_t>(n));
        for (auto& x : t) x = id(rng);
        return t;
    };
    const auto run = [](Engine& e, const std::vector<int32_t>& prompt) {
        Trace t;
        t.tokens = e.start({prompt}, 4);
        t.logits.push_back(e.logits());
        for (int i = 0; i < 3; ++i) {
            e.step();
            t.tokens.push_back(e.sampled().at(0));
            t.logits.push_back(e.logits());
        }
        e.finish();
        return t;
    };
    std::vector<int32_t> a = tokens(700), b = a;
    const auto more_a = tokens(20), more_b = tokens(30);
    a.insert(a.end(), more_a.begin(), more_a.end());
    b.insert(b.end(), more_b.begin(), more_b.end());
    const Trace first = run(on, a);
    expect_same(first, run(off, a), "first prompt");
    expect_same(run(on, b), run(off, b), "second prompt");
    EXPECT_EQ(on.prefix_stats().hit_blocks, 43);
    EXPECT_EQ(testing::EngineProbe(on).sliding_cache().stats().hit_blocks, 32);
    // The first prompt continued by its reply and 10 more tokens, as one plain prompt: it shares the first prompt's 45
    // full blocks (the reply's positions, which decode computed one row at a time, are recomputed as a prompt's).
    a.insert(a.end(), first.tokens.begin(), first.tokens.end());
    const auto more = tokens(10);
    a.insert(a.end(), more.begin(), more.end());
    expect_same(run(on, a), run(off, a), "continued");
    EXPECT_EQ(on.prefix_stats().hit_blocks, 43 + 45);
    EXPECT_EQ(testing::EngineProbe(on).sliding_cache().stats().hit_blocks, 32 + 32);
    expect_all_returned(on);
}

// Two conversations take turns in a pool of just one context's blocks: each evicts the other's history, which is
// then shared up to what is left and recomputed the canonical way from there. Outputs stay those of caching off.
TEST_P(PrefixCacheEngine, ChatHistoryEvictedUnderASmallPoolKeepsOutputs) {
    EngineOptions o_on = options(true), o_off = options(false);
    o_on.context = o_off.context = 160;  // 10 blocks
    o_on.kv_blocks = 10;
    Engine on(*model_, be_, o_on), off(*model_, be_, o_off);
    Conversation a_on, a_off, b_on, b_off;
    for (int turn = 0; turn < 5; ++turn) {
        for (auto [c_on, c_off] : {std::pair{&a_on, &a_off}, std::pair{&b_on, &b_off}}) {
            const auto user = random_tokens(turn == 0 ? 30 : 8 + 3 * turn);
            const int reply = 4 + turn;
            expect_same(c_on->turn(on, user, reply), c_off->turn(off, user, reply),
                        "turn " + std::to_string(turn) + (c_on == &a_on ? " of a" : " of b"));
            expect_all_returned(on);
        }
    }
    EXPECT_GT(on.prefix_stats().evictions, 0);
    EXPECT_GT(on.prefix_stats().hit_blocks, 0);
}

// Spans that decode did not generate are refused before anything is held.
TEST_P(PrefixCacheEngine, DecodedSpansMustBeOrderedAndBeforeTheLastToken) {
    Engine e(*model_, be_, options(true));
    const auto p = random_tokens(20);
    for (const std::vector<TokenSpan>& bad : std::vector<std::vector<TokenSpan>>{
             {{5, 5}}, {{3, 8}, {7, 9}}, {{10, 20}}, {{8, 9}, {2, 4}}, {{-1, 3}}}) {
        EXPECT_THROW(e.admit(p, {}, sampling::RowParams{}, 30, bad), std::invalid_argument);
    }
    EXPECT_EQ(testing::EngineProbe(e).free_rows(), 1);
    const PrefixCache& cache = testing::EngineProbe(e).prefix_cache();
    EXPECT_EQ(cache.free_count(), cache.num_blocks());
}

TEST_P(PrefixCacheEngine, EvictionUnderASmallPoolKeepsOutputsAndHeldBlocks) {
    EngineOptions o_on = options(true), o_off = options(false);
    o_on.context = o_off.context = 96;  // 6 blocks in all: a 70-token prompt and 10 new tokens take 5
    Engine on(*model_, be_, o_on), off(*model_, be_, o_off);
    const auto x = random_tokens(70), y = random_tokens(70), z = cat(head(x, 30), random_tokens(40));
    const std::vector<std::vector<int32_t>> prompts = {x, y, x, z, x, y, y};
    for (size_t i = 0; i < prompts.size(); ++i) {
        Trace t_on;
        t_on.tokens = on.start({prompts[i]}, 10);
        t_on.logits.push_back(on.logits());
        // While a sequence runs, its 5 blocks are held (one reference each) and not evictable.
        int held = 0;
        const PrefixCache& cache = testing::EngineProbe(on).prefix_cache();
        for (int b = 0; b < cache.num_blocks(); ++b) {
            const auto s = cache.state(b);
            held += s.refs;
            EXPECT_TRUE(s.refs == 0 || (!s.free && !s.in_lru));
        }
        EXPECT_EQ(held, 5);
        for (int k = 0; k < 9; ++k) {
            on.step();
            t_on.tokens.push_back(on.sampled().at(0));
            t_on.logits.push_back(on.logits());
        }
        on.finish();
        expect_same(t_on, run(off, {prompts[i]}, 9), "prompt " + std::to_string(i));
    }
    EXPECT_GT(on.prefix_stats().evictions, 0);
    EXPECT_GT(on.prefix_stats().hit_blocks, 0);
    expect_all_returned(on);
}

// Sliding-window layers: the window before a shared prefix's end must be cached in their pool too. A prompt sharing
// the first 60 tokens of an earlier 100-token one shares 3 blocks (48 tokens) with the default pool, whose room keeps
// the window block (32-47) that left the earlier sequence's window during its prefill; with no room beyond the
// sequences' reserves that block is evicted at once, so nothing is shared. Outputs equal caching off either way.
TEST_P(PrefixCacheEngine, SlidingWindowsEvictedFromTheirPoolShareNothing) {
    if (!GetParam().sliding) GTEST_SKIP() << "a model without sliding-window layers";
    EngineOptions least = options(true);
    least.kv_sliding_blocks = 4;  // the reserve: (8 - 1 + 32) / 16 rounded up, plus 1
    Engine roomy(*model_, be_, options(true)), tight(*model_, be_, least), off(*model_, be_, options(false));
    EXPECT_EQ(tight.kv_sliding_blocks_total(), 4);
    EXPECT_EQ(roomy.kv_sliding_blocks_total(), 4 + 4 * 2);
    least.kv_sliding_blocks = 3;
    EXPECT_THROW(Engine(*model_, be_, least), std::invalid_argument);
    const auto x = random_tokens(100), y = cat(head(x, 60), random_tokens(20));
    for (Engine* e : {&roomy, &tight}) expect_on_equals_off(*e, off, {x, y}, 6);
    EXPECT_EQ(roomy.prefix_stats().hit_blocks, 3);
    EXPECT_EQ(testing::EngineProbe(roomy).sliding_cache().stats().hit_blocks, 1);
    EXPECT_EQ(tight.prefix_stats().hit_blocks, 0);
    EXPECT_GT(testing::EngineProbe(tight).sliding_cache().stats().evictions, 0);
}

TEST_P(PrefixCacheEngine, ReplayEqualsEagerWithSharedBlocks) {
    EngineOptions o = options(true);
    o.capture = false;
    Engine eager(*model_, be_, o);
    o.capture = true;
    Engine replay(*model_, be_, o);
    const auto base = random_tokens(50);
    for (const auto& p : {cat(base, random_tokens(9)), cat(base, random_tokens(4)), base}) {
        expect_same(run(eager, {p}, 8), run(replay, {p}, 8), "prompt of " + std::to_string(p.size()));
    }
    EXPECT_TRUE(replay.replays() > 0);
    EXPECT_EQ(replay.prefix_stats().hit_blocks, 6);
}

// ---- The CLI ----

std::string tiny_model_arg() { return "--model '" + testing::generated_checkpoint("tiny", 3, DType::F32) + "'"; }

TEST(PrefixCacheCli, GenerateJsonReportsCountersAndTheFlagTurnsCachingOff) {
    const auto on = testing::run_tracelm("generate " + tiny_model_arg() + " --prompt 'Hello there' --max-tokens 5 --json",
                                         false);
    ASSERT_EQ(on.code, 0) << on.out;
    const auto j = nlohmann::json::parse(on.out);
    EXPECT_EQ(j["prefix_cache"]["enabled"], true);
    EXPECT_EQ(j["prefix_cache"]["hit_blocks"], 0);  // one request in a fresh engine: nothing to share
    EXPECT_EQ(j["prefix_cache"]["evictions"], 0);
    const auto off = testing::run_tracelm(
        "generate " + tiny_model_arg() + " --prompt 'Hello there' --max-tokens 5 --json --no-prefix-cache", false);
    ASSERT_EQ(off.code, 0) << off.out;
    const auto jo = nlohmann::json::parse(off.out);
    EXPECT_EQ(jo["prefix_cache"]["enabled"], false);
    EXPECT_EQ(jo["tokens"], j["tokens"]);
}

TEST(PrefixCacheCli, ChatRepliesAreTheSameWithAndWithoutTheCache) {
    const std::string input = "printf 'Hello\\nHow are you\\nTell me more\\n' |";
    const std::string args = "chat " + tiny_model_arg() + " --max-tokens 6 --threads 2";
    const auto on = testing::run_tracelm_env(input, args, false);
    const auto off = testing::run_tracelm_env(input, args + " --no-prefix-cache", false);
    ASSERT_EQ(on.code, 0) << on.out;
    ASSERT_EQ(off.code, 0) << off.out;
    EXPECT_EQ(on.out, off.out);
    EXPECT_GE(std::count(on.out.begin(), on.out.end(), '\n'), 3);  // three replies (one line or more each)
}

// Each turn reports its prompt tokens and those shared; the second turn shares the first turn's reply too (20
// tokens: at least one more full block than the first prompt), and the tiny checkpoint's ChatML template keeps the
// earlier turns' text, so nothing is encoded afresh.
TEST(PrefixCacheCli, ChatSharesThePreviousReply) {
    const auto r = testing::run_tracelm_env("printf 'Hello\\nTell me more\\n' |",
                                            "chat " + tiny_model_arg() + " --max-tokens 20 --threads 2");
    ASSERT_EQ(r.code, 0) << r.out;
    std::vector<std::pair<long, long>> turns;  // (prompt tokens, from the cache)
    const std::string key = " prompt tokens, ";
    for (size_t at = r.out.find(key); at != std::string::npos; at = r.out.find(key, at + 1)) {
        const size_t open = r.out.rfind('[', at);
        turns.emplace_back(std::stol(r.out.substr(open + 1)), std::stol(r.out.substr(at + key.size())));
    }
    ASSERT_EQ(turns.size(), 2u) << r.out;
    EXPECT_EQ(turns[0].second, 0);
    EXPECT_GE(turns[1].second, turns[0].first) << r.out;
    EXPECT_EQ(turns[1].second % 16, 0);
    EXPECT_EQ(r.out.find("afresh"), std::string::npos) << r.out;
}

// The mode's report, not its speed: every request after the first shares the system prompt's 4 blocks.
TEST(PrefixCacheCli, BenchSharedPrefixModeReportsTtftAndCounters) {
    const auto r = testing::run_tracelm(
        "bench " + tiny_model_arg() + " --shared-prefix 64 --prompt-tokens 4 --turns 3 --threads 2 --json", false);
    ASSERT_EQ(r.code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["tokens_match"], true);
    EXPECT_EQ(j["hit_blocks"], 3 * 4);
    EXPECT_EQ(j["hit_tokens"], 3 * 64);
    EXPECT_EQ(j["per_turn_ms"].size(), 3u);
    EXPECT_GT(j["ttft_cached_ms"].get<double>(), 0);
    EXPECT_GT(j["ttft_uncached_ms"].get<double>(), 0);

    const auto refused = testing::run_tracelm("bench " + tiny_model_arg() + " --shared-prefix 64 --no-prefix-cache");
    EXPECT_NE(refused.code, 0);
    EXPECT_NE(refused.out.find("--no-prefix-cache does not apply"), std::string::npos) << refused.out;
}

INSTANTIATE_TEST_SUITE_P(ModelsAndKvDtypes, PrefixCacheEngine,
                         ::testing::Values(EngineSetup{false, DType::F32}, EngineSetup{false, DType::F16},
                                           EngineSetup{true, DType::F32}, EngineSetup{true, DType::F16}),
                         [](const auto& param_info) {
                             const EngineSetup& p = param_info.param;
                             return (p.sliding ? "gemma3_" : "") + std::string(dtype_name(p.kv));
                         });

}  // namespace
}  // namespace tracelm
