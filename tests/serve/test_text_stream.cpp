// Streamed text against the whole decode: chunks end on character boundaries, stop strings are cut out even when
// they span tokens, and the chunks add up to the non-streamed text byte for byte. Real Qwen3 tokens (CJK, emoji)
// and byte-level tokens that split characters at every possible place.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "serve/text_stream.h"
#include "support/qwen3_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tracelm::serve {
namespace {

using tokenizer_detail::is_valid_utf8;

using testing::qwen3_tokenizer;

struct Streamed {
    std::vector<std::string> chunks;  // one per push, then finish()'s
    std::string text;
    bool stopped = false;
    size_t stopped_at = 0;  // tokens pushed when stopped() turned true
};

Streamed stream(const std::vector<int32_t>& ids, const std::vector<std::string>& stop) {
    TextStream ts(qwen3_tokenizer(), stop);
    Streamed s;
    for (size_t i = 0; i < ids.size(); ++i) {
        s.chunks.push_back(ts.push(ids[i]));
        if (ts.stopped() && !s.stopped) {
            s.stopped = true;
            s.stopped_at = i + 1;
        }
    }
    s.chunks.push_back(ts.finish());
    for (const std::string& c : s.chunks) s.text += c;
    return s;
}

// The reference: the text of the first token prefix that contains a stop string, cut before the earliest one in it.
std::string expected_text(const std::vector<int32_t>& ids, const std::vector<std::string>& stop, size_t* stop_token) {
    for (size_t k = 1; k <= ids.size(); ++k) {
        const std::string prefix = qwen3_tokenizer().decode(std::vector<int32_t>(ids.begin(), ids.begin() + k));
        size_t cut = std::string::npos;
        for (const std::string& s : stop) cut = std::min(cut, prefix.find(s));
        if (cut != std::string::npos) {
            *stop_token = k;
            return prefix.substr(0, cut);
        }
    }
    *stop_token = 0;
    return qwen3_tokenizer().decode(ids);
}

void expect_streams_like_reference(const std::vector<int32_t>& ids, const std::vector<std::string>& stop) {
    size_t stop_token = 0;
    const std::string want = expected_text(ids, stop, &stop_token);
    const Streamed s = stream(ids, stop);
    EXPECT_EQ(s.text, want);
    EXPECT_EQ(s.stopped, stop_token != 0);
    EXPECT_EQ(s.stopped_at, stop_token);
    std::string so_far;
    for (const std::string& c : s.chunks) {
        EXPECT_TRUE(is_valid_utf8(c)) << "a chunk ends inside a character";
        so_far += c;
        EXPECT_EQ(want.compare(0, so_far.size(), so_far), 0) << "a chunk sent text the answer does not have";
    }
}

// One byte-level token per byte of `text`, which splits every multi-byte character.
std::vector<int32_t> byte_tokens(const std::string& text) {
    std::vector<int32_t> ids;
    for (size_t b = 0; b < text.size(); ++b) {
        const auto id = qwen3_tokenizer().token_id(text.substr(b, 1));
        EXPECT_TRUE(id.has_value());
        ids.push_back(id.value_or(0));
    }
    return ids;
}

TEST(TextStream, CjkAndEmojiStreamByteExact) {
    const std::string text =
        "你好，世界！今天天气很好 😀🎉👩‍👩‍👧 emoji and 日本語のテキスト, 한국어 too. "
        "✓";
    const std::vector<int32_t> ids = qwen3_tokenizer().encode(text);
    // The tokenizer splits some characters across tokens, which is what the test is about.
    bool split = false;
    for (const int32_t id : ids) split |= !is_valid_utf8(qwen3_tokenizer().token_text(id));
    ASSERT_TRUE(split);
    const Streamed s = stream(ids, {});
    EXPECT_EQ(s.text, text);
    EXPECT_EQ(s.text, qwen3_tokenizer().decode(ids));
    for (const std::string& c : s.chunks) EXPECT_TRUE(is_valid_utf8(c));
    EXPECT_FALSE(s.stopped);
}

TEST(TextStream, StopStringAcrossTokensIsCutWithWhatFollows) {
    const std::vector<int32_t> ids = qwen3_tokenizer().encode("The answer is forty-two. Thank you for asking, goodbye!");
    ASSERT_GE(ids.size(), 8u);
    // A stop string made of the end of one token and the start of the next.
    const std::string a = qwen3_tokenizer().decode({ids[4]}), b = qwen3_tokenizer().decode({ids[5]});
    ASSERT_GE(a.size(), 2u);
    const std::string stop = a.substr(a.size() - 2) + b.substr(0, 2);
    const Streamed s = stream(ids, {stop});
    const std::string full = qwen3_tokenizer().decode(ids);
    EXPECT_EQ(s.text, full.substr(0, full.find(stop)));
    EXPECT_TRUE(s.stopped);
    EXPECT_EQ(s.stopped_at, 6u);
    // The start of the stop string was held back: the chunk of token 5 did not send it.
    std::string before;
    for (size_t i = 0; i < 5; ++i) before += s.chunks[i];
    EXPECT_EQ(before, full.substr(0, full.find(stop)));
    expect_streams_like_reference(ids, {stop});
}

TEST(TextStream, HeldBackTextThatIsNoStopIsReleased) {
    const std::vector<int32_t> ids = qwen3_tokenizer().encode("wait for it... STO");
    const Streamed s = stream(ids, {"STOP"});
    EXPECT_EQ(s.text, "wait for it... STO");
    EXPECT_FALSE(s.stopped);
    EXPECT_EQ(s.chunks.back(), "STO");  // held until the end
    const Streamed t = stream(qwen3_tokenizer().encode("wait for it... STONE"), {"STOP"});
    EXPECT_EQ(t.text, "wait for it... STONE");
}

TEST(TextStream, AStopStringSplitAcrossByteTokensStillStops) {
    const std::string text = "abc😀def";
    // The emoji's four bytes in separate tokens.
    const std::vector<int32_t> ids = byte_tokens(text);
    EXPECT_EQ(stream(ids, {"😀"}).text, "abc");
    EXPECT_EQ(stream(ids, {"c😀d"}).text, "ab");
    EXPECT_EQ(stream(ids, {"😀x"}).text, text);
    expect_streams_like_reference(ids, {"😀"});
}

TEST(TextStream, FirstCompletedStopWins) {
    const std::vector<int32_t> ids = byte_tokens("xabcdy");
    // "bc" is complete at the 'c' while "abcd" is not yet: the text ends before "bc" (as vLLM decides).
    EXPECT_EQ(stream(ids, {"abcd", "bc"}).text, "xa");
    // Completed by the same token, the one that starts first wins.
    std::vector<int32_t> ids2 = byte_tokens("xab");
    const auto cd = qwen3_tokenizer().token_id("cd");
    ASSERT_TRUE(cd.has_value());
    ids2.push_back(*cd);
    EXPECT_EQ(stream(ids2, {"bcd", "abcd"}).text, "x");
    EXPECT_EQ(stream(ids, {"y"}).text, "xabcd");
    EXPECT_EQ(stream(ids, {"x"}).text, "");
}

TEST(TextStream, NothingIsEmittedAfterTheStop) {
    TextStream ts(qwen3_tokenizer(), {"b"});
    EXPECT_EQ(ts.push(*qwen3_tokenizer().token_id("a")), "a");
    EXPECT_EQ(ts.push(*qwen3_tokenizer().token_id("b")), "");
    EXPECT_TRUE(ts.stopped());
    EXPECT_EQ(ts.push(*qwen3_tokenizer().token_id("c")), "");
    EXPECT_EQ(ts.finish(), "");
}

TEST(TextStream, RandomSplitsMatchTheReference) {
    const std::vector<std::string> alphabet = {"a", "b", "ab", " ", "你", "好", "😀", "é", "\n"};
    std::mt19937 rng(7);
    for (int trial = 0; trial < 300; ++trial) {
        std::string text;
        const int n = 1 + static_cast<int>(rng() % 12);
        for (int i = 0; i < n; ++i) text += alphabet[rng() % alphabet.size()];
        std::vector<std::string> stop;
        const int n_stop = static_cast<int>(rng() % 3);
        for (int i = 0; i < n_stop; ++i) {
            std::string s;
            const int len = 1 + static_cast<int>(rng() % 3);
            for (int j = 0; j < len; ++j) s += alphabet[rng() % alphabet.size()];
            stop.push_back(s);
        }
        // Mix byte tokens with real tokens of the pieces between random cuts.
        std::vector<int32_t> ids;
        size_t pos = 0;
        while (pos < text.size()) {
            const size_t len = std::min<size_t>(1 + rng() % 6, text.size() - pos);
            const std::string piece = text.substr(pos, len);
            const std::vector<int32_t> part =
                rng() % 2 && is_valid_utf8(piece) ? qwen3_tokenizer().encode(piece) : byte_tokens(piece);
            ids.insert(ids.end(), part.begin(), part.end());
            pos += len;
        }
        SCOPED_TRACE("text '" + text + "' trial " + std::to_string(trial));
        expect_streams_like_reference(ids, stop);
    }
}

TEST(TextStream, DecodedCharactersCountTheText) {
    TextStream ts(qwen3_tokenizer(), {});
    std::string all;
    for (const int32_t id : qwen3_tokenizer().encode("añ你😀")) all += ts.push(id);
    EXPECT_EQ(ts.decoded_chars(), 4u);
    EXPECT_THROW(TextStream(qwen3_tokenizer(), {""}), std::invalid_argument);
}

TEST(TextStream, KeptSpecialTokensAreText) {
    // A tool call parser reads markers some tokenizers hold as special tokens (Mistral's [TOOL_CALLS]); Qwen3's
    // <|im_start|> stands in for one here. Other special tokens are still skipped.
    const int32_t kept = *qwen3_tokenizer().token_id("<|im_start|>"), skipped = *qwen3_tokenizer().token_id("<|im_end|>");
    ASSERT_TRUE(qwen3_tokenizer().is_special(kept) && qwen3_tokenizer().is_special(skipped));
    std::vector<int32_t> ids = {kept};
    for (const int32_t id : qwen3_tokenizer().encode("call")) ids.push_back(id);
    ids.push_back(skipped);
    TextStream ts(qwen3_tokenizer(), {}, {kept});
    std::string text;
    for (const int32_t id : ids) text += ts.push(id);
    text += ts.finish();
    EXPECT_EQ(text, "<|im_start|>call");
    EXPECT_EQ(stream(ids, {}).text, "call");  // without keeping, as before
}

}  // namespace
}  // namespace tracelm::serve
