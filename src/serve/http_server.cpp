#include "serve/http_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <climits>
#include <cstdio>
#include <ctime>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <variant>

#include "engine/prompt.h"
#include "runtime/untrusted.h"
#include "serve/forced_tool_call.h"
#include "serve/metrics.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"
#include "serve/text_stream.h"

namespace tracelm::serve {

using nlohmann::json;
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

struct Ready {
    ServedModel model;
    Generator generator;
};

std::string random_id(const char* prefix) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    static constexpr char kHex[] = "0123456789abcdef";
    std::string id = prefix;
    for (int i = 0; i < 24; ++i) id += kHex[rng() & 15];
    return id;
}

// Equal without an early exit, so the time taken does not tell how much of a key was right.
bool same_key(std::string_view given, const std::string& key) {
    if (given.size() != key.size()) return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ key[i]);
    return diff == 0;
}

// The parser of a chat answer's tool calls: when tools are offered, tool_choice is not "none" and the model's
// format is known. A harmony answer (gpt-oss) is always parsed, for its channels: then without functions when no
// call is to be parsed, so a call stays content.
std::optional<tools::ToolCallParser> tool_parser(const OpenAIRequest& r, tools::ToolCallFormat format) {
    if (r.endpoint != Endpoint::ChatCompletions || format == tools::ToolCallFormat::None) return std::nullopt;
    const bool calls = !r.tools.is_null() && r.tool_choice != ToolChoice::None;
    if (!calls && format != tools::ToolCallFormat::Harmony) return std::nullopt;
    std::set<std::string> names;
    if (calls)
        for (const nlohmann::ordered_json& t : r.tools) names.insert(t["function"]["name"].get<std::string>());
    return tools::ToolCallParser(format, std::move(names), r.parallel_tool_calls ? SIZE_MAX : 1);
}

// The format's markers that the tokenizer holds as special tokens: decoded into the text the parser reads.
std::vector<int32_t> kept_markers(const Tokenizer& tok, tools::ToolCallFormat format) {
    std::vector<int32_t> ids;
    for (const std::string& m : tools::marker_tokens(format))
        if (const auto id = tok.token_id(m); id && tok.is_special(*id)) ids.push_back(*id);
    return ids;
}

// Unicode characters in UTF-8 text (OpenAI's text offsets count characters).
size_t utf8_chars(std::string_view s) {
    return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char ch) { return (ch & 0xC0) != 0x80; }));
}

// A submitted request, ready to be answered: a stream per choice, choice i = prompt (i / n)'s choice i % n.
struct Started {
    std::vector<std::shared_ptr<Stream>> streams;
    std::vector<std::string> echoes;  // completions' echo: each prompt's text (empty: no echo)
    std::vector<std::vector<int32_t>> scored;  // echo with logprobs: each prompt's ids, whose scores come back
    std::shared_ptr<const Ready> ready;
    OpenAIRequest request;
    ResponseMeta meta;
    int64_t prompt_tokens = 0;  // every prompt once, whatever n (as OpenAI counts them)
};

// An answer under way, which the connection pumps until it is finished. Dropping it unfinished (client gone,
// server stopping) cancels its requests.
class Answer {
   public:
    struct Out {
        std::string data;       // streamed: SSE events; non-streamed, once finished: the JSON body
        bool finished = false;  // the answer is complete
        bool error = false;     // it ended with a server error
        bool cancelled = false; // the scheduler is shutting down: end the connection
    };
    virtual ~Answer() = default;
    virtual bool streamed() const = 0;
    // What a streamed answer opens with.
    virtual std::string opening() const { return {}; }
    // `fn` runs (on a producer's thread) whenever poll() may have something new.
    virtual void on_update(std::function<void()> fn) = 0;
    // What arrived since the last call, without waiting; nothing when no update is ready.
    virtual std::optional<Out> poll() = 0;
    // Its fields of the access-log line (id, tokens, finish, queue time, time to first token since `received`).
    virtual void describe(json& line, std::chrono::steady_clock::time_point received) const {
        (void)line;
        (void)received;
    }
};

// One choice of an answer: its stream, and the text, tool calls and logprobs its tokens made so far.
struct Choice {
    Choice(std::shared_ptr<Stream> s, size_t i, std::string echo_text, std::optional<tools::ToolCallParser> p,
           TextStream t)
        : stream(std::move(s)), index(i), echo(std::move(echo_text)), parser(std::move(p)), text(std::move(t)) {}

    std::shared_ptr<Stream> stream;
    size_t index;
    std::string echo;  // the prompt's text the answer opens with (completions' echo); empty: none
    size_t echo_chars = 0;  // its characters: where the answer's text offsets start
    std::vector<int32_t> scored;  // echo with logprobs: the prompt's ids; its scores open the answer's logprobs
    bool opened = false;          // the first update (which brings the prompt's scores) was read
    json prompt_logprobs;         // non-streamed: the prompt's part of the logprobs
    std::optional<tools::ToolCallParser> parser;  // set when the answer's tool calls are parsed
    TextStream text;
    json calls = json::array();  // the calls so far (streamed: one entry per call)
    bool done = false;
    Finish finish = Finish::None;  // how it ended, once done
    ChoiceResult result;         // non-streamed: the answer so far
    std::vector<sampling::TokenLogprobs> logprobs;
    std::vector<size_t> offsets;  // each token's text offset
};

// One completion between submit and its last byte: turns its choices' stream updates into the answer's bytes.
// Streamed, each choice's chunks carry its index as they come; the usage and [DONE] follow the last choice's end.
class Job final : public Answer {
   public:
    explicit Job(Started s)
        : ready_(std::move(s.ready)),
          endpoint_(s.request.endpoint),
          streamed_(s.request.stream),
          include_usage_(s.request.include_usage),
          logprobs_(s.request.sampling.logprobs.has_value()),
          meta_(std::move(s.meta)),
          format_(ready_->model.tool_format) {
        usage_.prompt_tokens = s.prompt_tokens;
        const Tokenizer& tok = ready_->model.tokenizer;
        auto parser = tool_parser(s.request, format_);
        const std::vector<int32_t> markers = parser ? kept_markers(tok, format_) : std::vector<int32_t>{};
        const auto n = static_cast<size_t>(s.request.n);
        for (size_t i = 0; i < s.streams.size(); ++i) {
            std::string echo = s.echoes.empty() ? std::string() : s.echoes[i / n];
            choices_.push_back(std::make_unique<Choice>(std::move(s.streams[i]), i, std::move(echo), parser,
                                                        TextStream(tok, s.request.stop, markers)));
            Choice& c = *choices_.back();
            c.echo_chars = utf8_chars(c.echo);
            if (!s.scored.empty()) c.scored = s.scored[i / n];
            if (!streamed_) c.result.text = c.echo;
        }
    }
    ~Job() override {
        for (const auto& c : choices_) {
            c->stream->on_update({});
            if (!c->done) c->stream->cancel();
        }
    }
    Job(const Job&) = delete;
    Job& operator=(const Job&) = delete;

