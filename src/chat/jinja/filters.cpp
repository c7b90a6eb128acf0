#include "chat/jinja/filters.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <unordered_map>

#include "chat/jinja/access.h"
#include "chat/jinja/args.h"
#include "chat/jinja/error.h"
#include "chat/jinja/json.h"
#include "chat/jinja/methods.h"
#include "chat/jinja/operators.h"
#include "chat/jinja/py_text.h"
#include "chat/jinja/tests.h"

namespace tracelm::jinja {

namespace {

Value generator(Runtime& rt, std::vector<Value> items) {
    rt.alloc(items.size() * sizeof(Value));
    return Value::object(rt.make_object<Generator>(std::move(items)));
}

Value str_value(Runtime& rt, std::string s) { return rt.make_string(std::move(s)); }

// A string read as Python's str() has it (the input of most string filters).
std::string text_of(Runtime& rt, const Value& v) {
    std::string s = to_str(v);
    rt.scan(s.size());
    return s;
}

Value ignore_case(const Value& v) { return v.is_string() ? Value::string(py::lower(v.str())) : v; }

// jinja2's make_attrgetter: a dotted path (digits index lists) or one item key; None: the item itself.
Value attribute_of(Runtime& rt, const Value& item, const Value& attribute, const Value* fallback = nullptr) {
    if (attribute.is_string()) return get_path(rt, item, attribute.str(), fallback);
    if (attribute.is_none() || attribute.is_undefined()) return item;
    Value v = get_item(rt, item, attribute);
    return fallback && !fallback->is_none() && v.is_undefined() ? *fallback : v;
}

// Sort keys, as sort, unique, min and max take them: the attribute, lower-cased unless case_sensitive.
Value sort_key(Runtime& rt, const Value& item, const Value& attribute, bool case_sensitive) {
    const Value k = attribute_of(rt, item, attribute);
    return case_sensitive ? k : ignore_case(k);
}

// ---- strings

Value f_trim(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("trim", {"chars"}, c);
    const std::string s = text_of(rt, in);
    return str_value(rt, std::string(py::strip(s, a.string_or_null(0), true, true)));
}

Value f_string(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("string", {}, c);
    return in.is_string() ? in : str_value(rt, to_str(in));
}

Value f_lower(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("lower", {}, c);
    return str_value(rt, py::lower(text_of(rt, in)));
}

Value f_upper(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("upper", {}, c);
    return str_value(rt, py::upper(text_of(rt, in)));
}

Value f_capitalize(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("capitalize", {}, c);
    return str_value(rt, py::capitalize(text_of(rt, in)));
}

// jinja2's own title: words begin after runs of whitespace and of "-({[<".
Value f_title(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("title", {}, c);
    const std::string s = text_of(rt, in);
    std::string out;
    bool word_start = true;
    for (size_t i = 0, len = 0; i < s.size(); i += len) {
        const char32_t cp = py::decode(s, i, &len);
        const bool sep = py::is_space(cp) || (cp < 0x80 && std::string_view("-({[<").find(static_cast<char>(cp)) !=
                                                              std::string_view::npos);
        const std::string ch = s.substr(i, len);
        out += word_start ? py::upper(ch) : py::lower(ch);
        word_start = sep;
    }
    return str_value(rt, std::move(out));
}

Value f_replace(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("replace", {"old", "new", "count"}, c);
    CallArgs m;
    m.positional = {Value::string(to_str(a.get(0))), Value::string(to_str(a.get(1)))};
    if (a.has(2) && !a.get(2).is_none()) m.positional.push_back(a.get(2));
    return call_method(rt, Value::string(text_of(rt, in)), "replace", m);
}

Value f_indent(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("indent", {"width", "first", "blank"}, c);
    if (!in.is_string()) fail("can only concatenate " + type_name(in) + " to str in the indent filter");
    const Value& w = a.get(0);
    const std::string pad =
        w.is_string() ? w.str() : std::string(static_cast<size_t>(std::max<int64_t>(0, a.integer(0, 4))), ' ');
    rt.scan(in.str().size());
    const std::vector<std::string> lines = py::splitlines(in.str() + "\n", false);
    std::string out;
    // jinja2 appends a newline first, so that splitlines keeps a trailing empty line.
    const bool blank = a.flag(2, false);
    for (size_t i = 0; i < lines.size(); ++i) {
        if (i > 0) out += '\n';
        if (i > 0 && (blank || !lines[i].empty())) out += pad;
        out += lines[i];
    }
    if (a.flag(1, false)) out.insert(0, pad);
    return str_value(rt, std::move(out));
}

Value f_center(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("center", {"width"}, c);
    const std::string s = text_of(rt, in);
    const int64_t width = a.integer(0, 80), n = static_cast<int64_t>(py::length(s));
    if (width <= n) return str_value(rt, s);
    if (width > static_cast<int64_t>(rt.limits().max_allocated_bytes))
        rt.over("allocated bytes", rt.limits().max_allocated_bytes);
    // Python's str.center: the odd space goes left when the width is odd.
    const int64_t marg = width - n, left = marg / 2 + (marg & width & 1);
    std::string out(static_cast<size_t>(left), ' ');
    out.append(s).append(static_cast<size_t>(marg - left), ' ');
    return str_value(rt, std::move(out));
}

Value f_wordcount(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("wordcount", {}, c);
    const std::string s = text_of(rt, in);
    int64_t words = 0;
    bool in_word = false;
    for (size_t i = 0, len = 0; i < s.size(); i += len) {
        const char32_t cp = py::decode(s, i, &len);
        const bool w = cp == '_' || py::is_alnum(cp);
        if (w && !in_word) ++words;
        in_word = w;
    }
    return Value::integer(words);
}

Value f_escape(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("escape", {}, c);
    if (in.is_markup()) return in;
    std::string out = py::html_escape(text_of(rt, in));
    rt.alloc(out.size());
    return Value::markup(std::move(out));
}

Value f_safe(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("safe", {}, c);
    if (in.is_markup()) return in;
    std::string out = to_str(in);
    rt.alloc(out.size());
    return Value::markup(std::move(out));
}

Value f_tojson(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}, c);
    DumpOptions o;
    o.ensure_ascii = a.flag(0, false);
    const Value& indent = a.get(1);
    if (indent.is_string()) {
        o.indent = indent.str();
    } else if (indent.is_int() || indent.is_bool()) {
        o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(indent.integer(), 0, 1024)), ' ');
    } else if (!indent.is_none() && !indent.is_undefined()) {
        fail("tojson: indent must be an integer or a string");
    }
    const Value& seps = a.get(2);
    if (seps.is_list()) {
        if (seps.list().items.size() != 2 || !seps.list().items[0].is_string() || !seps.list().items[1].is_string())
            fail("tojson: separators must be two strings");
        o.item_separator = seps.list().items[0].str();
        o.key_separator = seps.list().items[1].str();
    } else if (!seps.is_none() && !seps.is_undefined()) {
        fail("tojson: separators must be two strings");
    }
    o.sort_keys = a.flag(3, false);
    return Value::string(dumps(rt, in, o));
}

