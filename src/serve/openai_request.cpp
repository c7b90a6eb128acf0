#include "serve/openai_request.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <limits>
#include <set>
#include <span>
#include <string_view>
#include <utility>

#include "runtime/untrusted.h"

namespace tracelm::serve {

// Ordered, as the body has them: a chat template prints messages and tools in the client's order.
using json = nlohmann::ordered_json;

ApiError invalid_param(const std::string& param, const std::string& message, const std::string& code) {
    return ApiError(400, message, "invalid_request_error", param, code);
}

namespace {

[[noreturn]] void wrong_type(const std::string& param, const char* expected) {
    throw invalid_param(param, "'" + param + "' must be " + expected, "invalid_type");
}

// The field, or nullptr when absent or null (clients send null for "not given").
const json* field(const json& body, const char* name) {
    const auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> number(const json& body, const char* name) {
    const json* v = field(body, name);
    if (!v) return std::nullopt;
    if (!v->is_number()) wrong_type(name, "a number");
    return v->get<double>();
}

std::optional<int64_t> integer(const json& body, const char* name) {
    const json* v = field(body, name);
    if (!v) return std::nullopt;
    if (!v->is_number_integer() ||
        (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())))
        wrong_type(name, "an integer");
    return v->get<int64_t>();
}

std::optional<bool> boolean(const json& body, const char* name, const char* param = nullptr) {
    const json* v = field(body, name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) wrong_type(param ? param : name, "a boolean");
    return v->get<bool>();
}

// A message's content: a string, or a list of {"type": "text", "text": ...} parts (kept as a list: the chat template
// decides how to join them).
void check_content(const json& content, const std::string& param) {
    if (content.is_string()) return;
    if (!content.is_array()) wrong_type(param, "a string or a list of text parts");
    for (size_t i = 0; i < content.size(); ++i) {
        const json& part = content[i];
        const std::string p = param + "[" + std::to_string(i) + "]";
        if (!part.is_object()) wrong_type(p, "an object {\"type\": \"text\", \"text\": ...}");
        const json* type = field(part, "type");
        if (!type || !type->is_string() || type->get<std::string>() != "text")
            throw invalid_param(p + ".type", "only content parts of type 'text' are supported");
        const json* t = field(part, "text");
        if (!t || !t->is_string()) wrong_type(p + ".text", "a string");
    }
}

// An assistant message's tool_calls: [{"id", "type": "function", "function": {"name", "arguments": JSON text}}].
void check_tool_calls(const json& m, const std::string& p) {
    const json* calls = field(m, "tool_calls");
    if (!calls) return;
    const std::string param = p + ".tool_calls";
    if (!calls->is_array()) wrong_type(param, "a list of tool calls");
    for (size_t j = 0; j < calls->size(); ++j) {
        const json& c = (*calls)[j];
        const std::string cp = param + "[" + std::to_string(j) + "]";
        if (!c.is_object()) wrong_type(cp, "an object {\"type\": \"function\", \"function\": ...}");
        if (const json* type = field(c, "type"); type && (!type->is_string() || type->get<std::string>() != "function"))
            throw invalid_param(cp + ".type", "only tool calls of type 'function' are supported");
        if (const json* id = field(c, "id"); id && !id->is_string()) wrong_type(cp + ".id", "a string");
        const json* fn = field(c, "function");
        if (!fn || !fn->is_object()) wrong_type(cp + ".function", "an object with 'name' and 'arguments'");
        const json* name = field(*fn, "name");
        if (!name || !name->is_string()) wrong_type(cp + ".function.name", "a string");
        const json* args = field(*fn, "arguments");
        if (!args || !args->is_string()) wrong_type(cp + ".function.arguments", "a string of JSON");
        if (!args->get<std::string>().empty()) {
            try {
                (void)untrusted::parse_ordered_json(args->get<std::string>());
            } catch (const std::exception& e) {
                throw invalid_param(cp + ".function.arguments",
                                    "'" + cp + ".function.arguments' is not JSON: " + e.what());
            }
        }
    }
}

bool valid_function_name(const std::string& n) {
    if (n.empty() || n.size() > 64) return false;
    return std::all_of(n.begin(), n.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    });
}

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}].
json parse_tools(const json& body) {
    const json* v = field(body, "tools");
    if (!v) return nullptr;
    if (!v->is_array()) wrong_type("tools", "a list of tools");
    if (v->empty()) return nullptr;
    std::set<std::string> names;
    for (size_t i = 0; i < v->size(); ++i) {
        const json& t = (*v)[i];
        const std::string p = "tools[" + std::to_string(i) + "]";
        if (!t.is_object()) wrong_type(p, "an object {\"type\": \"function\", \"function\": ...}");
        const json* type = field(t, "type");
        if (!type || !type->is_string() || type->get<std::string>() != "function")
            throw invalid_param(p + ".type", "'" + p + ".type' must be 'function' (the only tools supported)");
        const json* fn = field(t, "function");
        if (!fn || !fn->is_object()) wrong_type(p + ".function", "an object with a 'name'");
        const json* name = field(*fn, "name");
        if (!name || !name->is_string()) wrong_type(p + ".function.name", "a string");
        const std::string n = name->get<std::string>();
        if (!valid_function_name(n))
            throw invalid_param(p + ".function.name", "'" + p + ".function.name' must be 1 to 64 of a-z, A-Z, 0-9, "
                                                      "underscores and dashes, got '" + untrusted::escape(n) + "'");
        if (!names.insert(n).second)
            throw invalid_param(p + ".function.name", "'" + p + ".function.name': the function '" + n +
                                                          "' is given twice");
        if (const json* d = field(*fn, "description"); d && !d->is_string())
            wrong_type(p + ".function.description", "a string");
        if (const json* ps = field(*fn, "parameters"); ps && !ps->is_object())
            wrong_type(p + ".function.parameters", "a JSON schema object");
        if (const json* st = field(*fn, "strict"); st && !st->is_boolean())
            wrong_type(p + ".function.strict", "a boolean");
    }
    return *v;
}