    bool streamed() const override { return streamed_; }
    void on_update(std::function<void()> fn) override {
        for (const auto& c : choices_) c->stream->on_update(fn);
    }

    // What a streamed answer opens with: a chat's, each choice's assistant role; a completion's, its echoed prompt.
    std::string opening() const override {
        if (!streamed_) return "";
        std::string out;
        for (const auto& c : choices_) {
            if (endpoint_ == Endpoint::ChatCompletions)
                out += sse(chunk(endpoint_, meta_, c->index, "", Finish::None, nullptr, true));
            else if (!c->echo.empty() && c->scored.empty())  // else with the prompt's scores, once they came
                out += sse(chunk(endpoint_, meta_, c->index, c->echo, Finish::None, nullptr));
        }
        return out;
    }

    std::optional<Out> poll() override {
        Out out;
        bool any = false;
        for (const auto& c : choices_) {
            if (c->done) continue;
            const StreamUpdate u = c->stream->next(std::chrono::milliseconds(0));
            if (u.tokens.empty() && u.finish == Finish::None) continue;
            any = true;
            if (!u.tokens.empty() && !first_token_) first_token_ = std::chrono::steady_clock::now();
            if (u.finish != Finish::None) queue_seconds_ = std::max(queue_seconds_, u.queue_seconds);
            if (u.finish == Finish::Cancelled) {
                out.cancelled = true;
                return out;
            }
            if (u.finish == Finish::Error) {
                // One failed choice fails the answer; the others are cancelled when it is dropped.
                c->done = true;
                c->finish = Finish::Error;
                out.finished = out.error = true;
                const json error = error_body(ApiError(500, u.error, "server_error"));
                out.data = streamed_ ? out.data + sse(error) + std::string(kSseDone) : dump(error);
                return out;
            }
            out.data += update(*c, u);
        }
        if (!any) return std::nullopt;
        if (std::any_of(choices_.begin(), choices_.end(), [](const auto& c) { return !c->done; })) return out;
        out.finished = true;
        if (streamed_) {
            if (include_usage_) out.data += sse(usage_chunk(endpoint_, meta_, usage_));
            out.data += kSseDone;
        } else {
            std::vector<ChoiceResult> results;
            for (const auto& c : choices_) {
                c->result.logprobs = logprobs(c->logprobs, c->offsets);
                if (!c->scored.empty()) {
                    append_logprobs(c->prompt_logprobs, c->result.logprobs);
                    c->result.logprobs = std::move(c->prompt_logprobs);
                }
                results.push_back(std::move(c->result));
            }
            out.data = dump(response_body(endpoint_, meta_, results, usage_));
        }
        return out;
    }

    void describe(json& line, std::chrono::steady_clock::time_point received) const override {
        line["id"] = meta_.id;
        line["prompt_tokens"] = usage_.prompt_tokens;
        line["completion_tokens"] = usage_.completion_tokens;
        json finishes = json::array();  // null: not finished (the client left)
        for (const auto& c : choices_) finishes.push_back(c->done ? json(finish_reason(c->finish)) : json(nullptr));
        line["finish_reason"] = finishes.size() == 1 ? finishes[0] : finishes;
        line["queue_s"] = queue_seconds_;
        line["ttft_s"] = first_token_ ? json(std::chrono::duration<double>(*first_token_ - received).count())
                                      : json(nullptr);
    }

   private:
    // A choice's update (not an error): streamed, the events to send; else kept for the body.
    std::string update(Choice& c, const StreamUpdate& u) {
        std::string opening;
        if (!c.opened && !c.scored.empty()) {
            json prompt = prompt_logprobs_json(ready_->model.tokenizer, c.scored, u.prompt_logprobs);
            if (streamed_)
                opening = sse(chunk(endpoint_, meta_, c.index, c.echo, Finish::None, prompt));
            else
                c.prompt_logprobs = std::move(prompt);
        }
        c.opened = true;
        return opening + update_answer(c, u);
    }

    std::string update_answer(Choice& c, const StreamUpdate& u) {
        std::vector<sampling::TokenLogprobs> batch;
        std::string text;
        const Finish finish = consume(c, u, text, batch);
        std::vector<tools::ToolEvent> parsed;
        if (c.parser) {
            parsed = c.parser->push(text);
            if (finish != Finish::None)
                for (tools::ToolEvent& e : c.parser->finish()) parsed.push_back(std::move(e));
        }
        if (streamed_) return c.parser ? tool_events(c, finish, parsed, batch) : events(c, finish, text, batch);
        if (c.parser) {
            for (tools::ToolEvent& e : parsed) {
                if (const auto* content = std::get_if<std::string>(&e))
                    c.result.text += *content;
                else
                    c.result.tool_calls.push_back(tool_call_json(new_id(), std::get<tools::ToolCall>(e)));
            }
        } else {
            c.result.text += text;
        }
        c.logprobs.insert(c.logprobs.end(), batch.begin(), batch.end());
        c.result.finish = finish;
        return "";
    }

    // Feeds the update's tokens to the choice's text stream; returns how the choice ends (None: not yet).
    Finish consume(Choice& c, const StreamUpdate& u, std::string& text, std::vector<sampling::TokenLogprobs>& batch) {
        for (size_t i = 0; i < u.tokens.size() && !c.text.stopped(); ++i) {
            c.offsets.push_back(c.echo_chars + c.text.decoded_chars());
            text += c.text.push(u.tokens[i]);
            ++usage_.completion_tokens;
            if (logprobs_ && i < u.logprobs.size()) batch.push_back(u.logprobs[i]);
        }
        Finish finish = u.finish;
        if (c.text.stopped()) {
            finish = Finish::Stop;
            c.stream->cancel();  // the scheduler frees the sequence; later updates are not read
        } else if (finish == Finish::Stop || finish == Finish::Length) {
            text += c.text.finish();
        }
        if (finish != Finish::None) {
            c.done = true;
            c.finish = finish;
        }
        return finish;
    }

    // The logprobs of the choice's last `batch` tokens, with their offsets.
    json batch_logprobs(const Choice& c, const std::vector<sampling::TokenLogprobs>& batch) const {
        const std::vector<size_t> offsets(c.offsets.end() - static_cast<std::ptrdiff_t>(batch.size()),
                                          c.offsets.end());
        return logprobs(batch, offsets);
    }

    std::string events(const Choice& c, Finish finish, const std::string& text,
                       const std::vector<sampling::TokenLogprobs>& batch) const {
        if (text.empty() && batch.empty() && finish == Finish::None) return "";
        return sse(chunk(endpoint_, meta_, c.index, text, finish, batch_logprobs(c, batch)));
    }

