#include "chat/jinja/methods.h"

#include <algorithm>
#include <array>

#include "chat/jinja/args.h"
#include "chat/jinja/error.h"
#include "chat/jinja/py_text.h"

namespace tracelm::jinja {

namespace {

constexpr std::array kStrMethods = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
    "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower",
    "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "maketrans",
    "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit",
    "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill"};
constexpr std::array kListMethods = {"append", "clear", "copy", "count", "extend", "index", "insert", "pop",
                                     "remove", "reverse", "sort"};
constexpr std::array kListUnsafe = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};
constexpr std::array kTupleMethods = {"count", "index"};
constexpr std::array kDictMethods = {"clear", "copy", "fromkeys", "get", "items", "keys", "pop", "popitem",
                                     "setdefault", "update", "values"};
constexpr std::array kDictUnsafe = {"clear", "pop", "popitem", "setdefault", "update"};

template <size_t N>
bool contains(const std::array<const char*, N>& names, std::string_view name) {
    return std::any_of(names.begin(), names.end(), [&](const char* n) { return name == n; });
}

[[noreturn]] void unsupported(const Value& self, std::string_view name) {
    fail(type_name(self) + "." + std::string(name) + "() is not supported by tracelm's template engine");
}

// A Python index argument (None: absent) clamped into [0, n] as slicing does.
size_t clamp_index(const Value& v, size_t n, size_t fallback) {
    if (v.is_undefined() || v.is_none()) return fallback;
    if (!v.is_int() && !v.is_bool()) fail("slice indices must be integers or None");
    int64_t i = v.integer();
    if (i < 0) i += static_cast<int64_t>(n);
    return static_cast<size_t>(std::clamp<int64_t>(i, 0, static_cast<int64_t>(n)));
}

// The code point window [start, end) of s given by the optional start / end arguments, as a byte range.
struct Window {
    std::string_view text;
    size_t first_cp = 0;  // code point index of text's start
    std::vector<size_t> offsets;
};
Window window(const std::string& s, const Value& start, const Value& end) {
    Window w;
    w.offsets = py::offsets(s);
    const size_t n = w.offsets.size() - 1;
    const size_t b = clamp_index(start, n, 0), e = std::max(b, clamp_index(end, n, n));
    w.text = std::string_view(s).substr(w.offsets[b], w.offsets[e] - w.offsets[b]);
    w.first_cp = b;
    return w;
}
// The code point index in the whole string of a byte offset into the window.
int64_t cp_index(const Window& w, size_t byte_in_text) {
    const size_t target = w.offsets[w.first_cp] + byte_in_text;
    return std::lower_bound(w.offsets.begin(), w.offsets.end(), target) - w.offsets.begin();
}

const std::string& need_str(const Value& v, const char* what) {
    if (!v.is_string()) fail(std::string(what) + " must be str, not " + type_name(v));
    return v.str();
}

Value str_find(Runtime& rt, const std::string& s, std::string_view name, CallArgs& call) {
    Args a(name, {"sub", "start", "end"}, call);
    const std::string& sub = need_str(a.get(0), "substring");
    rt.scan(s.size());
    const Window w = window(s, a.get(1), a.get(2));
    if (name == "count") {
        if (sub.empty()) return Value::integer(static_cast<int64_t>(py::length(w.text)) + 1);
        int64_t n = 0;
        for (size_t at = w.text.find(sub); at != std::string_view::npos; at = w.text.find(sub, at + sub.size())) ++n;
        return Value::integer(n);
    }
    const bool reverse = name == "rfind" || name == "rindex";
    const size_t at = reverse ? w.text.rfind(sub) : w.text.find(sub);
    if (at == std::string_view::npos) {
        if (name == "index" || name == "rindex") fail("substring not found");
        return Value::integer(-1);
    }
    return Value::integer(cp_index(w, at));
}

Value str_affix(Runtime& rt, const std::string& s, std::string_view name, CallArgs& call) {
    Args a(name, {"prefix", "start", "end"}, call);
    rt.scan(s.size());
    const Window w = window(s, a.get(1), a.get(2));
    const bool starts = name == "startswith";
    const auto test = [&](const Value& p) {
        const std::string& t = need_str(p, "startswith/endswith first arg");
        if (t.size() > w.text.size()) return false;
        return starts ? w.text.substr(0, t.size()) == t : w.text.substr(w.text.size() - t.size()) == t;
    };
    const Value& p = a.get(0);
    if (p.is_list() && p.list().tuple)
        return Value::boolean(std::any_of(p.list().items.begin(), p.list().items.end(), test));
    return Value::boolean(test(p));
}