// tool_choice: "none", "auto", "required" or {"type": "function", "function": {"name"}} naming one of the tools.
void parse_tool_choice(const json& body, OpenAIRequest& r) {
    for (const char* legacy : {"functions", "function_call"})
        if (field(body, legacy))
            throw invalid_param(legacy,
                                std::string("'") + legacy + "' is not supported; use 'tools' and 'tool_choice'");
    if (const auto p = boolean(body, "parallel_tool_calls")) r.parallel_tool_calls = *p;
    const json* v = field(body, "tool_choice");
    if (!v) return;
    if (v->is_string()) {
        const std::string c = v->get<std::string>();
        if (c == "none") {
            r.tool_choice = ToolChoice::None;
        } else if (c == "auto") {
            r.tool_choice = ToolChoice::Auto;
        } else if (c == "required") {
            r.tool_choice = ToolChoice::Required;
        } else {
            throw invalid_param("tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or a function, got '" +
                                                   untrusted::escape(c) + "'");
        }
    } else if (v->is_object()) {
        const json* type = field(*v, "type");
        if (!type || !type->is_string() || type->get<std::string>() != "function")
            throw invalid_param("tool_choice.type", "'tool_choice.type' must be 'function'");
        const json* fn = field(*v, "function");
        if (!fn || !fn->is_object()) wrong_type("tool_choice.function", "an object with a 'name'");
        const json* name = field(*fn, "name");
        if (!name || !name->is_string()) wrong_type("tool_choice.function.name", "a string");
        r.tool_choice = ToolChoice::Named;
        r.tool_choice_name = name->get<std::string>();
    } else {
        wrong_type("tool_choice", "a string or an object");
    }
    const bool forced = r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named;
    if (forced && r.tools.is_null())
        throw invalid_param("tool_choice", "'tool_choice' needs 'tools' to choose from");
    if (r.tool_choice == ToolChoice::Named) {
        const bool known = std::any_of(r.tools.begin(), r.tools.end(), [&](const json& t) {
            return t["function"]["name"].get<std::string>() == r.tool_choice_name;
        });
        if (!known)
            throw invalid_param("tool_choice.function.name", "'tool_choice.function.name' is '" +
                                                                 untrusted::escape(r.tool_choice_name) +
                                                                 "', a function not in 'tools'");
    }
}