    // events() for an answer whose tool calls are parsed: content deltas, each call as its two chunks, the finish
    // on a chunk of its own. Logprobs ride on the first chunk (an empty content delta when nothing else goes out).
    std::string tool_events(Choice& c, Finish finish, const std::vector<tools::ToolEvent>& parsed,
                            const std::vector<sampling::TokenLogprobs>& batch) {
        std::vector<json> chunks;
        for (const tools::ToolEvent& e : parsed) {
            if (const auto* content = std::get_if<std::string>(&e)) {
                chunks.push_back(chunk(endpoint_, meta_, c.index, *content, Finish::None, nullptr));
            } else {
                for (json& ch : tool_call_chunks(meta_, c.index, c.calls.size(), new_id(),
                                                 std::get<tools::ToolCall>(e)))
                    chunks.push_back(std::move(ch));
                c.calls.push_back(nullptr);  // counts the calls streamed
            }
        }
        if (!batch.empty()) {
            if (chunks.empty()) chunks.push_back(chunk(endpoint_, meta_, c.index, "", Finish::None, nullptr));
            chunks.front()["choices"][0]["logprobs"] = batch_logprobs(c, batch);
        }
        if (finish != Finish::None)
            chunks.push_back(chunk(endpoint_, meta_, c.index, "", finish, nullptr, false, !c.calls.empty()));
        std::string out;
        for (const json& ch : chunks) out += sse(ch);
        return out;
    }

    std::string new_id() const {
        thread_local std::mt19937_64 rng{std::random_device{}()};
        return tools::new_call_id(format_, rng);
    }

    json logprobs(const std::vector<sampling::TokenLogprobs>& lps, const std::vector<size_t>& offsets) const {
        return logprobs_ ? logprobs_json(endpoint_, ready_->model.tokenizer, lps, offsets) : json(nullptr);
    }

    std::shared_ptr<const Ready> ready_;  // keeps the tokenizer the TextStreams read
    Endpoint endpoint_;
    bool streamed_, include_usage_, logprobs_;
    ResponseMeta meta_;
    tools::ToolCallFormat format_;
    std::vector<std::unique_ptr<Choice>> choices_;
    Usage usage_;
    std::optional<std::chrono::steady_clock::time_point> first_token_;
    double queue_seconds_ = 0;  // the longest of its choices'
};

// The embed requests of one POST /v1/embeddings, answered together once each has its vector.
class EmbeddingJob final : public Answer {
   public:
    EmbeddingJob(std::vector<std::shared_ptr<Stream>> streams, bool base64, std::string model, int64_t prompt_tokens)
        : streams_(std::move(streams)),
          vectors_(streams_.size()),
          done_(streams_.size(), false),
          base64_(base64),
          model_(std::move(model)),
          prompt_tokens_(prompt_tokens) {}
    ~EmbeddingJob() override {
        for (size_t i = 0; i < streams_.size(); ++i) {
            streams_[i]->on_update({});
            if (!done_[i]) streams_[i]->cancel();
        }
    }
    EmbeddingJob(const EmbeddingJob&) = delete;
    EmbeddingJob& operator=(const EmbeddingJob&) = delete;

    bool streamed() const override { return false; }
    void on_update(std::function<void()> fn) override {
        for (const auto& s : streams_) s->on_update(fn);
    }
    std::optional<Out> poll() override {
        for (size_t i = 0; i < streams_.size(); ++i) {
            if (done_[i]) continue;
            const StreamUpdate u = streams_[i]->next(std::chrono::milliseconds(0));
            if (u.finish == Finish::None) continue;
            done_[i] = true;
            ++finished_;
            Out out;
            if (u.finish == Finish::Cancelled) {
                out.cancelled = true;
                return out;
            }
            if (u.finish != Finish::Stop) {
                out.finished = out.error = true;
                out.data = dump(error_body(ApiError(500, u.error, "server_error")));
                return out;
            }
            vectors_[i] = streams_[i]->embedding();
        }
        if (finished_ < streams_.size()) return std::nullopt;
        Out out;
        out.finished = true;
        out.data = dump(embeddings_body(vectors_, base64_, model_, prompt_tokens_));
        return out;
    }

   private:
    std::vector<std::shared_ptr<Stream>> streams_;
    std::vector<std::vector<float>> vectors_;
    std::vector<bool> done_;
    size_t finished_ = 0;
    bool base64_;
    std::string model_;
    int64_t prompt_tokens_;
};

// The ids of a chat's prompt: the chat template's text, encoded as every prompt is. The template's errors (its
// raise_exception, an operation it cannot do, a limit) are the client's: a 400 that names the template's message.
std::vector<int32_t> chat_ids(const ServedModel& m, ChatInput input) {
    if (!m.chat_template) throw invalid_param("messages", "the model has no chat template; use /v1/completions");
    input.arguments_as_json_text = true;
    std::string text;
    try {
        text = m.chat_template->apply(input);
    } catch (const ChatTemplateError& e) {
        throw invalid_param("messages", std::string("the model's chat template refused the request: ") + e.what(),
                            "chat_template_error");
    }
    return encode_prompt(m.tokenizer, text);
}

// A 503 to retry in a second: on another replica, or here once the queue has moved.
ApiError retry_later(const std::string& why) {
    ApiError e(503, why, "server_error");
    e.retry_after = 1;
    return e;
}

// Whether `model` is one of the served model's names.
bool serves(const HttpOptions& opt, const std::string& model) {
    return model == opt.model_id || std::find(opt.aliases.begin(), opt.aliases.end(), model) != opt.aliases.end();
}

ApiError model_not_found(const std::string& model, const std::string& served) {
    return ApiError(404, "the model '" + model + "' does not exist (this server serves '" + served + "')",
                    "invalid_request_error", "model", "model_not_found");
}

// A request's "model", when it names one, must be the served model; and the model must be loaded.
const ServedModel& served(const HttpOptions& opt, const std::shared_ptr<const Ready>& rd, const std::string& model) {
    if (!model.empty() && !serves(opt, model)) throw model_not_found(model, opt.model_id);
    if (!rd) throw ApiError(503, "the model is loading", "server_error");
    return rd->model;
}

// POST /tokenize (docs/serve.md): vLLM's answer {"tokens", "count", "max_model_len"}, or llama-server's {"tokens"}.
std::string tokenize_answer(const HttpOptions& opt, const std::shared_ptr<const Ready>& rd, const std::string& body) {
    const TokenizeRequest r = parse_tokenize(body);
    const ServedModel& m = served(opt, rd, r.model);
    std::vector<int32_t> ids;
    if (r.chat) {
        ChatInput input;
        input.messages = r.messages;
        input.kwargs = r.chat_template_kwargs;
        input.tools = r.tools;
        input.add_generation_prompt = r.add_generation_prompt;
        ids = chat_ids(m, std::move(input));
    } else {
        ids = r.add_special ? encode_prompt(m.tokenizer, r.text) : m.tokenizer.encode(r.text);
    }
    if (r.llama_server) return dump({{"tokens", ids}});
    return dump({{"tokens", ids}, {"count", ids.size()}, {"max_model_len", m.context}});
}