Value str_replace(Runtime& rt, const std::string& s, CallArgs& call) {
    Args a("replace", {"old", "new", "count"}, call);
    const std::string& from = need_str(a.get(0), "replace() argument 1");
    const std::string& to = need_str(a.get(1), "replace() argument 2");
    int64_t count = a.integer(2, -1);
    rt.scan(s.size());
    std::string out;
    if (from.empty()) {
        // Python puts `new` before every character and at the end.
        const std::vector<size_t> off = py::offsets(s);
        for (size_t i = 0; i < off.size(); ++i) {
            if (count != 0) {
                out += to;
                rt.alloc(to.size());
                if (count > 0) --count;
            }
            if (i + 1 < off.size()) out.append(s, off[i], off[i + 1] - off[i]);
        }
        return rt.make_string(std::move(out));
    }
    size_t start = 0;
    for (size_t at = s.find(from); at != std::string::npos && count != 0; at = s.find(from, start)) {
        out.append(s, start, at - start);
        out += to;
        rt.alloc(at - start + to.size());
        start = at + from.size();
        if (count > 0) --count;
    }
    out.append(s, start, std::string::npos);
    return rt.make_string(std::move(out));
}

Value strings(Runtime& rt, std::vector<std::string> parts) {
    std::vector<Value> items;
    items.reserve(parts.size());
    for (std::string& p : parts) items.push_back(rt.make_string(std::move(p)));
    return rt.make_list(std::move(items));
}

template <typename Pred>
Value str_is(const std::string& s, Pred pred) {
    if (s.empty()) return Value::boolean(false);
    for (size_t i = 0, len = 0; i < s.size(); i += len)
        if (!pred(py::decode(s, i, &len))) return Value::boolean(false);
    return Value::boolean(true);
}

Value str_method(Runtime& rt, const std::string& s, const Value& self, std::string_view name, CallArgs& call) {
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        Args a(name, {"chars"}, call);
        rt.scan(s.size());
        return rt.make_string(std::string(py::strip(s, a.string_or_null(0), name != "rstrip", name != "lstrip")));
    }
    if (name == "split" || name == "rsplit") {
        Args a(name, {"sep", "maxsplit"}, call);
        const std::string* sep = a.string_or_null(0);
        if (sep && sep->empty()) fail("empty separator");
        rt.scan(s.size());
        return strings(rt, py::split(s, sep, a.integer(1, -1), name == "rsplit"));
    }
    if (name == "splitlines") {
        Args a(name, {"keepends"}, call);
        rt.scan(s.size());
        return strings(rt, py::splitlines(s, a.flag(0, false)));
    }
    if (name == "startswith" || name == "endswith") return str_affix(rt, s, name, call);
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count")
        return str_find(rt, s, name, call);
    if (name == "replace") return str_replace(rt, s, call);
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "casefold") {
        Args a(name, {}, call);
        rt.scan(s.size());
        return rt.make_string(name == "upper"   ? py::upper(s)
                              : name == "title" ? py::title(s)
                              : name == "capitalize" ? py::capitalize(s)
                                                     : py::lower(s));
    }
    if (name == "join") {
        Args a(name, {"iterable"}, call);
        std::string out;
        const std::vector<Value> items = iterate(a.get(0));
        for (size_t i = 0; i < items.size(); ++i) {
            if (!items[i].is_string())
                fail("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(items[i]) +
                     " found");
            if (i) out += s;
            out += items[i].str();
            rt.alloc(s.size() + items[i].str().size());
        }
        return Value::string(std::move(out));
    }
    if (name == "removeprefix" || name == "removesuffix") {
        Args a(name, {"affix"}, call);
        const std::string& x = need_str(a.get(0), "the argument");
        const bool pre = name == "removeprefix";
        const size_t at = pre ? 0 : s.size() - std::min(s.size(), x.size());
        if (x.size() <= s.size() && s.compare(at, x.size(), x) == 0)
            return rt.make_string(pre ? s.substr(x.size()) : s.substr(0, at));
        return self;
    }
    Args none(name, {}, call);
    rt.scan(s.size());
    if (name == "isdigit" || name == "isdecimal") return str_is(s, py::is_digit);
    if (name == "isalpha") return str_is(s, py::is_alpha);
    if (name == "isalnum") return str_is(s, py::is_alnum);
    if (name == "isspace") return str_is(s, py::is_space);
    if (name == "isupper") return Value::boolean(py::str_isupper(s));
    if (name == "islower") return Value::boolean(py::str_islower(s));
    unsupported(self, name);
}