// ---- numbers

// Python's int(str): whitespace around, a sign, digits with single underscores between them.
std::optional<int64_t> parse_int(std::string_view s, int base) {
    s = py::strip(s, nullptr, true, true);
    bool neg = false;
    if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
        neg = s[0] == '-';
        s.remove_prefix(1);
    }
    std::string digits;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '_' && i > 0 && i + 1 < s.size() && s[i - 1] != '_') continue;
        digits += s[i];
    }
    if (digits.empty() || digits.find_first_of("+- ") != std::string::npos) return std::nullopt;
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(digits.c_str(), &end, base);
    if (*end != '\0') return std::nullopt;
    if (errno == ERANGE) fail("integer overflow (tracelm's template integers are 64-bit)");
    return neg ? -v : v;
}

// Python's float(str).
std::optional<double> parse_float(std::string_view s) {
    s = py::strip(s, nullptr, true, true);
    std::string t;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
            std::isdigit(static_cast<unsigned char>(s[i + 1])))
            continue;
        t += static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
    }
    std::string_view body = t;
    if (!body.empty() && (body[0] == '+' || body[0] == '-')) body.remove_prefix(1);
    if (body == "inf" || body == "infinity" || body == "nan") return std::strtod(t.c_str(), nullptr);
    bool digit = false;
    for (const char ch : body) {
        if (std::isdigit(static_cast<unsigned char>(ch))) digit = true;
        else if (ch != '.' && ch != 'e' && ch != '+' && ch != '-') return std::nullopt;
    }
    if (!digit || body.find('x') != std::string_view::npos) return std::nullopt;
    char* end = nullptr;
    const double d = std::strtod(t.c_str(), &end);
    if (*end != '\0') return std::nullopt;
    return d;
}

std::optional<int64_t> float_to_int(double d) {
    if (std::isnan(d)) return std::nullopt;
    if (std::isinf(d) || std::fabs(d) >= 9.2e18) fail("cannot convert float infinity or a huge float to integer");
    return static_cast<int64_t>(std::trunc(d));
}