json parse_messages(const json& body) {
    const json* v = field(body, "messages");
    if (!v) throw invalid_param("messages", "'messages' is required", "missing_required_parameter");
    if (!v->is_array()) wrong_type("messages", "a list of messages");
    if (v->empty()) throw invalid_param("messages", "'messages' must not be empty");
    json out = json::array();
    for (size_t i = 0; i < v->size(); ++i) {
        const json& m = (*v)[i];
        const std::string p = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) wrong_type(p, "an object with 'role' and 'content'");
        const json* role = field(m, "role");
        if (!role || !role->is_string()) wrong_type(p + ".role", "a string");
        std::string r = role->get<std::string>();
        if (r == "developer") r = "system";  // OpenAI's newer name for the system role
        if (r != "system" && r != "user" && r != "assistant" && r != "tool")
            throw invalid_param(p + ".role", "role '" + untrusted::escape(r) +
                                                 "' is not supported (system, developer, user, assistant or tool)");
        if (r == "tool") {
            const json* id = field(m, "tool_call_id");
            if (!id) throw invalid_param(p + ".tool_call_id", "'" + p + ".tool_call_id' is required",
                                         "missing_required_parameter");
            if (!id->is_string()) wrong_type(p + ".tool_call_id", "a string");
        }
        if (r == "assistant") check_tool_calls(m, p);
        const json* content = field(m, "content");
        if (!content && r != "assistant")
            throw invalid_param(p + ".content", "'" + p + ".content' is required", "missing_required_parameter");
        if (content) check_content(*content, p + ".content");
        json message = m;
        message["role"] = r;
        if (!content) message["content"] = "";
        out.push_back(std::move(message));
    }
    return out;
}

// chat_template_kwargs: further variables for the chat template (e.g. {"enable_thinking": false} for Qwen3).
json parse_template_kwargs(const json& body) {
    const json* v = field(body, "chat_template_kwargs");
    if (!v) return json::object();
    if (!v->is_object()) wrong_type("chat_template_kwargs", "an object");
    for (const char* reserved : {"messages", "tools", "documents", "add_generation_prompt"})
        if (v->contains(reserved))
            throw invalid_param(std::string("chat_template_kwargs.") + reserved,
                                std::string("'chat_template_kwargs.") + reserved +
                                    "' cannot be set: the request itself gives the template its " + reserved);
    return *v;
}

// add_generation_prompt and continue_final_message (vLLM's chat fields). Continuing needs a last message of the
// assistant's and no new turn opened after it; add_generation_prompt then defaults to false.
void parse_continuation(const json& body, OpenAIRequest& r) {
    const auto add = boolean(body, "add_generation_prompt");
    r.continue_final_message = boolean(body, "continue_final_message").value_or(false);
    if (r.continue_final_message) {
        if (add.value_or(false))
            throw invalid_param("continue_final_message", "'continue_final_message' cannot be combined with "
                                                          "'add_generation_prompt': true (one continues the last "
                                                          "message, the other opens a new one)");
        const std::string role = r.messages.back()["role"].get<std::string>();
        if (role != "assistant")
            throw invalid_param("continue_final_message",
                                "'continue_final_message' needs the last message to be the assistant's, not the " +
                                    role + "'s");
    }
    r.add_generation_prompt = add.value_or(!r.continue_final_message);
}

std::vector<int32_t> token_ids(const json& list, const std::string& param) {
    std::vector<int32_t> ids;
    for (const json& id : list) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
            throw invalid_param(param, "'" + param + "' token ids must be integers in [0, 2^31)");
        ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    return ids;
}

