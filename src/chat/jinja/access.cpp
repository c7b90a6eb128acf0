#include "chat/jinja/access.h"

#include <algorithm>

#include "chat/jinja/error.h"
#include "chat/jinja/methods.h"
#include "chat/jinja/py_text.h"

namespace tracelm::jinja {

namespace {

// jinja2's object_type_repr, for the hint an Undefined carries.
std::string owner(const Value& obj) {
    if (obj.is_none()) return "None";
    return type_name(obj) + " object";
}

// (Built by appending: GCC 12 warns falsely about "literal" + std::string temporaries here.)
Value missing_attr(const Value& obj, std::string_view name) {
    std::string hint = "'";
    hint.append(owner(obj)).append("' has no attribute '").append(name).append("'");
    return Value::undefined(std::move(hint));
}

Value missing_item(const Value& obj, const Value& key) {
    if (key.is_string()) return missing_attr(obj, key.str());
    std::string hint = "'";
    hint.append(owner(obj)).append("' has no element ").append(repr(key));
    return Value::undefined(std::move(hint));
}

// Python's slice.indices(n): start, stop, step and the number of items.
struct SliceRange {
    int64_t start, step, count;
};

SliceRange slice_range(const Value& start, const Value& stop, const Value& step, int64_t n) {
    const auto given = [](const Value& v) { return !v.is_undefined() && !v.is_none(); };
    const auto as_int = [](const Value& v) {
        if (!v.is_int() && !v.is_bool()) fail("slice indices must be integers or None");
        return v.integer();
    };
    const int64_t st = given(step) ? as_int(step) : 1;
    if (st == 0) fail("slice step cannot be zero");
    const auto bound = [&](const Value& v, int64_t fallback) {
        if (!given(v)) return fallback;
        int64_t i = as_int(v);
        if (i < 0) i += n;
        if (st > 0) return std::clamp<int64_t>(i, 0, n);
        return std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t b = bound(start, st > 0 ? 0 : n - 1);
    const int64_t e = bound(stop, st > 0 ? n : -1);
    int64_t count = 0;
    if (st > 0 && e > b) count = (e - b + st - 1) / st;
    if (st < 0 && b > e) count = (b - e - st - 1) / -st;
    return {b, st, count};
}

}  // namespace

Value get_attr(Runtime& rt, const Value& obj, std::string_view name) {
    (void)rt;
    switch (obj.type()) {
        case Value::Type::Undefined:
            fail(obj.undefined_hint());
        case Value::Type::Dict:
            if (method_kind(obj, name) != MethodKind::None) return bound_method(obj, name);
            if (const Value* v = obj.dict().find(name)) return *v;
            return missing_attr(obj, name);
        case Value::Type::String:
        case Value::Type::List:
            if (method_kind(obj, name) != MethodKind::None) return bound_method(obj, name);
            return missing_attr(obj, name);
        case Value::Type::Object: {
            Value v = obj.object().attr(name);
            return v.is_undefined() ? missing_attr(obj, name) : v;
        }
        default:
            return missing_attr(obj, name);
    }
}

Value get_item(Runtime& rt, const Value& obj, const Value& key) {
    switch (obj.type()) {
        case Value::Type::Undefined:
            fail(obj.undefined_hint());
        case Value::Type::Dict:
            if (hashable(key)) {
                if (const Value* v = obj.dict().find(key)) return *v;
            }
            break;
        case Value::Type::List:
        case Value::Type::String:
            if (key.is_int() || key.is_bool()) {
                const bool is_str = obj.is_string();
                const int64_t n = is_str ? static_cast<int64_t>(py::length(obj.str()))
                                         : static_cast<int64_t>(obj.list().items.size());
                int64_t i = key.integer();
                if (i < 0) i += n;
                if (i < 0 || i >= n) return missing_item(obj, key);
                if (!is_str) return obj.list().items[static_cast<size_t>(i)];
                const std::string& s = obj.str();
                if (py::is_ascii(s)) return Value::string(s.substr(static_cast<size_t>(i), 1));
                const std::vector<size_t> off = py::offsets(s);
                return rt.make_string(s.substr(off[static_cast<size_t>(i)],
                                               off[static_cast<size_t>(i) + 1] - off[static_cast<size_t>(i)]));
            }
            break;
        case Value::Type::Object:
            if (key.is_string()) {
                Value v = obj.object().attr(key.str());
                if (!v.is_undefined()) return v;
            }
            return missing_item(obj, key);
        default:
            break;
    }
    if (key.is_string() && method_kind(obj, key.str()) != MethodKind::None) return bound_method(obj, key.str());
    return missing_item(obj, key);
}

Value get_slice(Runtime& rt, const Value& obj, const Value& start, const Value& stop, const Value& step) {
    if (obj.is_undefined()) fail(obj.undefined_hint());
    if (obj.is_list()) {
        const std::vector<Value>& items = obj.list().items;
        const SliceRange r = slice_range(start, stop, step, static_cast<int64_t>(items.size()));
        std::vector<Value> out;
        out.reserve(static_cast<size_t>(r.count));
        for (int64_t k = 0, i = r.start; k < r.count; ++k, i += r.step) out.push_back(items[static_cast<size_t>(i)]);
        return rt.make_list(std::move(out), obj.list().tuple);
    }
    if (obj.is_string()) {
        const std::string& s = obj.str();
        const std::vector<size_t> off = py::offsets(s);
        const SliceRange r = slice_range(start, stop, step, static_cast<int64_t>(off.size()) - 1);
        std::string out;
        if (r.step == 1 && r.count > 0) {
            out = s.substr(off[static_cast<size_t>(r.start)],
                           off[static_cast<size_t>(r.start + r.count)] - off[static_cast<size_t>(r.start)]);
        } else {
            for (int64_t k = 0, i = r.start; k < r.count; ++k, i += r.step)
                out.append(s, off[static_cast<size_t>(i)],
                           off[static_cast<size_t>(i) + 1] - off[static_cast<size_t>(i)]);
        }
        return rt.make_string(std::move(out));
    }
    std::string hint = "'";
    hint.append(owner(obj)).append("' cannot be sliced");
    return Value::undefined(std::move(hint));
}

Value python_attr(const Value& obj, std::string_view name) {
    if (obj.is_undefined()) fail(obj.undefined_hint());
    if (obj.is_object()) {
        Value v = obj.object().attr(name);
        return v.is_undefined() ? missing_attr(obj, name) : v;
    }
    if (method_kind(obj, name) != MethodKind::None) return bound_method(obj, name);
    return missing_attr(obj, name);
}

Value get_path(Runtime& rt, const Value& obj, std::string_view path, const Value* fallback) {
    Value cur = obj;
    size_t start = 0;
    while (true) {
        const size_t dot = path.find('.', start);
        const std::string_view part = path.substr(start, dot == std::string_view::npos ? dot : dot - start);
        const bool digits = !part.empty() && part.size() < 19 &&
                            std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        const std::string key(part);
        cur = get_item(rt, cur, digits ? Value::integer(std::stoll(key)) : Value::string(key));
        if (fallback && !fallback->is_none() && cur.is_undefined()) cur = *fallback;
        if (dot == std::string_view::npos) return cur;
        start = dot + 1;
    }
}

}  // namespace tracelm::jinja