Value f_int(Runtime&, const Value& in, CallArgs& c) {
    Args a("int", {"default", "base"}, c);
    const Value fallback = a.get_or(0, Value::integer(0));
    if (in.is_undefined()) fail(in.undefined_hint());
    if (in.is_int() || in.is_bool()) return Value::integer(in.integer());
    if (in.is_float()) {
        const auto i = float_to_int(in.number());
        return i ? Value::integer(*i) : fallback;
    }
    if (in.is_string()) {
        if (const auto i = parse_int(in.str(), static_cast<int>(a.integer(1, 10)))) return Value::integer(*i);
        if (const auto d = parse_float(in.str()))
            if (const auto i = float_to_int(*d)) return Value::integer(*i);
    }
    return fallback;
}

Value f_float(Runtime&, const Value& in, CallArgs& c) {
    Args a("float", {"default"}, c);
    if (in.is_undefined()) fail(in.undefined_hint());
    if (in.is_number()) return Value::number(in.number());
    if (in.is_string())
        if (const auto d = parse_float(in.str())) return Value::number(*d);
    return a.get_or(0, Value::number(0.0));
}

Value f_abs(Runtime&, const Value& in, CallArgs& c) {
    Args a("abs", {}, c);
    if (!in.is_number()) fail("bad operand type for abs(): '" + type_name(in) + "'");
    if (in.is_float()) return Value::number(std::fabs(in.number()));
    return in.integer() < 0 ? negate(in, '-') : Value::integer(in.integer());
}

// Python's round(x, ndigits): correctly rounded, halves to even (printf rounds the exact binary value so).
double round_to(double x, int64_t ndigits) {
    if (!std::isfinite(x) || ndigits > 300) return x;
    if (ndigits < 0) {
        const double p = std::pow(10.0, static_cast<double>(-ndigits));
        return std::nearbyint(x / p) * p;
    }
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(ndigits), x);
    return std::strtod(buf, nullptr);
}

Value f_round(Runtime&, const Value& in, CallArgs& c) {
    Args a("round", {"precision", "method"}, c);
    const int64_t precision = a.integer(0, 0);
    const std::string method = a.has(1) ? to_str(a.get(1)) : "common";
    if (method != "common" && method != "ceil" && method != "floor") fail("method must be common, ceil or floor");
    if (in.is_undefined()) fail(in.undefined_hint());
    if (!in.is_number()) fail("type " + type_name(in) + " doesn't define __round__ method");
    if (method == "common") {
        if (!in.is_float() && precision >= 0) return Value::integer(in.integer());
        return Value::number(round_to(in.number(), precision));
    }
    const double p = std::pow(10.0, static_cast<double>(precision));
    return Value::number((method == "ceil" ? std::ceil(in.number() * p) : std::floor(in.number() * p)) / p);
}

// ---- sequences

Value f_length(Runtime&, const Value& in, CallArgs& c) {
    Args a("length", {}, c);
    return Value::integer(length(in));
}

Value f_list(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("list", {}, c);
    return rt.make_list(iterate(in));
}

Value f_first(Runtime&, const Value& in, CallArgs& c) {
    Args a("first", {}, c);
    if (in.is_object(Object::Kind::Generator)) {
        Value v;
        if (static_cast<Generator&>(in.object()).take_one(&v)) return v;
    } else {
        std::vector<Value> items = iterate(in);
        if (!items.empty()) return items.front();
    }
    return Value::undefined("No first item, sequence was empty.");
}

Value f_last(Runtime&, const Value& in, CallArgs& c) {
    Args a("last", {}, c);
    if (!in.is_string() && !in.is_list() && !in.is_dict() && !in.is_undefined())
        fail("'" + type_name(in) + "' object is not reversible");
    const std::vector<Value> items = iterate(in);
    if (items.empty()) return Value::undefined("No last item, sequence was empty.");
    return items.back();
}

Value f_reverse(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("reverse", {}, c);
    if (in.is_string()) {
        std::vector<Value> chars = iterate(in);
        std::string out;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->str();
        return str_value(rt, std::move(out));
    }
    std::vector<Value> items = iterate(in);
    std::reverse(items.begin(), items.end());
    // reversed() of a list or dict is an iterator; anything else jinja2 makes into a reversed list.
    if (in.is_list() || in.is_dict()) return generator(rt, std::move(items));
    return rt.make_list(std::move(items));
}

Value f_join(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("join", {"d", "attribute"}, c);
    const std::string sep = a.has(0) ? to_str(a.get(0)) : "";
    std::string out;
    bool first = true;
    for (const Value& item : iterate(in)) {
        if (!first) out += sep;
        first = false;
        out += to_str(a.has(1) ? attribute_of(rt, item, a.get(1)) : item);
        if (out.size() > rt.limits().max_output_bytes) rt.over("output bytes", rt.limits().max_output_bytes);
    }
    return str_value(rt, std::move(out));
}