// prompt: a string, a list of token ids, or a list of prompts, each a string or a non-empty list of token ids.
void parse_prompt(const json& body, OpenAIRequest& r) {
    const json* v = field(body, "prompt");
    if (!v) throw invalid_param("prompt", "'prompt' is required", "missing_required_parameter");
    if (v->is_string()) {
        r.prompts.push_back({v->get<std::string>(), std::nullopt});
        return;
    }
    if (!v->is_array()) wrong_type("prompt", "a string or a list");
    if (v->empty()) throw invalid_param("prompt", "'prompt' must not be empty");
    if ((*v)[0].is_number_integer()) {
        r.prompts.push_back({"", token_ids(*v, "prompt")});
        return;
    }
    if (v->size() > static_cast<size_t>(kMaxChoices))
        throw invalid_param("prompt", "'prompt' holds " + std::to_string(v->size()) + " prompts, more than " +
                                          std::to_string(kMaxChoices));
    for (const json& p : *v) {
        if (p.is_string())
            r.prompts.push_back({p.get<std::string>(), std::nullopt});
        else if (p.is_array() && !p.empty())
            r.prompts.push_back({"", token_ids(p, "prompt")});
        else
            wrong_type("prompt", "a string, a list of token ids, or a list of strings or non-empty token id lists");
    }
}

// n, the choices per prompt: at most kMaxChoices in all.
void parse_n(const json& body, OpenAIRequest& r) {
    const auto n = integer(body, "n");
    if (!n) return;
    const int64_t prompts = r.endpoint == Endpoint::Completions ? static_cast<int64_t>(r.prompts.size()) : 1;
    if (*n < 1 || *n > kMaxChoices)
        throw invalid_param("n", "'n' must be in [1, " + std::to_string(kMaxChoices) + "], got " + std::to_string(*n));
    if (*n * prompts > kMaxChoices)
        throw invalid_param("n", "'n' of " + std::to_string(*n) + " for each of " + std::to_string(prompts) +
                                     " prompts makes more than " + std::to_string(kMaxChoices) + " choices");
    r.n = static_cast<int>(*n);
}

std::vector<std::string> parse_stop(const json& body) {
    const json* v = field(body, "stop");
    if (!v) return {};
    std::vector<std::string> stop;
    if (v->is_string()) {
        stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
        if (v->size() > static_cast<size_t>(kMaxStopStrings))
            throw invalid_param("stop", "'stop' holds at most " + std::to_string(kMaxStopStrings) + " strings, got " +
                                            std::to_string(v->size()));
        for (const json& s : *v) {
            if (!s.is_string()) wrong_type("stop", "a string or a list of strings");
            stop.push_back(s.get<std::string>());
        }
    } else {
        wrong_type("stop", "a string or a list of strings");
    }
    for (const std::string& s : stop)
        if (s.empty()) throw invalid_param("stop", "stop strings must not be empty");
    return stop;
}

// sampling::validate names CLI flags; a request names JSON parameters.
void validate_sampling(const sampling::SamplingOptions& o, const char* logprobs_param) {
    try {
        sampling::validate(o);
    } catch (const std::invalid_argument& e) {
        const std::pair<const char*, const char*> names[] = {
            {"--temperature", "temperature"},
            {"--top-k", "top_k"},
            {"--top-p", "top_p"},
            {"--min-p", "min_p"},
            {"--repeat-penalty", "repetition_penalty"},
            {"--presence-penalty", "presence_penalty"},
            {"--frequency-penalty", "frequency_penalty"},
            {"--logprobs", logprobs_param},
        };
        const std::string msg = e.what();
        for (const auto& [flag, param] : names) {
            const std::string f = std::string(flag) + " ";
            if (msg.rfind(f, 0) == 0)
                throw invalid_param(param, "'" + std::string(param) + "' " + msg.substr(f.size()));
        }
        throw invalid_param("", msg);
    }
}