Value list_method(Runtime& rt, const Value& self, std::string_view name, CallArgs& call) {
    const std::vector<Value>& items = self.list().items;
    if (name == "copy") {
        Args a(name, {}, call);
        return self;
    }
    Args a(name, {"value", "start", "stop"}, call);
    rt.scan(items.size() * sizeof(Value));
    if (name == "count") {
        return Value::integer(
            std::count_if(items.begin(), items.end(), [&](const Value& v) { return equals(v, a.get(0)); }));
    }
    if (name == "index") {
        const size_t b = clamp_index(a.get(1), items.size(), 0);
        const size_t e = clamp_index(a.get(2), items.size(), items.size());
        for (size_t i = b; i < e; ++i)
            if (equals(items[i], a.get(0))) return Value::integer(static_cast<int64_t>(i));
        fail(repr(a.get(0)) + " is not in " + type_name(self));
    }
    unsupported(self, name);
}

Value dict_method(Runtime& rt, const Value& self, std::string_view name, CallArgs& call) {
    const DictData& d = self.dict();
    if (name == "get") {
        Args a(name, {"key", "default"}, call);
        if (!hashable(a.get(0))) fail("unhashable type: '" + type_name(a.get(0)) + "'");
        const Value* v = d.find(a.get(0));
        return v ? *v : a.get_or(1, Value::none());
    }
    Args a(name, {}, call);
    if (name == "copy") return self;
    std::vector<Value> out;
    out.reserve(d.items.size());
    for (const auto& [k, v] : d.items) {
        if (name == "items") {
            out.push_back(rt.make_list({k, v}, true));
        } else if (name == "keys") {
            out.push_back(k);
        } else if (name == "values") {
            out.push_back(v);
        } else {
            unsupported(self, name);
        }
    }
    if (name != "items" && name != "keys" && name != "values") unsupported(self, name);
    return rt.make_list(std::move(out));
}

}  // namespace

MethodKind method_kind(const Value& self, std::string_view name) {
    if (self.is_string()) return contains(kStrMethods, name) ? MethodKind::Safe : MethodKind::None;
    if (self.is_list()) {
        if (self.list().tuple) return contains(kTupleMethods, name) ? MethodKind::Safe : MethodKind::None;
        if (!contains(kListMethods, name)) return MethodKind::None;
        return contains(kListUnsafe, name) ? MethodKind::Unsafe : MethodKind::Safe;
    }
    if (self.is_dict()) {
        if (!contains(kDictMethods, name)) return MethodKind::None;
        return contains(kDictUnsafe, name) ? MethodKind::Unsafe : MethodKind::Safe;
    }
    return MethodKind::None;
}

Value call_method(Runtime& rt, const Value& self, std::string_view name, CallArgs& args) {
    if (method_kind(self, name) == MethodKind::Unsafe)
        fail("access to attribute '" + std::string(name) + "' of '" + type_name(self) + "' object is unsafe.");
    if (self.is_string()) return str_method(rt, self.str(), self, name, args);
    if (self.is_list()) return list_method(rt, self, name, args);
    if (self.is_dict()) return dict_method(rt, self, name, args);
    unsupported(self, name);
}

Value bound_method(const Value& self, std::string_view name) {
    if (method_kind(self, name) == MethodKind::Unsafe)
        return Value::undefined(
            "access to attribute '" + std::string(name) + "' of '" + type_name(self) + "' object is unsafe.", true);
    const std::string method(name);
    return Value::function(type_name(self) + "." + method, [self, method](Runtime& rt, CallArgs& args) {
        return call_method(rt, self, method, args);
    });
}

}  // namespace tracelm::jinja
