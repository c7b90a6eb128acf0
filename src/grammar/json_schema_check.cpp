// check_json_schema (grammar.h): the supported subset of JSON Schema, walked once with bounded depth and size.
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "grammar/grammar.h"

namespace tracelm::grammar {

namespace {

using nlohmann::json;

// Keywords that only describe a schema; they constrain nothing.
const std::set<std::string>& annotations() {
    static const std::set<std::string> k = {"title",   "description", "default",    "examples", "$schema",
                                            "$id",     "$comment",    "deprecated", "readOnly", "writeOnly"};
    return k;
}

// Keywords the grammar enforces.
const std::set<std::string>& enforced() {
    static const std::set<std::string> k = {
        "type",      "properties",       "required",         "additionalProperties", "items",     "prefixItems",
        "minItems",  "maxItems",         "enum",             "const",                "minimum",   "maximum",
        "exclusiveMinimum", "exclusiveMaximum", "anyOf",     "$ref",                 "$defs",     "definitions",
        "minLength", "maxLength",        "pattern",          "format",               "minProperties",
        "maxProperties"};
    return k;
}

const std::set<std::string>& types() {
    static const std::set<std::string> k = {"object", "array", "string", "number", "integer", "boolean", "null"};
    return k;
}

class Walker {
   public:
    void schema(const json& s, const std::string& at, int depth) {
        if (++nodes_ > kMaxSchemaNodes)
            throw GrammarError("schema has more than " + std::to_string(kMaxSchemaNodes) + " subschemas");
        if (depth > kMaxSchemaDepth)
            throw GrammarError("schema nests deeper than " + std::to_string(kMaxSchemaDepth) + " levels at " + at);
        if (s.is_boolean()) return;
        if (!s.is_object()) throw GrammarError("schema at " + at + " must be an object or a boolean");
        for (const auto& [key, value] : s.items()) {
            const std::string here = at + "/" + key;
            if (annotations().count(key) != 0) continue;
            if (enforced().count(key) == 0)
                throw GrammarError("unsupported JSON schema keyword '" + key + "' at " + at);
            keyword(key, value, here, depth);
        }
    }

   private:
    void keyword(const std::string& key, const json& v, const std::string& here, int depth) {
        if (key == "type") {
            const bool list = v.is_array() && !v.empty();
            if (!v.is_string() && !list) throw GrammarError(here + " must be a type name or a list of them");
            for (const json& t : list ? v : json::array({v})) {
                if (!t.is_string() || types().count(t.get<std::string>()) == 0)
                    throw GrammarError("unsupported JSON schema type " + t.dump() + " at " + here);
            }
        } else if (key == "properties" || key == "$defs" || key == "definitions") {
            if (!v.is_object()) throw GrammarError(here + " must be an object of schemas");
            for (const auto& [name, sub] : v.items()) schema(sub, here + "/" + name, depth + 1);
        } else if (key == "additionalProperties" || key == "items") {
            schema(v, here, depth + 1);
        } else if (key == "prefixItems" || key == "anyOf") {
            if (!v.is_array() || v.empty()) throw GrammarError(here + " must be a non-empty list of schemas");
            for (size_t i = 0; i < v.size(); ++i) schema(v[i], here + "/" + std::to_string(i), depth + 1);
        } else if (key == "required") {
            if (!v.is_array()) throw GrammarError(here + " must be a list of property names");
            for (const json& n : v)
                if (!n.is_string()) throw GrammarError(here + " must be a list of property names");
        } else if (key == "enum") {
            if (!v.is_array() || v.empty()) throw GrammarError(here + " must be a non-empty list");
        } else if (key == "minItems" || key == "maxItems" || key == "minLength" || key == "maxLength" ||
                   key == "minProperties" || key == "maxProperties") {
            if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxRepeat)
                throw GrammarError(here + " must be an integer in [0, " + std::to_string(kMaxRepeat) + "]");
        } else if (key == "minimum" || key == "maximum" || key == "exclusiveMinimum" || key == "exclusiveMaximum") {
            if (!v.is_number()) throw GrammarError(here + " must be a number");
        } else if (key == "$ref") {
            const std::string ref = v.is_string() ? v.get<std::string>() : "";
            if (ref != "#" && ref.rfind("#/$defs/", 0) != 0 && ref.rfind("#/definitions/", 0) != 0)
                throw GrammarError("unsupported $ref " + v.dump() + " at " + here +
                                   " (only local references: #/$defs/NAME, #/definitions/NAME)");
        } else if (key == "pattern" || key == "format") {
            if (!v.is_string()) throw GrammarError(here + " must be a string");
        }
    }

    int nodes_ = 0;
};

}  // namespace

void check_json_schema(const std::string& schema_text) {
    if (schema_text.size() > kMaxSchemaBytes)
        throw GrammarError("schema is longer than " + std::to_string(kMaxSchemaBytes) + " bytes");
    // Depth is checked while parsing, before anything recurses over the document.
    const json::parser_callback_t cb = [](int d, json::parse_event_t event, json&) {
        const bool opens = event == json::parse_event_t::object_start || event == json::parse_event_t::array_start;
        if (opens && d > 4 * kMaxSchemaDepth) throw GrammarError("schema nests too deeply");
        return true;
    };
    json s;
    try {
        s = json::parse(schema_text, cb);
    } catch (const json::exception& e) {
        throw GrammarError(std::string("schema is not valid JSON: ") + e.what());
    }
    Walker().schema(s, "#", 0);
}

}  // namespace tracelm::grammar