// logit_bias: {"token id": bias}, OpenAI's shape (ids as decimal strings, biases in [-100, 100]).
std::vector<std::pair<int32_t, float>> parse_logit_bias(const json& body) {
    const json* v = field(body, "logit_bias");
    if (!v) return {};
    if (!v->is_object()) wrong_type("logit_bias", "an object mapping token ids to biases");
    if (v->size() > static_cast<size_t>(sampling::kMaxLogitBias))
        throw invalid_param("logit_bias", "'logit_bias' holds at most " + std::to_string(sampling::kMaxLogitBias) +
                                              " tokens, got " + std::to_string(v->size()));
    std::vector<std::pair<int32_t, float>> out;
    for (const auto& [key, bias] : v->items()) {
        int64_t id = -1;
        const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
        if (key.empty() || ec != std::errc() || end != key.data() + key.size() || id < 0 || id > INT32_MAX)
            throw invalid_param("logit_bias",
                                "'logit_bias' keys must be token ids, got '" + untrusted::escape(key) + "'");
        if (!bias.is_number() || !(bias.get<double>() >= -100.0 && bias.get<double>() <= 100.0))
            throw invalid_param("logit_bias", "'logit_bias' values must be numbers in [-100, 100], got " +
                                                  untrusted::escape(bias.dump()) + " for token " + key);
        out.emplace_back(static_cast<int32_t>(id), bias.get<float>());
    }
    return out;
}

std::string text_field(const json& v, const std::string& param) {
    if (!v.is_string()) wrong_type(param, "a string");
    return v.get<std::string>();
}

// A JSON schema given as an object (or true / false), as its text.
std::string schema_text(const json& v, const std::string& param) {
    if (!v.is_object() && !v.is_boolean()) wrong_type(param, "a JSON schema object");
    return v.dump();
}

// response_format: text, json_object or json_schema ({"name", "schema", "strict", "description"}).
void parse_response_format(const json& rf, OpenAIRequest& r) {
    if (!rf.is_object()) wrong_type("response_format", "an object with a 'type'");
    const json* type = field(rf, "type");
    if (!type || !type->is_string())
        throw invalid_param("response_format.type", "'response_format.type' must be 'text', 'json_object' or "
                                                    "'json_schema'", "missing_required_parameter");
    const std::string t = type->get<std::string>();
    if (t == "text") return;
    if (t == "json_object") {
        r.constraint = grammar::Spec{grammar::Kind::JsonObject, ""};
        r.constraint_param = "response_format";
        return;
    }
    if (t != "json_schema")
        throw invalid_param("response_format.type", "'response_format.type' '" + untrusted::escape(t) +
                                                        "' is not supported (text, json_object or json_schema)");
    const json* js = field(rf, "json_schema");
    if (!js) throw invalid_param("response_format.json_schema", "'response_format.json_schema' is required",
                                 "missing_required_parameter");
    if (!js->is_object()) wrong_type("response_format.json_schema", "an object with 'name' and 'schema'");
    const json* name = field(*js, "name");
    if (!name) throw invalid_param("response_format.json_schema.name", "'response_format.json_schema.name' is required",
                                   "missing_required_parameter");
    text_field(*name, "response_format.json_schema.name");
    if (field(*js, "strict") && !field(*js, "strict")->is_boolean())
        wrong_type("response_format.json_schema.strict", "a boolean");
    const json* schema = field(*js, "schema");
    // OpenAI: without a schema the model may produce any JSON object.
    r.constraint = schema ? grammar::Spec{grammar::Kind::JsonSchema,
                                          schema_text(*schema, "response_format.json_schema.schema")}
                          : grammar::Spec{grammar::Kind::JsonObject, ""};
    r.constraint_param = "response_format.json_schema.schema";
}