Value f_default(Runtime&, const Value& in, CallArgs& c) {
    Args a("default", {"default_value", "boolean"}, c);
    const bool use_default = in.is_undefined() || (a.flag(1, false) && !truthy(in));
    return use_default ? a.get_or(0, Value::string("")) : in;
}

Value f_items(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("items", {}, c);
    if (in.is_undefined()) return generator(rt, {});
    if (!in.is_dict()) fail("Can only get item pairs from a mapping.");
    std::vector<Value> pairs;
    for (const auto& [k, v] : in.dict().items) pairs.push_back(rt.make_list({k, v}, true));
    return generator(rt, std::move(pairs));
}

Value f_dictsort(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("dictsort", {"case_sensitive", "by", "reverse"}, c);
    if (!in.is_dict()) fail("dictsort needs a mapping, not '" + type_name(in) + "'");
    const std::string by = a.has(1) ? to_str(a.get(1)) : "key";
    if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
    const bool case_sensitive = a.flag(0, false), reverse = a.flag(2, false);
    std::vector<std::pair<Value, Value>> items = in.dict().items;
    const auto key = [&](const std::pair<Value, Value>& kv) {
        const Value& k = by == "key" ? kv.first : kv.second;
        return case_sensitive ? k : ignore_case(k);
    };
    std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
        return reverse ? compare(key(y), key(x)) < 0 : compare(key(x), key(y)) < 0;
    });
    std::vector<Value> out;
    for (auto& kv : items) out.push_back(rt.make_list({kv.first, kv.second}, true));
    return rt.make_list(std::move(out));
}

Value f_sort(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("sort", {"reverse", "case_sensitive", "attribute"}, c);
    const bool reverse = a.flag(0, false), case_sensitive = a.flag(1, false);
    std::vector<Value> items = iterate(in);
    std::vector<Value> keys;
    for (const Value& v : items) keys.push_back(sort_key(rt, v, a.get(2), case_sensitive));
    std::vector<size_t> order(items.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    rt.scan(items.size() * sizeof(Value) * 8);
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
        return reverse ? compare(keys[y], keys[x]) < 0 : compare(keys[x], keys[y]) < 0;
    });
    std::vector<Value> out;
    for (const size_t i : order) out.push_back(items[i]);
    return rt.make_list(std::move(out));
}

Value min_or_max(Runtime& rt, const Value& in, CallArgs& c, bool want_max) {
    Args a(want_max ? "max" : "min", {"case_sensitive", "attribute"}, c);
    const std::vector<Value> items = iterate(in);
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    size_t best = 0;
    Value best_key = sort_key(rt, items[0], a.get(1), a.flag(0, false));
    for (size_t i = 1; i < items.size(); ++i) {
        const Value k = sort_key(rt, items[i], a.get(1), a.flag(0, false));
        if (want_max ? compare(k, best_key) > 0 : compare(k, best_key) < 0) {
            best = i;
            best_key = k;
        }
    }
    return items[best];
}

Value f_unique(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("unique", {"case_sensitive", "attribute"}, c);
    std::vector<Value> seen, out;
    for (const Value& item : iterate(in)) {
        const Value k = sort_key(rt, item, a.get(1), a.flag(0, false));
        if (!hashable(k)) fail("unhashable type: '" + type_name(k) + "'");
        rt.scan(seen.size() * sizeof(Value));
        if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) continue;
        seen.push_back(k);
        out.push_back(item);
    }
    return generator(rt, std::move(out));
}

Value f_sum(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("sum", {"attribute", "start"}, c);
    Value total = a.get_or(1, Value::integer(0));
    for (const Value& item : iterate(in)) total = binary_op(rt, "+", total, attribute_of(rt, item, a.get(0)));
    return total;
}

Value f_batch(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("batch", {"linecount", "fill_with"}, c);
    const int64_t n = a.integer(0, 0);
    if (n < 1) fail("batch: linecount must be at least 1");
    std::vector<Value> batches, cur;
    for (const Value& item : iterate(in)) {
        if (static_cast<int64_t>(cur.size()) == n) batches.push_back(rt.make_list(std::exchange(cur, {})));
        cur.push_back(item);
    }
    if (!cur.empty()) {
        if (a.has(1) && !a.get(1).is_none())
            while (static_cast<int64_t>(cur.size()) < n) cur.push_back(a.get(1));
        batches.push_back(rt.make_list(std::move(cur)));
    }
    return generator(rt, std::move(batches));
}