// POST /detokenize: the ids' text under both servers' names for it, vLLM's "prompt" and llama-server's "content"
// (their requests look alike). At most a context of ids, which bounds the answer's size.
std::string detokenize_answer(const HttpOptions& opt, const std::shared_ptr<const Ready>& rd,
                              const std::string& body) {
    const DetokenizeRequest r = parse_detokenize(body);
    const ServedModel& m = served(opt, rd, r.model);
    if (static_cast<int64_t>(r.tokens.size()) > m.context)
        throw invalid_param("tokens", "'tokens' holds " + std::to_string(r.tokens.size()) +
                                          " ids, more than the model's context of " + std::to_string(m.context));
    for (const int32_t id : r.tokens)
        if (id >= m.vocab_size)
            throw invalid_param("tokens", "'tokens' id " + std::to_string(id) + " is outside the vocabulary (" +
                                              std::to_string(m.vocab_size) + " tokens)");
    const std::string text = m.tokenizer.decode(r.tokens);
    return dump({{"prompt", text}, {"content", text}});
}

// POST /v1/embeddings: each input tokenized (text as completions encode it) and submitted as an embed request
// (GenerationRequest::embed), all together, through the scheduler like any prompt; the answer comes once all are
// computed.
std::unique_ptr<Answer> start_embeddings(const HttpOptions& opt, const std::shared_ptr<const Ready>& rd,
                                         const std::string& body) {
    const EmbeddingRequest r = parse_embeddings(body);
    const ServedModel& m = served(opt, rd, r.model);
    if (m.hidden_size <= 0)
        throw invalid_param("model", "the model's files name a pooling other than the last token's, the only one this "
                                     "server computes: no embeddings for it");
    if (r.dimensions && *r.dimensions != m.hidden_size)
        throw invalid_param("dimensions", "'dimensions' must be the model's hidden size, " +
                                              std::to_string(m.hidden_size) + " (no other is computed)");
    std::vector<std::vector<int32_t>> prompts = r.token_ids;
    for (const std::string& text : r.texts) prompts.push_back(encode_prompt(m.tokenizer, text));
    int64_t prompt_tokens = 0;
    std::vector<GenerationRequest> requests;
    for (std::vector<int32_t>& ids : prompts) {
        prompt_tokens += static_cast<int64_t>(ids.size());
        GenerationRequest g;
        g.prompt = std::move(ids);
        g.max_new_tokens = 1;
        g.embed = true;
        requests.push_back(std::move(g));
    }
    std::vector<std::shared_ptr<Stream>> streams;
    try {
        streams = rd->generator.submit(std::move(requests));
    } catch (const RequestError& e) {
        throw invalid_param("input", e.what());
    } catch (const QueueFull& e) {
        throw retry_later(e.what());
    }
    return std::make_unique<EmbeddingJob>(std::move(streams), r.base64, opt.model_id, prompt_tokens);
}

// What the answer is held to, and the parameter that asked for it: a forced tool call (tool_choice "required" or
// a function) enforced by constrained decoding, as response_format is; the two together would contradict.
std::pair<std::optional<grammar::Spec>, std::string> answer_constraint(const ServedModel& m, const OpenAIRequest& r) {
    if (r.tool_choice != ToolChoice::Required && r.tool_choice != ToolChoice::Named)
        return {r.constraint, r.constraint_param};
    if (r.constraint)
        throw invalid_param(r.constraint_param,
                            "'" + r.constraint_param + "' cannot be combined with a 'tool_choice' that forces a call");
    if (m.tool_format == tools::ToolCallFormat::None)
        throw invalid_param("tool_choice", "'tool_choice' forces a call, but the model's chat template shows no "
                                           "tool-call format to write it in; use 'auto' or --chat-template");
    try {
        // A named function is one call of it, as OpenAI and vLLM answer; "required" may call several.
        const bool several = r.tool_choice == ToolChoice::Required && r.parallel_tool_calls;
        return {forced_call_constraint(m.tokenizer, m.tool_format, r.tools, r.tool_choice_name, several), "tools"};
    } catch (const grammar::GrammarError& e) {
        throw invalid_param("tools", "'tools': " + untrusted::escape(e.what()));
    }
}

// The ids of one prompt of a request: a chat's rendered messages, or a completion's prompt.
std::vector<int32_t> prompt_ids(const ServedModel& m, const OpenAIRequest& r, const CompletionPrompt* p) {
    if (p != nullptr) return p->ids ? *p->ids : encode_prompt(m.tokenizer, p->text);
    ChatInput input;
    input.messages = r.messages;
    input.kwargs = r.chat_template_kwargs;
    // tool_choice "none" still shows the tools (as vLLM does by default): the model knows them but its answer is
    // not parsed for calls.
    input.tools = r.tools;
    input.add_generation_prompt = r.add_generation_prompt;
    input.continue_final_message = r.continue_final_message;
    return chat_ids(m, std::move(input));
}

// Parses, tokenizes and submits a completion request (on the work pool: a long prompt takes a while to encode):
// n choices of each prompt, choice j sampled with the request's seed + j (as vLLM seeds a request's choices), so a
// prompt's choices differ when sampled and each prompt of a list is answered as it would be alone.
Started start_request(const HttpOptions& opt, const std::shared_ptr<const Ready>& rd, Endpoint endpoint,
                      const std::string& body) {
    const OpenAIRequest r = parse_request(endpoint, body);
    const ServedModel& m = served(opt, rd, r.model);
    const bool chat = endpoint == Endpoint::ChatCompletions;
    const char* prompt_param = chat ? "messages" : "prompt";

    GenerationRequest g;  // what every choice shares
    if (!r.ignore_eos) g.stop_ids = m.end_ids;
    for (const auto& [id, bias] : r.logit_bias) {
        if (id >= m.vocab_size)
            throw invalid_param("logit_bias", "'logit_bias' token " + std::to_string(id) +
                                                  " is outside the vocabulary (" + std::to_string(m.vocab_size) +
                                                  " tokens)");
    }
    g.logit_bias = r.logit_bias;
    const auto [constraint, constraint_param] = answer_constraint(m, r);
    if (constraint) {
        if (!m.grammar) throw invalid_param(constraint_param, "constrained decoding is not available for this model");
        // Here, on the work pool: a schema's first compilation takes a while (then it is cached); no step waits.
        try {
            g.constraint = m.grammar->compile(*constraint);
        } catch (const grammar::GrammarError& e) {
            throw invalid_param(constraint_param, "'" + constraint_param + "': " + untrusted::escape(e.what()));
        }
    }
    const uint64_t seed = sampling::resolve_seed(r.sampling);

    Started s;
    std::vector<GenerationRequest> choices;
    const size_t prompts = chat ? 1 : r.prompts.size();
    for (size_t p = 0; p < prompts; ++p) {
        const CompletionPrompt* cp = chat ? nullptr : &r.prompts[p];
        g.prompt = prompt_ids(m, r, cp);
        const auto prompt_tokens = static_cast<int64_t>(g.prompt.size());
        // A prompt that leaves no room at all is the scheduler's refusal (naming the prompt); a max_tokens beyond
        // the room left is refused here, in OpenAI's and vLLM's words, rather than cut short.
        if (r.max_tokens && prompt_tokens < m.context && prompt_tokens + *r.max_tokens > m.context)
            throw invalid_param(r.max_tokens_param,
                                "This model's maximum context length is " + std::to_string(m.context) +
                                    " tokens. However, you requested " + std::to_string(prompt_tokens + *r.max_tokens) +
                                    " tokens (" + std::to_string(prompt_tokens) + " in the " + prompt_param + ", " +
                                    std::to_string(*r.max_tokens) + " in the completion; '" + r.max_tokens_param +
                                    "'). Please reduce the length of the " + prompt_param + " or completion.");
        const int64_t budget = r.max_tokens ? *r.max_tokens : m.context - prompt_tokens;
        g.max_new_tokens = static_cast<int>(std::clamp<int64_t>(budget, 1, INT_MAX));
        s.prompt_tokens += prompt_tokens;
        if (r.echo) s.echoes.push_back(cp->ids ? m.tokenizer.decode(*cp->ids) : cp->text);
        // echo with logprobs: the prompt's tokens are scored too (OpenAI's first entry null), the answer unchanged
        if (r.echo && r.sampling.logprobs) {
            g.prompt_logprobs = *r.sampling.logprobs;
            s.scored.push_back(g.prompt);
        }
        for (int j = 0; j < r.n; ++j) {
            g.params = sampling::row_params(r.sampling, seed + static_cast<uint64_t>(j));
            choices.push_back(g);
        }
    }
    try {
        s.streams = rd->generator.submit(std::move(choices));
    } catch (const RequestError& e) {
        throw invalid_param(prompt_param, e.what());
    } catch (const QueueFull& e) {
        throw retry_later(e.what());
    }
    s.ready = rd;
    s.request = r;
    s.meta = ResponseMeta{random_id(chat ? "chatcmpl-" : "cmpl-"), static_cast<int64_t>(std::time(nullptr)),
                          opt.model_id};
    return s;
}