// At most one constraint: response_format, or an extension field of vLLM's or llama-server's.
void parse_constraint(const json& body, OpenAIRequest& r) {
    for (const char* refused : {"guided_choice", "guided_whitespace_pattern", "structured_outputs"}) {
        if (field(body, refused))
            throw invalid_param(refused, std::string("'") + refused + "' is not supported (use response_format, " +
                                             "guided_json, guided_regex or guided_grammar)");
    }
    if (const json* b = field(body, "guided_decoding_backend"); b && !(b->is_string() && *b == "xgrammar"))
        throw invalid_param("guided_decoding_backend", "'guided_decoding_backend' can only be 'xgrammar'");
    struct Extension {
        const char* name;
        grammar::Kind kind;
    };
    const Extension extensions[] = {{"guided_json", grammar::Kind::JsonSchema},
                                    {"guided_regex", grammar::Kind::Regex},
                                    {"guided_grammar", grammar::Kind::Ebnf},
                                    {"json_schema", grammar::Kind::JsonSchema},
                                    {"grammar", grammar::Kind::Ebnf}};
    if (const json* rf = field(body, "response_format")) parse_response_format(*rf, r);
    for (const auto& [name, kind] : extensions) {
        const json* v = field(body, name);
        if (!v) continue;
        if (r.constraint)
            throw invalid_param(name, std::string("'") + name + "' cannot be combined with '" + r.constraint_param +
                                          "' (one constraint per request)");
        // vLLM's guided_json may be a schema's text as well as the schema.
        const bool schema = kind == grammar::Kind::JsonSchema;
        r.constraint = grammar::Spec{kind, schema && !v->is_string() ? schema_text(*v, name) : text_field(*v, name)};
        r.constraint_param = name;
    }
}

// OpenAI's range of presence_penalty and frequency_penalty.
std::optional<double> penalty(const json& body, const char* name) {
    const auto v = number(body, name);
    if (v && !(*v >= -2.0 && *v <= 2.0))
        throw invalid_param(name, "'" + std::string(name) + "' must be in [-2, 2], got " + field(body, name)->dump());
    return v;
}

// max_tokens, or chat's newer name for it, max_completion_tokens (one of the two: they are the same limit).
void parse_max_tokens(const json& body, bool chat, OpenAIRequest& r) {
    const bool newer = chat && field(body, "max_completion_tokens");
    if (newer && field(body, "max_tokens"))
        throw invalid_param("max_tokens", "'max_tokens' cannot be combined with 'max_completion_tokens' (the same "
                                          "limit): give one");
    const char* name = newer ? "max_completion_tokens" : "max_tokens";
    r.max_tokens = integer(body, name);
    r.max_tokens_param = name;
    if (r.max_tokens && *r.max_tokens < 1)
        throw invalid_param(name,
                            "'" + std::string(name) + "' must be at least 1, got " + std::to_string(*r.max_tokens));
}

// echo (the prompt before the answer; with logprobs, the prompt's tokens scored too), and the fields of
// /v1/completions this server refuses by name.
void parse_completion_options(const json& body, OpenAIRequest& r) {
    r.echo = boolean(body, "echo").value_or(false);
    if (const auto best_of = integer(body, "best_of"); best_of && *best_of != r.n)
        throw invalid_param("best_of", "'best_of' must equal 'n' (" + std::to_string(r.n) +
                                           "): this server returns every choice it generates, got " +
                                           std::to_string(*best_of));
    if (field(body, "suffix"))
        throw invalid_param("suffix", "'suffix' is not supported (the server has no fill-in-the-middle template)");
}

// Fields that only label a request for the client's own records: checked, nothing to do. store: true would ask
// for the completion to be kept, which this server never does.
void check_labels(const json& body) {
    if (const json* u = field(body, "user"); u && !u->is_string()) wrong_type("user", "a string");
    if (const json* m = field(body, "metadata"); m && !m->is_object()) wrong_type("metadata", "an object");
    if (boolean(body, "store").value_or(false))
        throw invalid_param("store", "'store': true is not supported (this server keeps no completions)");
}

// The fields a body may carry: the ones implemented (OpenAI's and the vLLM / llama-server extensions) and the
// labels of check_labels. A field outside them (null: not given) is refused by name, as OpenAI refuses an argument
// it does not know: a parameter the server cannot honour must not be silently dropped.
constexpr std::string_view kFields[] = {
    "model", "stream", "stream_options", "max_tokens", "stop", "temperature", "top_p", "top_k", "min_p",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "seed", "n", "ignore_eos", "logprobs",
    "logit_bias", "response_format", "guided_json", "guided_regex", "guided_grammar", "guided_decoding_backend",
    "json_schema", "grammar", "user", "metadata", "store"};
constexpr std::string_view kChatFields[] = {
    "messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
    "chat_template_kwargs", "add_generation_prompt", "continue_final_message"};
