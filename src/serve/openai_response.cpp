#include "serve/openai_response.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "serve/text_stream.h"

namespace tracelm::serve {

using nlohmann::json;

const char* finish_reason(Finish f) {
    switch (f) {
        case Finish::Length:
            return "length";
        case Finish::Error:
            return "error";
        default:
            return "stop";
    }
}

namespace {

double api_logprob(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

json token_bytes(const Tokenizer& tok, int32_t id) {
    json bytes = json::array();
    for (const unsigned char c : tok.token_text(id)) bytes.push_back(static_cast<int>(c));
    return bytes;
}

json chat_token(const Tokenizer& tok, int32_t id, float lp) {
    return {{"token", tok.decode({id})}, {"logprob", api_logprob(lp)}, {"bytes", token_bytes(tok, id)}};
}

json usage_json(const Usage& u) {
    return {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

bool chat(Endpoint e) { return e == Endpoint::ChatCompletions; }

json envelope(const ResponseMeta& meta, const char* object) {
    return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

}  // namespace

json logprobs_json(Endpoint endpoint, const Tokenizer& tok, const std::vector<sampling::TokenLogprobs>& lps,
                   const std::vector<size_t>& text_offsets) {
    if (chat(endpoint)) {
        json content = json::array();
        for (const sampling::TokenLogprobs& t : lps) {
            json entry = chat_token(tok, t.id, t.logprob);
            json top = json::array();
            for (const auto& [id, lp] : t.top) top.push_back(chat_token(tok, id, lp));
            entry["top_logprobs"] = std::move(top);
            content.push_back(std::move(entry));
        }
        return {{"content", std::move(content)}};
    }
    json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array();
    for (const sampling::TokenLogprobs& t : lps) {
        tokens.push_back(tok.decode({t.id}));
        token_logprobs.push_back(api_logprob(t.logprob));
        json top = json::object();
        // Two ids can decode to the same text (U+FFFD); the better one keeps its place.
        for (const auto& [id, lp] : t.top) top.emplace(tok.decode({id}), api_logprob(lp));
        top_logprobs.push_back(std::move(top));
    }
    return {{"tokens", std::move(tokens)},
            {"token_logprobs", std::move(token_logprobs)},
            {"top_logprobs", std::move(top_logprobs)},
            {"text_offset", text_offsets}};
}

json prompt_logprobs_json(const Tokenizer& tok, const std::vector<int32_t>& prompt,
                          const std::vector<sampling::TokenLogprobs>& lps) {
    json out = logprobs_json(Endpoint::Completions, tok, lps);
    if (prompt.empty()) return out;
    out["tokens"].insert(out["tokens"].begin(), tok.decode({prompt[0]}));
    out["token_logprobs"].insert(out["token_logprobs"].begin(), nullptr);
    out["top_logprobs"].insert(out["top_logprobs"].begin(), nullptr);
    // Each token's offset: the characters its predecessors decode to (a stream decoder: a character split across
    // tokens counts once it completes).
    json offsets = json::array();
    TextStream text(tok, {});
    for (size_t i = 0; i < prompt.size() && i <= lps.size(); ++i) {
        offsets.push_back(text.decoded_chars());
        text.push(prompt[i]);
    }
    out["text_offset"] = std::move(offsets);
    return out;
}

void append_logprobs(json& into, const json& more, size_t offset) {
    for (const char* key : {"tokens", "token_logprobs", "top_logprobs"})
        for (const json& v : more[key]) into[key].push_back(v);
    for (const json& v : more["text_offset"]) into["text_offset"].push_back(v.get<size_t>() + offset);
}

json tool_call_json(const std::string& id, const tools::ToolCall& call) {
    return {{"id", id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

namespace {

json finish_json(Finish finish, bool made_calls) {
    if (finish != Finish::Stop && finish != Finish::Length) return nullptr;
    return made_calls && finish == Finish::Stop ? "tool_calls" : finish_reason(finish);
}

json delta_chunk(const ResponseMeta& meta, size_t choice, json delta, json finish, const json& logprobs) {
    json body = envelope(meta, "chat.completion.chunk");
    body["choices"] = json::array({{{"index", choice},
                                    {"delta", std::move(delta)},
                                    {"logprobs", logprobs},
                                    {"finish_reason", std::move(finish)}}});
    return body;
}

}  // namespace

json response_body(Endpoint endpoint, const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                   const Usage& usage) {
    json list = json::array();
    for (size_t i = 0; i < choices.size(); ++i) {
        const ChoiceResult& c = choices[i];
        const bool calls = !c.tool_calls.empty();
        json choice = {{"index", i},
                       {"logprobs", c.logprobs},
                       {"finish_reason", calls && c.finish == Finish::Stop ? "tool_calls" : finish_reason(c.finish)}};
        if (chat(endpoint)) {
            choice["message"] = {{"role", "assistant"},
                                 {"content", calls && c.text.empty() ? json(nullptr) : json(c.text)}};
            if (calls) choice["message"]["tool_calls"] = c.tool_calls;
        } else {
            choice["text"] = c.text;
        }
        list.push_back(std::move(choice));
    }
    json body = envelope(meta, chat(endpoint) ? "chat.completion" : "text_completion");
    body["choices"] = std::move(list);
    body["usage"] = usage_json(usage);
    return body;
}

json chunk(Endpoint endpoint, const ResponseMeta& meta, size_t choice, const std::string& text, Finish finish,
           const json& logprobs, bool first, bool made_calls) {
    if (chat(endpoint)) {
        json delta = {{"content", text}};
        if (first) delta["role"] = "assistant";
        return delta_chunk(meta, choice, std::move(delta), finish_json(finish, made_calls), logprobs);
    }
    json body = envelope(meta, "text_completion");
    body["choices"] = json::array(
        {{{"index", choice}, {"logprobs", logprobs}, {"finish_reason", finish_json(finish, false)}, {"text", text}}});
    return body;
}

std::vector<json> tool_call_chunks(const ResponseMeta& meta, size_t choice, size_t index, const std::string& id,
                                   const tools::ToolCall& call) {
    json head = {{"index", index},
                 {"id", id},
                 {"type", "function"},
                 {"function", {{"name", call.name}, {"arguments", ""}}}};
    json args = {{"index", index}, {"function", {{"arguments", call.arguments}}}};
    return {delta_chunk(meta, choice, {{"tool_calls", json::array({std::move(head)})}}, nullptr, nullptr),
            delta_chunk(meta, choice, {{"tool_calls", json::array({std::move(args)})}}, nullptr, nullptr)};
}

json usage_chunk(Endpoint endpoint, const ResponseMeta& meta, const Usage& usage) {
    json body = envelope(meta, chat(endpoint) ? "chat.completion.chunk" : "text_completion");
    body["choices"] = json::array();
    body["usage"] = usage_json(usage);
    return body;
}

namespace {

std::string base64_of(const std::vector<float>& v) {
    static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string bytes(v.size() * sizeof(float), '\0');
    for (size_t i = 0; i < v.size(); ++i) {
        const auto u = std::bit_cast<uint32_t>(v[i]);
        for (size_t b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<char>((u >> (8 * b)) & 0xff);  // little-endian
    }
    std::string out;
    for (size_t i = 0; i < bytes.size(); i += 3) {
        uint32_t n = static_cast<uint8_t>(bytes[i]) << 16;
        if (i + 1 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 1]) << 8;
        if (i + 2 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 2]);
        out += kAlphabet[(n >> 18) & 63];
        out += kAlphabet[(n >> 12) & 63];
        out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
        out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
    }
    return out;
}

}  // namespace

json embeddings_body(const std::vector<std::vector<float>>& vectors, bool base64, const std::string& model,
                     int64_t prompt_tokens) {
    json data = json::array();
    for (size_t i = 0; i < vectors.size(); ++i) {
        double sum = 0;
        for (const float x : vectors[i]) sum += static_cast<double>(x) * x;
        const double scale = sum > 0 ? 1 / std::sqrt(sum) : 1;
        std::vector<float> v(vectors[i].size());
        for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<float>(vectors[i][j] * scale);
        data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", base64 ? json(base64_of(v)) : json(v)}});
    }
    return {{"object", "list"},
            {"data", std::move(data)},
            {"model", model},
            {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

json error_body(const ApiError& e) {
    const auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
    return {
        {"error", {{"message", e.what()}, {"type", e.type}, {"param", or_null(e.param)}, {"code", or_null(e.code)}}}};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

}  // namespace tracelm::serve