using Response = http::response<http::string_body>;

Response json_response(int status, const std::string& body) {
    Response res{static_cast<http::status>(status), 11};
    res.set(http::field::content_type, "application/json");
    res.body() = body;
    return res;
}

Response error_response(const ApiError& e) {
    Response res = json_response(e.status, dump(error_body(e)));
    if (e.retry_after > 0) res.set(http::field::retry_after, std::to_string(e.retry_after));
    return res;
}


// A URL path segment with its %XX escapes decoded (a malformed escape stays as it is).
std::string percent_decoded(std::string_view s) {
    const auto hex = [](char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
            out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
            i += 2;
        } else {
            out += s[i];
        }
    }
    return out;
}

// The reset a fully closed peer answers our first bytes with: the socket is then closed (a half-closed one is not).
bool peer_reset(int fd) {
    tcp_info info{};
    socklen_t len = sizeof info;
    return ::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && info.tcpi_state == TCP_CLOSE;
}

}  // namespace

struct HttpServer::Impl {
    class Connection;

    HttpOptions opt;
    // Before the io_context: handlers it destroys (a connection's last reference) still use them.
    std::mutex mu;
    std::shared_ptr<const Ready> ready;
    bool running = false, stopping = false;
    std::atomic<bool> draining{false};
    std::atomic<int> in_flight{0};  // requests taken and not yet answered in full (Connection::taken_)
    std::map<uint64_t, std::weak_ptr<Connection>> connections;  // under mu; closed by stop()
    uint64_t next_id = 0;
    const int64_t started = static_cast<int64_t>(std::time(nullptr));
    net::io_context ioc;
    net::strand<net::io_context::executor_type> accept_strand{ioc.get_executor()};  // the acceptor's handlers
    tcp::acceptor acceptor{accept_strand};
    net::steady_timer accept_retry{accept_strand};
    std::optional<net::thread_pool> work;  // created by run()

    explicit Impl(HttpOptions o) : opt(std::move(o)) {}

    std::shared_ptr<const Ready> current() {
        std::lock_guard<std::mutex> lock(mu);
        return ready;
    }

    void accept();
};

// One client connection; every handler runs on its strand.
class HttpServer::Impl::Connection : public std::enable_shared_from_this<Connection> {
   public:
    Connection(Impl& srv, tcp::socket socket)
        : srv_(srv), stream_(std::move(socket)), tick_(stream_.get_executor()), write_timer_(stream_.get_executor()) {
        beast::error_code ec;
        stream_.socket().set_option(tcp::no_delay(true), ec);
    }
    ~Connection() {
        answered();
        std::lock_guard<std::mutex> lock(srv_.mu);
        if (id_) srv_.connections.erase(*id_);
    }

    // Registers the connection (false: over max_connections, or stopping).
    bool enlist() {
        std::lock_guard<std::mutex> lock(srv_.mu);
        if (srv_.stopping || srv_.connections.size() >= static_cast<size_t>(std::max(srv_.opt.max_connections, 1)))
            return false;
        id_ = srv_.next_id++;
        srv_.connections[*id_] = weak_from_this();
        return true;
    }