constexpr std::string_view kCompletionFields[] = {"prompt", "echo", "best_of"};

[[noreturn]] void unrecognized(const std::string& name) {
    throw invalid_param(name, "Unrecognized request argument supplied: " + untrusted::escape(name), "");
}

void refuse_unknown_fields(const json& body, bool chat) {
    using Names = std::span<const std::string_view>;
    const auto listed = [](Names list, const std::string& name) {
        return std::find(list.begin(), list.end(), name) != list.end();
    };
    const Names own = chat ? Names(kChatFields) : Names(kCompletionFields);
    for (const auto& [name, value] : body.items())
        if (!value.is_null() && !listed(kFields, name) && !listed(own, name)) unrecognized(name);
    if (const json* so = field(body, "stream_options"))
        for (const auto& [name, value] : so->items())
            if (!value.is_null() && name != "include_usage") unrecognized("stream_options." + name);
}

json parse_body(std::string_view text) {
    json body;
    try {
        body = untrusted::parse_ordered_json(text);
    } catch (const std::exception& e) {
        throw ApiError(400, std::string("request body: ") + e.what(), "invalid_request_error");
    }
    if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object", "invalid_request_error");
    return body;
}

std::string parse_model(const json& body) {
    const json* m = field(body, "model");
    if (!m) return "";
    if (!m->is_string()) wrong_type("model", "a string");
    return m->get<std::string>();
}

}  // namespace

TokenizeRequest parse_tokenize(std::string_view text) {
    const json body = parse_body(text);
    TokenizeRequest r;
    r.model = parse_model(body);
    std::vector<const char*> given;
    for (const char* name : {"prompt", "messages", "content"})
        if (field(body, name)) given.push_back(name);
    if (given.empty())
        throw invalid_param("prompt", "'prompt' (or 'messages', or llama-server's 'content') is required",
                            "missing_required_parameter");
    if (given.size() > 1)
        throw invalid_param(given[1], std::string("give one of 'prompt', 'messages' and 'content', not '") + given[0] +
                                          "' and '" + given[1] + "'");
    const std::string name = given[0];
    if (name == "messages") {
        r.chat = true;
        r.messages = parse_messages(body);
        r.chat_template_kwargs = parse_template_kwargs(body);
        r.tools = parse_tools(body);
        r.add_generation_prompt = boolean(body, "add_generation_prompt").value_or(true);
        return r;
    }
    const json& t = body[name];
    if (!t.is_string()) wrong_type(name, "a string");
    r.text = t.get<std::string>();
    r.llama_server = name == "content";
    if (r.llama_server) {
        // with_pieces answers each token with its text, a shape this server does not write.
        if (boolean(body, "with_pieces").value_or(false))
            throw invalid_param("with_pieces", "'with_pieces' is not supported");
        r.add_special = boolean(body, "add_special").value_or(false);
    } else {
        r.add_special = boolean(body, "add_special_tokens").value_or(true);
    }
    return r;
}

DetokenizeRequest parse_detokenize(std::string_view text) {
    const json body = parse_body(text);
    DetokenizeRequest r;
    r.model = parse_model(body);
    const json* v = field(body, "tokens");
    if (!v) throw invalid_param("tokens", "'tokens' is required", "missing_required_parameter");
    if (!v->is_array()) wrong_type("tokens", "a list of token ids");
    r.tokens = token_ids(*v, "tokens");
    return r;
}