Value f_attr(Runtime& rt, const Value& in, CallArgs& c) {
    Args a("attr", {"name"}, c);
    (void)rt;
    return python_attr(in, to_str(a.get(0)));
}

// select / reject / selectattr / rejectattr: jinja2's select_or_reject.
Value select_or_reject(Runtime& rt, const Value& in, CallArgs& c, bool reject, bool by_attr) {
    const std::vector<Value>& pos = c.positional;
    size_t off = 0;
    Value attribute;
    if (by_attr) {
        if (pos.empty()) fail("Missing parameter for attribute name");
        attribute = pos[0];
        off = 1;
    }
    TestFn test = nullptr;
    CallArgs test_args;
    if (pos.size() > off) {
        const std::string name = to_str(pos[off]);
        test = find_test(name);
        if (!test) fail("no test named '" + name + "'");
        test_args.positional.assign(pos.begin() + static_cast<std::ptrdiff_t>(off) + 1, pos.end());
        test_args.named = c.named;
    }
    std::vector<Value> out;
    if (truthy(in)) {
        for (const Value& item : iterate(in)) {
            const Value subject = by_attr ? attribute_of(rt, item, attribute) : item;
            const bool pass = test ? test(rt, subject, test_args) : truthy(subject);
            if (pass != reject) out.push_back(item);
        }
    }
    return generator(rt, std::move(out));
}

Value f_map(Runtime& rt, const Value& in, CallArgs& c) {
    std::vector<Value> out;
    if (c.positional.empty()) {
        Value attribute, fallback = Value::none();
        for (const auto& [k, v] : c.named) {
            if (k == "attribute") attribute = v;
            else if (k == "default") fallback = v;
            else fail("Unexpected keyword argument '" + k + "'");
        }
        if (attribute.is_undefined()) fail("map requires a filter argument");
        if (truthy(in))
            for (const Value& item : iterate(in)) out.push_back(attribute_of(rt, item, attribute, &fallback));
        return generator(rt, std::move(out));
    }
    const std::string name = to_str(c.positional[0]);
    const FilterFn filter = find_filter(name);
    if (!filter) fail("no filter named '" + name + "'");
    if (truthy(in)) {
        for (const Value& item : iterate(in)) {
            CallArgs args;
            args.positional.assign(c.positional.begin() + 1, c.positional.end());
            args.named = c.named;
            out.push_back(filter(rt, item, args));
        }
    }
    return generator(rt, std::move(out));
}

const std::unordered_map<std::string_view, FilterFn>& registry() {
    static const std::unordered_map<std::string_view, FilterFn> filters = {
        {"abs", f_abs},
        {"attr", f_attr},
        {"batch", f_batch},
        {"capitalize", f_capitalize},
        {"center", f_center},
        {"count", f_length},
        {"d", f_default},
        {"default", f_default},
        {"dictsort", f_dictsort},
        {"e", f_escape},
        {"escape", f_escape},
        {"first", f_first},
        {"float", f_float},
        {"indent", f_indent},
        {"int", f_int},
        {"items", f_items},
        {"join", f_join},
        {"last", f_last},
        {"length", f_length},
        {"list", f_list},
        {"lower", f_lower},
        {"map", f_map},
        {"max", [](Runtime& rt, const Value& in, CallArgs& c) { return min_or_max(rt, in, c, true); }},
        {"min", [](Runtime& rt, const Value& in, CallArgs& c) { return min_or_max(rt, in, c, false); }},
        {"reject", [](Runtime& rt, const Value& in, CallArgs& c) { return select_or_reject(rt, in, c, true, false); }},
        {"rejectattr",
         [](Runtime& rt, const Value& in, CallArgs& c) { return select_or_reject(rt, in, c, true, true); }},
        {"replace", f_replace},
        {"reverse", f_reverse},
        {"round", f_round},
        {"safe", f_safe},
        {"select", [](Runtime& rt, const Value& in, CallArgs& c) { return select_or_reject(rt, in, c, false, false); }},
        {"selectattr",
         [](Runtime& rt, const Value& in, CallArgs& c) { return select_or_reject(rt, in, c, false, true); }},
        {"sort", f_sort},
        {"string", f_string},
        {"sum", f_sum},
        {"title", f_title},
        {"tojson", f_tojson},
        {"trim", f_trim},
        {"unique", f_unique},
        {"upper", f_upper},
        {"wordcount", f_wordcount},
    };
    return filters;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
    const auto& r = registry();
    const auto it = r.find(name);
    return it == r.end() ? nullptr : it->second;
}

}  // namespace tracelm::jinja
