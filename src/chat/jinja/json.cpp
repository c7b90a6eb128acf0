#include "chat/jinja/json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "chat/jinja/error.h"
#include "chat/jinja/py_text.h"

namespace tracelm::jinja {

Value from_json(const nlohmann::ordered_json& j) {
    using T = nlohmann::ordered_json::value_t;
    switch (j.type()) {
        case T::null:
            return Value::none();
        case T::boolean:
            return Value::boolean(j.get<bool>());
        case T::number_integer:
            return Value::integer(j.get<int64_t>());
        case T::number_unsigned: {
            const auto u = j.get<uint64_t>();
            return u <= static_cast<uint64_t>(INT64_MAX) ? Value::integer(static_cast<int64_t>(u))
                                                         : Value::number(static_cast<double>(u));
        }
        case T::number_float:
            return Value::number(j.get<double>());
        case T::string:
            return Value::string(j.get<std::string>());
        case T::array: {
            std::vector<Value> items;
            items.reserve(j.size());
            for (const auto& e : j) items.push_back(from_json(e));
            return Value::list(std::move(items));
        }
        case T::object: {
            DictData d;
            d.items.reserve(j.size());
            for (const auto& [k, v] : j.items()) d.items.emplace_back(Value::string(k), from_json(v));
            return Value::dict(std::move(d));
        }
        default:
            return Value::none();
    }
}

namespace {

class Dumper {
   public:
    Dumper(Runtime& rt, const DumpOptions& o)
        : rt_(rt),
          o_(o),
          item_sep_(o.item_separator ? *o.item_separator : o.indent ? "," : ", "),
          key_sep_(o.key_separator ? *o.key_separator : ": ") {}

    void value(const Value& v, int level) {
        rt_.step();
        switch (v.type()) {
            case Value::Type::None:
                out_ += "null";
                break;
            case Value::Type::Bool:
                out_ += v.boolean() ? "true" : "false";
                break;
            case Value::Type::Int:
                out_ += std::to_string(v.integer());
                break;
            case Value::Type::Float:
                out_ += number(v.number());
                break;
            case Value::Type::String:
                string(v.str());
                break;
            case Value::Type::List:
                list(v.list().items, level);
                break;
            case Value::Type::Dict:
                dict(v.dict(), level);
                break;
            default:
                fail("Object of type " + type_name(v) + " is not JSON serializable");
        }
        if (out_.size() > rt_.limits().max_output_bytes) rt_.over("output bytes", rt_.limits().max_output_bytes);
    }

    std::string take() { return std::move(out_); }

   private:
    static std::string number(double d) {
        if (std::isnan(d)) return "NaN";
        if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
        return py::float_repr(d);
    }

    void string(const std::string& s) {
        rt_.scan(s.size());
        out_ += '"';
        char buf[16];
        for (size_t i = 0, len = 0; i < s.size(); i += len) {
            const char32_t cp = py::decode(s, i, &len);
            switch (cp) {
                case '"': out_ += "\\\""; continue;
                case '\\': out_ += "\\\\"; continue;
                case '\n': out_ += "\\n"; continue;
                case '\r': out_ += "\\r"; continue;
                case '\t': out_ += "\\t"; continue;
                case '\b': out_ += "\\b"; continue;
                case '\f': out_ += "\\f"; continue;
                default: break;
            }
            if (cp < 0x20 || (o_.ensure_ascii && cp > 0x7E)) {
                if (cp > 0xFFFF) {
                    const char32_t v = cp - 0x10000;
                    std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                                  static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
                } else {
                    std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
                }
                out_ += buf;
            } else {
                out_.append(s, i, len);
            }
        }
        out_ += '"';
    }

    void newline(int level) {
        if (!o_.indent) return;
        out_ += '\n';
        for (int i = 0; i < level; ++i) out_ += *o_.indent;
    }

    void list(const std::vector<Value>& items, int level) {
        if (items.empty()) {
            out_ += "[]";
            return;
        }
        out_ += '[';
        for (size_t i = 0; i < items.size(); ++i) {
            if (i) out_ += item_sep_;
            newline(level + 1);
            value(items[i], level + 1);
        }
        newline(level);
        out_ += ']';
    }

    // Python converts int, float, bool and None keys to strings and refuses the rest.
    std::string key(const Value& k) {
        switch (k.type()) {
            case Value::Type::String: return k.str();
            case Value::Type::Int: return std::to_string(k.integer());
            case Value::Type::Float: return number(k.number());
            case Value::Type::Bool: return k.boolean() ? "true" : "false";
            case Value::Type::None: return "null";
            default: fail("keys must be str, int, float, bool or None, not " + type_name(k));
        }
    }

    void dict(const DictData& d, int level) {
        if (d.items.empty()) {
            out_ += "{}";
            return;
        }
        std::vector<const std::pair<Value, Value>*> items;
        for (const auto& kv : d.items) items.push_back(&kv);
        if (o_.sort_keys)
            std::stable_sort(items.begin(), items.end(),
                             [](const auto* a, const auto* b) { return compare(a->first, b->first) < 0; });
        out_ += '{';
        for (size_t i = 0; i < items.size(); ++i) {
            if (i) out_ += item_sep_;
            newline(level + 1);
            string(key(items[i]->first));
            out_ += key_sep_;
            value(items[i]->second, level + 1);
        }
        newline(level);
        out_ += '}';
    }

    Runtime& rt_;
    const DumpOptions& o_;
    std::string item_sep_, key_sep_;
    std::string out_;
};

}  // namespace

std::string dumps(Runtime& rt, const Value& v, const DumpOptions& options) {
    Dumper d(rt, options);
    d.value(v, 0);
    std::string out = d.take();
    rt.alloc(out.size());
    return out;
}

}  // namespace tracelm::jinja