    void start() {
        net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_header(); });
    }

    // Over the connection cap: 503 and close, reading nothing.
    void refuse() {
        net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
            self->keep_alive_ = false;
            self->send(error_response(ApiError(503, "too many connections", "server_error")));
        });
    }

    void close_from_outside() {
        net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->close(); });
    }

   private:
    void close() {
        if (closed_) return;
        closed_ = true;
        describe_job();
        answered();
        job_.reset();  // cancels an unfinished request
        tick_.cancel();
        write_timer_.cancel();
        beast::error_code ec;
        stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
        stream_.close();
    }

    // What a draining server answers: try another replica, or this one after its restart.
    static Response shutting_down() { return error_response(retry_later("the server is shutting down")); }

    // OpenAI's model object of the served model under the name `id` (with vLLM's max_model_len once it is loaded).
    json model_object(const std::string& id) const {
        json model = {{"id", id}, {"object", "model"}, {"created", srv_.started},
                      {"owned_by", "tracelm"}};
        if (const auto r = srv_.current()) model["max_model_len"] = r->model.context;
        return model;
    }

    // --- reading a request ---

    void read_header() {
        if (closed_) return;
        parser_.emplace();
        parser_->header_limit(srv_.opt.max_header_bytes);
        parser_->body_limit(srv_.opt.max_body_bytes);
        stream_.expires_after(srv_.opt.header_timeout);
        http::async_read_header(stream_, buffer_, *parser_,
                                [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
    }

    // A request that cannot be read on: answered (when there is something to answer) and the connection closed.
    void on_read_error(beast::error_code ec) {
        keep_alive_ = false;
        // A timeout has closed the socket already (tcp_stream's expiry): too slow a client gets no answer.
        if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::operation_aborted ||
            ec == http::error::partial_message || ec == net::error::connection_reset || ec == beast::error::timeout) {
            close();
        } else if (ec == http::error::header_limit) {
            // No line end within the limit: the request line (its target) is what is too long.
            const std::string_view seen(static_cast<const char*>(buffer_.data().data()), buffer_.size());
            const bool line = seen.find("\r\n") == std::string_view::npos;
            send(error_response(ApiError(line ? 414 : 431,
                                         std::string(line ? "the request line" : "the request headers") +
                                             " are longer than " + std::to_string(srv_.opt.max_header_bytes) +
                                             " bytes",
                                         "invalid_request_error")));
        } else if (ec == http::error::body_limit) {
            send(error_response(ApiError(
                413, "the request body is larger than " + std::to_string(srv_.opt.max_body_bytes) + " bytes",
                "invalid_request_error")));
        } else if (ec == http::error::bad_content_length || ec == http::error::bad_transfer_encoding) {
            send(error_response(
                ApiError(400, "invalid or conflicting Content-Length / Transfer-Encoding", "invalid_request_error")));
        } else if (ec.category() == http::make_error_code(http::error::bad_method).category()) {
            send(error_response(ApiError(400, "malformed HTTP request: " + ec.message(), "invalid_request_error")));
        } else {
            close();  // a socket error: nobody to answer
        }
    }

    void on_header(beast::error_code ec) {
        if (closed_) return;
        if (ec) return on_read_error(ec);
        stream_.expires_never();
        const auto& req = parser_->get();
        version_ = req.version();
        keep_alive_ = req.keep_alive();
        streamed_ = head_sent_ = chunked_ = last_ = repump_ = false;
        quiet_ = true;
        const std::string_view target(req.target().data(), req.target().size());
        const std::string path(target.substr(0, target.find('?')));
        const bool post = req.method() == http::verb::post;
        const bool get = req.method() == http::verb::get;

        const bool body_pending = !parser_->is_done();
        if (post && !parser_->content_length() && !parser_->chunked()) {
            keep_alive_ = false;
            return send(error_response(
                req.count(http::field::transfer_encoding)
                    ? ApiError(400, "a request body's Transfer-Encoding must end with chunked", "invalid_request_error")
                    : ApiError(411, "a POST needs a Content-Length or chunked transfer encoding",
                               "invalid_request_error")));
        }
        const bool open = path == "/health" || (path == "/metrics" && srv_.opt.metrics_public);
        if (!srv_.opt.api_key.empty() && !open) {
            const auto auth = req[http::field::authorization];
            const std::string_view given(auth.data(), auth.size());
            constexpr std::string_view bearer = "Bearer ";
            if (given.substr(0, bearer.size()) != bearer || !same_key(given.substr(bearer.size()), srv_.opt.api_key)) {
                if (body_pending) keep_alive_ = false;  // its body is never read
                const char* why = given.empty() ? "missing API key: send the header 'Authorization: Bearer KEY'"
                                                : "incorrect API key";
                return send(error_response(ApiError(401, why, "invalid_request_error", "", "invalid_api_key")));
            }
        }
        if (post && (path == "/v1/chat/completions" || path == "/v1/completions" || path == "/tokenize" ||
                     path == "/detokenize" || path == "/v1/embeddings")) {
            post_path_ = path;
            taken();
            if (srv_.draining) {
                keep_alive_ = false;  // its body is never read
                return send(shutting_down());
            }
            if (!body_pending) return on_body({});
            if (beast::iequals(req[http::field::expect], "100-continue")) {
                auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_, version_);
                arm_write_timer();
                return http::async_write(stream_, *cont,
                                         [self = shared_from_this(), cont](beast::error_code wec, size_t) {
                                             self->write_done();
                                             if (self->closed_) return;
                                             if (wec) return self->close();
                                             self->read_body();
                                         });
            }
            return read_body();
        }
        if (body_pending) keep_alive_ = false;  // a body no route reads: answered, then the connection closes
        if (get && path == "/health") {
            if (srv_.draining) return send(shutting_down());
            if (srv_.current()) {
                Response res{http::status::ok, 11};
                return send(std::move(res));
            }
            return send(error_response(ApiError(503, "the model is loading", "server_error")));
        }
        if (get && path == "/metrics") {
            const auto r = srv_.current();
            Response res{http::status::ok, 11};
            res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
            res.body() = prometheus_text(r ? r->generator.stats() : SchedulerStats{}, srv_.opt.model_id);
            return send(std::move(res));
        }
        if (get && path == "/v1/models") {
            json data = json::array({model_object(srv_.opt.model_id)});
            for (const std::string& alias : srv_.opt.aliases) data.push_back(model_object(alias));
            return send(json_response(200, dump({{"object", "list"}, {"data", std::move(data)}})));
        }
        if (constexpr std::string_view models = "/v1/models/"; get && path.starts_with(models)) {
            // Ids hold slashes ("org/name"), sent as they are or percent-encoded.
            const std::string id = percent_decoded(std::string_view(path).substr(models.size()));
            if (!serves(srv_.opt, id)) return send(error_response(model_not_found(id, srv_.opt.model_id)));
            return send(json_response(200, dump(model_object(id))));
        }
        send(error_response(ApiError(404, "no route for " + std::string(req.method_string()) + " " + path,
                                     "invalid_request_error")));
    }

    void read_body() {
        stream_.expires_after(srv_.opt.body_timeout);
        http::async_read(stream_, buffer_, *parser_,
                         [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
    }

    void on_body(beast::error_code ec) {
        if (closed_) return;
        if (ec) return on_read_error(ec);
        stream_.expires_never();
        auto body = std::make_shared<std::string>(std::move(parser_->get().body()));
        if (srv_.opt.log_prompts) logged_body_ = body;
        // The work pool parses and submits; its result comes back to this strand. The guard keeps run() from
        // returning (and the io_context alive) while it works.
        net::post(*srv_.work, [self = shared_from_this(), guard = net::make_work_guard(srv_.ioc), body,
                               path = post_path_] {
            // A request to answer as it generates, a whole 200 JSON answer, or an error.
            std::variant<std::unique_ptr<Answer>, std::string, ApiError> result =
                ApiError(500, "unreachable", "server_error");
            try {
                const HttpOptions& opt = self->srv_.opt;
                if (path == "/tokenize")
                    result = tokenize_answer(opt, self->srv_.current(), *body);
                else if (path == "/detokenize")
                    result = detokenize_answer(opt, self->srv_.current(), *body);
                else if (path == "/v1/embeddings")
                    result = start_embeddings(opt, self->srv_.current(), *body);
                else
                    result = std::make_unique<Job>(start_request(
                        opt, self->srv_.current(),
                        path == "/v1/completions" ? Endpoint::Completions : Endpoint::ChatCompletions, *body));
            } catch (const ApiError& e) {
                result = e;
            } catch (const std::exception& e) {
                result = ApiError(500, e.what(), "server_error");
            }
            net::post(self->stream_.get_executor(), [self, result = std::move(result)]() mutable {
                if (self->closed_) return;  // an Answer dropped here cancels its requests
                if (auto* e = std::get_if<ApiError>(&result)) return self->send(error_response(*e));
                if (auto* answer = std::get_if<std::string>(&result)) return self->send(json_response(200, *answer));
                self->start_job(std::move(std::get<std::unique_ptr<Answer>>(result)));
            });
        });
    }

    // --- answering ---

    // A whole response; then the next request, or close.
    void send(Response res) {
        status_ = static_cast<int>(res.result_int());
        res.version(version_);
        res.keep_alive(keep_alive_);
        res.prepare_payload();
        auto msg = std::make_shared<Response>(std::move(res));
        arm_write_timer();
        http::async_write(stream_, *msg, [self = shared_from_this(), msg](beast::error_code ec, size_t) {
            self->write_done();
            if (self->closed_) return;
            if (ec) return self->close();
            self->response_done();
        });
    }

    // A request taken for an answer (the POST routes) counts in in_flight until its answer is written in full or the
    // connection ends; then it writes its access-log line.
    void taken() {
        if (!taken_) ++srv_.in_flight;
        taken_ = true;
        received_ = std::chrono::steady_clock::now();
        status_ = 0;
        log_ = json::object();
        logged_body_.reset();
    }
    void answered() {
        if (!taken_) return;
        taken_ = false;
        --srv_.in_flight;
        if (srv_.opt.access_log) write_access_log();
    }
    void describe_job() {
        if (job_ && srv_.opt.access_log) job_->describe(log_, received_);
    }
    // One JSON line: the request's route, status (499: the client left before any answer), timings and what its
    // answer describes; the request body only with log_prompts.
    void write_access_log() noexcept {
        try {
            const std::chrono::duration<double> took = std::chrono::steady_clock::now() - received_;
            json line = {{"time", static_cast<int64_t>(std::time(nullptr))}, {"path", post_path_},
                         {"status", status_ != 0 ? status_ : 499}, {"duration_s", took.count()}};
            line.update(log_);
            if (srv_.opt.log_prompts && logged_body_) line["request"] = *logged_body_;
            srv_.opt.access_log(line.dump(-1, ' ', false, json::error_handler_t::replace));
        } catch (const std::exception& e) {
            std::fprintf(stderr, "access log: %s\n", e.what());
        }
    }

    void response_done() {
        answered();
        job_.reset();
        tick_.cancel();
        if (srv_.draining) keep_alive_ = false;  // a draining server's clients reconnect elsewhere
        if (!keep_alive_ || peer_eof_) return finish_and_close();
        if (monitoring_) {
            // The pending read takes what the client sent meanwhile (a pipelined request), then reads the next one.
            next_request_ = true;
            beast::error_code ec;
            stream_.socket().cancel(ec);
            return;
        }
        read_header();
    }

    // After the last response: our side ends, and what the client still sends is drained for a while (closing with
    // unread data would reset the connection, and with it the response the client may not have read yet); a client
    // still pushing a refused body past kDrainBytes is cut off.
    void finish_and_close() {
        if (closed_) return;
        beast::error_code ec;
        stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
        if (ec || peer_eof_ || monitoring_) return close();
        drain_ = std::make_shared<std::array<char, 4096>>();
        stream_.expires_after(std::chrono::seconds(1));
        drain();
    }
    void drain() {
        stream_.async_read_some(net::buffer(*drain_), [self = shared_from_this()](beast::error_code ec, size_t n) {
            if (self->closed_) return;
            self->drained_ += n;
            if (ec || self->drained_ > kDrainBytes) return self->close();
            self->drain();
        });
    }

    void start_job(std::unique_ptr<Answer> answer) {
        job_ = std::move(answer);
        streamed_ = job_->streamed();
        if (streamed_) {
            // 1.1: chunked; 1.0 knows no chunks: the body ends when the connection closes.
            if (version_ < 11) keep_alive_ = false;
            chunked_ = version_ >= 11;
            send_head("text/event-stream");
            pending_ += job_->opening();
        }
        std::weak_ptr<Connection> weak = weak_from_this();
        job_->on_update([weak, ex = stream_.get_executor()] {
            net::post(ex, [weak] {
                if (auto self = weak.lock()) self->pump();
            });
        });
        monitor();
        tick();
        pump();
    }

    // The status line and headers of an answer whose body follows in pieces.
    void send_head(const char* content_type) {
        head_sent_ = true;
        status_ = 200;
        auto head = std::make_shared<Head>();
        head->res.version(version_);
        head->res.result(http::status::ok);
        head->res.set(http::field::content_type, content_type);
        if (streamed_) head->res.set(http::field::cache_control, "no-cache");
        head->res.keep_alive(keep_alive_);
        head->res.chunked(chunked_);
        writing_ = true;
        arm_write_timer();
        http::async_write_header(stream_, head->sr, [self = shared_from_this(), head](beast::error_code ec, size_t) {
            self->on_written(ec);
        });
    }

    // Reads what the stream has for us and sends it (one write at a time).
    void pump() {
        if (closed_ || !job_) return;
        if (writing_) {
            repump_ = true;
            return;
        }
        while (job_) {
            auto out = job_->poll();
            if (!out) break;
            quiet_ = false;
            if (out->cancelled) return close();
            if (streamed_ || head_sent_) {
                pending_ += out->data;
                if (out->finished) {
                    describe_job();
                    job_.reset();
                    last_ = true;
                }
            } else if (out->finished) {
                describe_job();
                job_.reset();
                tick_.cancel();
                return send(json_response(out->error ? 500 : 200, out->data));
            }
        }
        if (head_sent_ && !streamed_ && peer_eof_ && peer_reset(stream_.socket().native_handle())) return close();
        flush();
    }

    void flush() {
        if (closed_ || writing_) return;
        if (!pending_.empty()) {
            writing_ = true;
            out_ = std::move(pending_);
            pending_.clear();
            arm_write_timer();
            auto done = [self = shared_from_this()](beast::error_code ec, size_t) { self->on_written(ec); };
            if (chunked_)
                net::async_write(stream_, http::make_chunk(net::buffer(out_)), done);
            else
                net::async_write(stream_, net::buffer(out_), done);
        } else if (last_) {
            last_ = false;
            if (!chunked_) {
                keep_alive_ = false;  // a body without length or chunks ends with the connection
                return response_done();
            }
            writing_ = true;
            arm_write_timer();
            net::async_write(stream_, http::make_chunk_last(),
                             [self = shared_from_this()](beast::error_code ec, size_t) {
                                 self->on_written(ec);
                                 if (!ec && !self->closed_) self->response_done();
                             });
        }
    }

    void on_written(beast::error_code ec) {
        writing_ = false;
        write_done();
        if (closed_) return;
        if (ec) return close();  // the client is gone: the Job cancels the request
        if (repump_) {
            repump_ = false;
            pump();
        } else {
            flush();
        }
    }

    // While a request generates: a read that sees the client leave (or keeps what it pipelines).
    void monitor() {
        if (monitoring_ || peer_eof_ || closed_ || buffer_.size() >= kPipelinedBytes) return;
        monitoring_ = true;
        stream_.expires_never();  // the read timer; writes have their own (write_timer_)
        stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
            self->on_monitor(ec, n);
        });
    }
    void on_monitor(beast::error_code ec, size_t n) {
        monitoring_ = false;
        if (closed_) return;
        buffer_.commit(n);
        if (next_request_) {
            next_request_ = false;
            if (ec && ec != net::error::operation_aborted) return close();
            return read_header();
        }
        if (ec == net::error::eof) {
            // Half-closed or gone: only a write tells which. A non-streamed answer sends its head now (its body
            // then ends with the connection); a gone client resets it, and the next update or tick sees that.
            peer_eof_ = true;
            keep_alive_ = false;
            if (!head_sent_ && job_) {
                chunked_ = false;
                send_head("application/json");
            }
            return;
        }
        if (ec) return close();  // reset: the client is gone
        monitor();
    }

    // Writes are timed apart from reads (tcp_stream has one expiry for whichever of them starts next, and the
    // pending read that watches for a disconnect must not inherit a write's): a client that does not read its
    // answer within write_timeout is closed.
    void arm_write_timer() {
        const uint64_t write = ++writes_;
        write_timer_.expires_after(srv_.opt.write_timeout);
        write_timer_.async_wait([self = shared_from_this(), write](beast::error_code ec) {
            if (!ec && self->write_pending_ == write) self->close();
        });
        write_pending_ = write;
    }
    void write_done() {
        write_pending_ = 0;
        write_timer_.cancel();
    }

    // Every `poll` while a request generates: an SSE comment when nothing was sent meanwhile, and a check that a
    // half-closed client is still there.
    void tick() {
        tick_.expires_after(srv_.opt.poll);
        tick_.async_wait([self = shared_from_this()](beast::error_code ec) {
            if (ec || self->closed_ || !self->job_) return;
            const auto limit = self->srv_.opt.request_timeout;
            if (limit.count() > 0 && std::chrono::steady_clock::now() - self->received_ > limit)
                return self->time_out();
            if (self->streamed_ && self->quiet_) self->pending_ += ": keep-alive\n\n";
            self->quiet_ = true;
            self->pump();
            if (!self->closed_) self->tick();
        });
    }

    // Past request_timeout: the answer ends with an error (dropping the Job cancels its sequences).
    void time_out() {
        char limit[32];
        std::snprintf(limit, sizeof limit, "%g s", static_cast<double>(srv_.opt.request_timeout.count()) / 1000);
        const ApiError e(504, std::string("the request was not answered within the server's --request-timeout of ") +
                                  limit, "server_error");
        describe_job();
        if (taken_) log_["finish_reason"] = "timeout";
        job_.reset();
        if (!head_sent_) return send(error_response(e));
        pending_ += streamed_ ? sse(error_body(e)) + std::string(kSseDone) : dump(error_body(e));
        last_ = true;
        flush();
    }

    static constexpr size_t kPipelinedBytes = 64 * 1024;  // held while a response is under way; then no more read
    static constexpr size_t kDrainBytes = 256 * 1024;

    struct Head {
        http::response<http::empty_body> res;
        http::response_serializer<http::empty_body> sr{res};
    };

    Impl& srv_;
    std::optional<uint64_t> id_;
    beast::tcp_stream stream_;
    beast::flat_buffer buffer_;
    std::optional<http::request_parser<http::string_body>> parser_;
    net::steady_timer tick_, write_timer_;
    uint64_t writes_ = 0, write_pending_ = 0;  // the write write_timer_ times (0: none)
    std::unique_ptr<Answer> job_;
    std::shared_ptr<std::array<char, 4096>> drain_;
    size_t drained_ = 0;
    std::string post_path_;  // the POST route whose body is read
    unsigned version_ = 11;
    bool keep_alive_ = true, closed_ = false;
    bool streamed_ = false, head_sent_ = false, chunked_ = false, peer_eof_ = false;
    bool writing_ = false, repump_ = false, last_ = false, quiet_ = true;
    bool monitoring_ = false, next_request_ = false;
    bool taken_ = false;  // counted in srv_.in_flight
    // The access log's: when the request was taken, its status, its answer's fields, its body (log_prompts).
    std::chrono::steady_clock::time_point received_;
    int status_ = 0;
    json log_;
    std::shared_ptr<const std::string> logged_body_;
    std::string pending_, out_;
};