EmbeddingRequest parse_embeddings(std::string_view text) {
    const json body = parse_body(text);
    EmbeddingRequest r;
    r.model = parse_model(body);
    const json* v = field(body, "input");
    if (!v) throw invalid_param("input", "'input' is required", "missing_required_parameter");
    const char* shape = "a string, a list of strings, a list of token ids or a list of lists of token ids";
    if (v->is_string()) {
        r.texts.push_back(v->get<std::string>());
    } else if (!v->is_array() || v->empty()) {
        wrong_type("input", shape);
    } else if ((*v)[0].is_number()) {
        r.token_ids.push_back(token_ids(*v, "input"));
    } else {
        if (v->size() > kMaxEmbeddingInputs)
            throw invalid_param("input", "'input' holds " + std::to_string(v->size()) + " inputs, more than " +
                                             std::to_string(kMaxEmbeddingInputs));
        const bool texts = (*v)[0].is_string();
        for (const json& item : *v) {
            if (texts && item.is_string())
                r.texts.push_back(item.get<std::string>());
            else if (!texts && item.is_array())
                r.token_ids.push_back(token_ids(item, "input"));
            else
                wrong_type("input", shape);
        }
    }
    for (const std::string& t : r.texts)
        if (t.empty()) throw invalid_param("input", "'input' must not hold an empty string");
    for (const std::vector<int32_t>& ids : r.token_ids)
        if (ids.empty()) throw invalid_param("input", "'input' must not hold an empty list of token ids");
    if (const json* f = field(body, "encoding_format")) {
        if (!f->is_string() || (*f != "float" && *f != "base64"))
            throw invalid_param("encoding_format", "'encoding_format' must be 'float' or 'base64'");
        r.base64 = *f == "base64";
    }
    r.dimensions = integer(body, "dimensions");
    return r;
}

OpenAIRequest parse_request(Endpoint endpoint, std::string_view text) {
    const json body = parse_body(text);
    OpenAIRequest r;
    r.endpoint = endpoint;
    const bool chat = endpoint == Endpoint::ChatCompletions;
    r.model = parse_model(body);
    if (chat) {
        r.messages = parse_messages(body);
        r.chat_template_kwargs = parse_template_kwargs(body);
        r.tools = parse_tools(body);
        parse_tool_choice(body, r);
        parse_continuation(body, r);
    } else {
        parse_prompt(body, r);
    }

    r.stream = boolean(body, "stream").value_or(false);
    if (const json* so = field(body, "stream_options")) {
        if (!so->is_object()) wrong_type("stream_options", "an object");
        if (!r.stream) throw invalid_param("stream_options", "'stream_options' is only allowed with 'stream': true");
        r.include_usage = boolean(*so, "include_usage", "stream_options.include_usage").value_or(false);
    }

    parse_max_tokens(body, chat, r);

    parse_n(body, r);

    r.stop = parse_stop(body);
    r.ignore_eos = boolean(body, "ignore_eos").value_or(false);

    sampling::SamplingOptions& s = r.sampling;
    s.temperature = number(body, "temperature").value_or(s.temperature);
    s.top_p = number(body, "top_p").value_or(s.top_p);
    // top_k -1 means off in vLLM's API.
    if (const auto k = integer(body, "top_k")) s.top_k = *k == -1 ? 0 : *k;
    s.min_p = number(body, "min_p").value_or(s.min_p);
    s.presence_penalty = penalty(body, "presence_penalty").value_or(s.presence_penalty);
    s.frequency_penalty = penalty(body, "frequency_penalty").value_or(s.frequency_penalty);
    s.repeat_penalty = number(body, "repetition_penalty").value_or(s.repeat_penalty);
    if (const auto seed = integer(body, "seed")) s.seed = static_cast<uint64_t>(*seed);

    const char* logprobs_param = "logprobs";
    if (chat) {
        const bool want = boolean(body, "logprobs").value_or(false);
        const auto top = integer(body, "top_logprobs");
        if (top && !want) throw invalid_param("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        if (want) {
            s.logprobs = static_cast<int>(std::clamp<int64_t>(top.value_or(0), INT32_MIN, INT32_MAX));
            if (top) logprobs_param = "top_logprobs";
        }
    } else if (const auto n = integer(body, "logprobs")) {
        s.logprobs = static_cast<int>(std::clamp<int64_t>(*n, INT32_MIN, INT32_MAX));
    }
    validate_sampling(s, logprobs_param);
    if (!chat) parse_completion_options(body, r);
    r.logit_bias = parse_logit_bias(body);
    parse_constraint(body, r);
    check_labels(body);
    refuse_unknown_fields(body, chat);
    return r;
}

}  // namespace tracelm::serve
