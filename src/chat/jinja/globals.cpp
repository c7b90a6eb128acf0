#include "chat/jinja/globals.h"

#include <ctime>

#include "chat/jinja/args.h"
#include "chat/jinja/error.h"
#include "chat/jinja/objects.h"
#include "chat/jinja/runtime.h"

namespace tracelm::jinja {

namespace {

Value range(Runtime& rt, CallArgs& call) {
    if (!call.named.empty()) fail("range() takes no keyword arguments");
    const std::vector<Value>& a = call.positional;
    if (a.empty() || a.size() > 3) fail("range expected 1 to 3 arguments, got " + std::to_string(a.size()));
    for (const Value& v : a)
        if (!v.is_int() && !v.is_bool()) fail("'" + type_name(v) + "' object cannot be interpreted as an integer");
    const int64_t start = a.size() == 1 ? 0 : a[0].integer();
    const int64_t stop = a.size() == 1 ? a[0].integer() : a[1].integer();
    const int64_t step = a.size() == 3 ? a[2].integer() : 1;
    if (step == 0) fail("range() arg 3 must not be zero");
    // The count in unsigned arithmetic: the bounds may be any 64-bit integers.
    const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
    const uint64_t span = step > 0 ? (stop > start ? u(stop) - u(start) : 0) : (start > stop ? u(start) - u(stop) : 0);
    const uint64_t mag = step > 0 ? u(step) : uint64_t{0} - u(step);
    const uint64_t count = span == 0 ? 0 : (span - 1) / mag + 1;
    if (count > static_cast<uint64_t>(kMaxRange))
        fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(kMaxRange) + ").");
    std::vector<Value> items;
    items.reserve(static_cast<size_t>(count));
    for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) items.push_back(Value::integer(start + k * step));
    return rt.make_list(std::move(items));
}

// dict(mapping) / dict(pairs) / dict(**kwargs), as Python builds it.
DictData make_dict(CallArgs& call, const char* what) {
    DictData d;
    const auto put = [&](const Value& k, const Value& v) {
        if (!hashable(k)) fail("unhashable type: '" + type_name(k) + "'");
        for (auto& kv : d.items) {
            if (equals(kv.first, k)) {
                kv.second = v;
                return;
            }
        }
        d.items.emplace_back(k, v);
    };
    if (call.positional.size() > 1) fail(std::string(what) + " expected at most 1 argument");
    if (!call.positional.empty()) {
        const Value& src = call.positional[0];
        if (src.is_dict()) {
            for (const auto& [k, v] : src.dict().items) put(k, v);
        } else {
            for (const Value& pair : iterate(src)) {
                const std::vector<Value> kv = iterate(pair);
                if (kv.size() != 2) fail(std::string(what) + ": a sequence element has length " +
                                         std::to_string(kv.size()) + "; 2 is required");
                put(kv[0], kv[1]);
            }
        }
    }
    for (const auto& [k, v] : call.named) put(Value::string(k), v);
    return d;
}

Value namespace_fn(Runtime& rt, CallArgs& call) {
    auto ns = rt.make_object<Namespace>();
    for (const auto& [k, v] : make_dict(call, "namespace").items) {
        if (!k.is_string()) fail("namespace() keywords must be strings");
        ns->set(k.str(), v);
    }
    return Value::object(ns);
}

Value dict_fn(Runtime& rt, CallArgs& call) {
    DictData d = make_dict(call, "dict");
    rt.alloc(d.items.size() * 2 * sizeof(Value));
    return Value::dict(std::move(d));
}

Value raise_exception(Runtime&, CallArgs& call) {
    Args a("raise_exception", {"message"}, call);
    throw Error(Error::Kind::Raised, to_str(a.get(0)));
}

Value strftime_now(Runtime& rt, CallArgs& call) {
    Args a("strftime_now", {"format"}, call);
    if (!a.get(0).is_string()) fail("strftime() argument 1 must be str, not " + type_name(a.get(0)));
    const std::string& fmt = a.get(0).str();
    if (fmt.size() > 1024) fail("strftime_now(): the format is longer than 1024 bytes");
    const std::tm tm = rt.now();
    std::string out(fmt.size() * 16 + 64, '\0');
    const size_t n = std::strftime(out.data(), out.size(), fmt.c_str(), &tm);
    out.resize(n);
    return rt.make_string(std::move(out));
}

// cycler(*items): .next() walks the items round and round, .current is the next one, .reset() starts over.
class Cycler : public Object {
   public:
    explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {}
    Kind kind() const override { return Kind::Cycler; }
    const char* type_name() const override { return "Cycler"; }
    std::string repr() const override { return "<Cycler>"; }
    void release() override { items_.clear(); }
    Value attr(std::string_view name) const override {
        if (name == "current") return items_[pos_];
        if (name == "next")
            return Value::function("cycler.next", [this](Runtime&, CallArgs&) {
                const Value v = items_[pos_];
                pos_ = (pos_ + 1) % items_.size();
                return v;
            });
        if (name == "reset")
            return Value::function("cycler.reset", [this](Runtime&, CallArgs&) {
                pos_ = 0;
                return Value::none();
            });
        return Value();
    }

   private:
    std::vector<Value> items_;
    mutable size_t pos_ = 0;
};

Value cycler(Runtime& rt, CallArgs& call) {
    if (call.positional.empty()) fail("at least one item has to be provided");
    return Value::object(rt.make_object<Cycler>(call.positional));
}

// joiner(sep): a function that returns "" the first time and sep after.
Value joiner(Runtime&, CallArgs& call) {
    Args a("joiner", {"sep"}, call);
    const Value sep = a.get_or(0, Value::string(", "));
    auto used = std::make_shared<bool>(false);
    return Value::function("joiner", [sep, used](Runtime&, CallArgs&) {
        if (!*used) {
            *used = true;
            return Value::string("");
        }
        return sep;
    });
}

}  // namespace

const std::vector<std::pair<std::string, Value>>& builtin_globals() {
    static const std::vector<std::pair<std::string, Value>> globals = {
        {"range", Value::function("range", range)},
        {"dict", Value::function("dict", dict_fn)},
        {"namespace", Value::function("namespace", namespace_fn)},
        {"cycler", Value::function("cycler", cycler)},
        {"joiner", Value::function("joiner", joiner)},
        {"raise_exception", Value::function("raise_exception", raise_exception)},
        {"strftime_now", Value::function("strftime_now", strftime_now)},
    };
    return globals;
}

}  // namespace tracelm::jinja