void HttpServer::Impl::accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
        if (!acceptor.is_open()) return;
        if (ec) {
            // Out of descriptors or similar: try again shortly rather than spin.
            accept_retry.expires_after(std::chrono::milliseconds(50));
            accept_retry.async_wait([this](beast::error_code e) {
                if (!e) accept();
            });
            return;
        }
        auto c = std::make_shared<Connection>(*this, std::move(socket));
        if (c->enlist())
            c->start();
        else
            c->refuse();
        accept();
    });
}

HttpServer::HttpServer(HttpOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
    const HttpOptions& o = impl_->opt;
    try {
        const tcp::endpoint ep(net::ip::make_address(o.host), static_cast<unsigned short>(o.port));
        tcp::acceptor& a = impl_->acceptor;
        a.open(ep.protocol());
        a.set_option(net::socket_base::reuse_address(true));
        a.bind(ep);
        a.listen(net::socket_base::max_listen_connections);
        return a.local_endpoint().port();
    } catch (const std::exception& e) {
        throw std::runtime_error("cannot listen on " + o.host + ":" + std::to_string(o.port) + ": " + e.what());
    }
}

void HttpServer::run() {
    Impl& s = *impl_;
    {
        std::lock_guard<std::mutex> lock(s.mu);
        if (s.stopping || s.running) return;
        s.running = true;
    }
    s.work.emplace(static_cast<size_t>(std::max(s.opt.work_threads, 1)));
    net::post(s.accept_strand, [&s] { s.accept(); });
    std::vector<std::thread> threads;
    for (int i = 1; i < std::max(s.opt.io_threads, 1); ++i) threads.emplace_back([&s] { s.ioc.run(); });
    s.ioc.run();
    for (std::thread& t : threads) t.join();
    s.work->join();
}

void HttpServer::stop() {
    Impl& s = *impl_;
    {
        std::lock_guard<std::mutex> lock(s.mu);
        if (s.stopping) return;
        s.stopping = true;
    }
    net::post(s.accept_strand, [&s] {
        beast::error_code ec;
        s.acceptor.close(ec);
        s.accept_retry.cancel();
        std::vector<std::shared_ptr<Impl::Connection>> open;
        {
            std::lock_guard<std::mutex> lock(s.mu);
            for (auto& [id, weak] : s.connections)
                if (auto c = weak.lock()) open.push_back(std::move(c));
        }
        for (auto& c : open) c->close_from_outside();
    });
}

void HttpServer::drain() { impl_->draining = true; }

int HttpServer::in_flight() const { return impl_->in_flight.load(); }

void HttpServer::set_ready(ServedModel model, Generator generator) {
    auto r = std::make_shared<const Ready>(Ready{std::move(model), std::move(generator)});
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->ready = std::move(r);
}

}  // namespace tracelm::serve
