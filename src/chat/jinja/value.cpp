#include "chat/jinja/value.h"

#include <algorithm>

#include "chat/jinja/error.h"
#include "chat/jinja/py_text.h"

namespace tracelm::jinja {

const Value* DictData::find(const Value& key) const {
    if (key.is_string()) return find(std::string_view(key.str()));
    for (const auto& [k, v] : items)
        if (equals(k, key)) return &v;
    return nullptr;
}

const Value* DictData::find(std::string_view key) const {
    for (const auto& [k, v] : items)
        if (k.is_string() && k.str() == key) return &v;
    return nullptr;
}

Value Object::attr(std::string_view) const { return Value(); }

Value Value::undefined(std::string hint, bool unsafe) {
    return Value(UndefinedInfo{std::make_shared<const std::string>(std::move(hint)), unsafe});
}

namespace {

int nested_depth(const Value& v) {
    if (v.is_list()) return v.list().depth;
    if (v.is_dict()) return v.dict().depth;
    return 0;
}

void check_depth(int depth) {
    if (depth > kMaxValueDepth)
        fail("lists and dicts nest deeper than " + std::to_string(kMaxValueDepth) + " levels");
}

// Recursion through values, bounded: a namespace can hold itself, which no depth at creation can see.
class Nesting {
   public:
    Nesting() {
        if (++level_ > kMaxValueDepth) {
            --level_;
            fail("a value nests deeper than " + std::to_string(kMaxValueDepth) + " levels (or contains itself)");
        }
    }
    ~Nesting() { --level_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;

   private:
    static thread_local int level_;
};
thread_local int Nesting::level_ = 0;

}  // namespace

Value Value::list(std::vector<Value> items, bool tuple) {
    int depth = 0;
    for (const Value& v : items) depth = std::max(depth, nested_depth(v));
    check_depth(depth + 1);
    return Value(std::make_shared<const ListData>(ListData{std::move(items), tuple, depth + 1}));
}

Value Value::dict(DictData d) {
    int depth = 0;
    for (const auto& kv : d.items) depth = std::max({depth, nested_depth(kv.first), nested_depth(kv.second)});
    check_depth(depth + 1);
    d.depth = depth + 1;
    return Value(std::make_shared<const DictData>(std::move(d)));
}

Value Value::function(std::string name, std::function<Value(Runtime&, CallArgs&)> call, bool macro) {
    return Value(std::make_shared<const Function>(Function{std::move(name), std::move(call), macro}));
}

const std::string& Value::undefined_hint() const {
    static const std::string plain = "undefined value";
    const auto& h = std::get<UndefinedInfo>(v_).hint;
    return h ? *h : plain;
}

bool Value::same_object(const Value& other) const {
    if (type() != other.type()) return false;
    switch (type()) {
        case Type::Undefined:
        case Type::None:
            return true;
        case Type::Bool:
        case Type::Int:
        case Type::Float:
            return equals(*this, other);
        case Type::String:
            return std::get<StrPtr>(v_) == std::get<StrPtr>(other.v_);
        case Type::List:
            return std::get<ListPtr>(v_) == std::get<ListPtr>(other.v_);
        case Type::Dict:
            return std::get<DictPtr>(v_) == std::get<DictPtr>(other.v_);
        case Type::Function:
            return std::get<FnPtr>(v_) == std::get<FnPtr>(other.v_);
        case Type::Object:
            return std::get<ObjPtr>(v_) == std::get<ObjPtr>(other.v_);
    }
    return false;
}

std::vector<Value> Generator::take() {
    std::vector<Value> rest(std::make_move_iterator(items_.begin() + static_cast<std::ptrdiff_t>(pos_)),
                            std::make_move_iterator(items_.end()));
    pos_ = items_.size();
    return rest;
}

bool Generator::take_one(Value* out) {
    if (pos_ >= items_.size()) return false;
    *out = std::move(items_[pos_++]);
    return true;
}

bool truthy(const Value& v) {
    switch (v.type()) {
        case Value::Type::Undefined:
        case Value::Type::None:
            return false;
        case Value::Type::Bool:
            return v.boolean();
        case Value::Type::Int:
            return v.integer() != 0;
        case Value::Type::Float:
            return v.number() != 0.0;
        case Value::Type::String:
            return !v.str().empty();
        case Value::Type::List:
            return !v.list().items.empty();
        case Value::Type::Dict:
            return !v.dict().items.empty();
        default:
            return true;
    }
}

bool equals(const Value& a, const Value& b) {
    const Nesting guard;
    if (a.is_number() && b.is_number()) {
        if (!a.is_float() && !b.is_float()) return a.integer() == b.integer();
        return a.number() == b.number();
    }
    if (a.type() != b.type()) return false;
    switch (a.type()) {
        case Value::Type::Undefined:
        case Value::Type::None:
            return true;
        case Value::Type::String:
            return a.str() == b.str();
        case Value::Type::List: {
            const ListData &x = a.list(), &y = b.list();
            if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
            for (size_t i = 0; i < x.items.size(); ++i)
                if (!equals(x.items[i], y.items[i])) return false;
            return true;
        }
        case Value::Type::Dict: {
            const DictData &x = a.dict(), &y = b.dict();
            if (x.items.size() != y.items.size()) return false;
            for (const auto& [k, v] : x.items) {
                const Value* w = y.find(k);
                if (!w || !equals(v, *w)) return false;
            }
            return true;
        }
        default:
            return a.same_object(b);
    }
}

int compare(const Value& a, const Value& b) {
    const Nesting guard;
    if (a.is_number() && b.is_number()) {
        if (!a.is_float() && !b.is_float()) return a.integer() < b.integer() ? -1 : a.integer() > b.integer();
        const double x = a.number(), y = b.number();
        return x < y ? -1 : x > y;
    }
    if (a.is_string() && b.is_string()) {
        const int c = a.str().compare(b.str());
        return c < 0 ? -1 : c > 0;
    }
    if (a.is_list() && b.is_list() && a.list().tuple == b.list().tuple) {
        const auto &x = a.list().items, &y = b.list().items;
        for (size_t i = 0; i < x.size() && i < y.size(); ++i)
            if (!equals(x[i], y[i])) return compare(x[i], y[i]);
        return x.size() < y.size() ? -1 : x.size() > y.size();
    }
    if (a.is_undefined() || b.is_undefined())
        fail(a.is_undefined() ? a.undefined_hint() : b.undefined_hint());
    fail("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

namespace {

std::string join_reprs(const std::vector<Value>& items) {
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        out += repr(items[i]);
    }
    return out;
}

}  // namespace

std::string to_str(const Value& v) {
    const Nesting guard;
    switch (v.type()) {
        case Value::Type::Undefined:
            return "";
        case Value::Type::None:
            return "None";
        case Value::Type::Bool:
            return v.boolean() ? "True" : "False";
        case Value::Type::Int:
            return std::to_string(v.integer());
        case Value::Type::Float:
            return py::float_repr(v.number());
        case Value::Type::String:
            return v.str();
        case Value::Type::List: {
            const ListData& l = v.list();
            std::string out(1, l.tuple ? '(' : '[');
            out += join_reprs(l.items);
            out += !l.tuple ? "]" : l.items.size() == 1 ? ",)" : ")";
            return out;
        }
        case Value::Type::Dict: {
            std::string out = "{";
            bool first = true;
            for (const auto& [k, x] : v.dict().items) {
                if (!first) out += ", ";
                first = false;
                out += repr(k) + ": " + repr(x);
            }
            return out + "}";
        }
        case Value::Type::Function:
            return v.function().macro ? "<Macro '" + v.function().name + "'>"
                                      : "<function " + v.function().name + ">";
        case Value::Type::Object:
            return v.object().repr();
    }
    return "";
}

std::string repr(const Value& v) {
    if (v.is_markup()) return "Markup(" + py::repr(v.str()) + ")";
    if (v.is_string()) return py::repr(v.str());
    if (v.is_undefined()) return "Undefined";
    return to_str(v);
}

std::string type_name(const Value& v) {
    switch (v.type()) {
        case Value::Type::Undefined:
            return "Undefined";
        case Value::Type::None:
            return "NoneType";
        case Value::Type::Bool:
            return "bool";
        case Value::Type::Int:
            return "int";
        case Value::Type::Float:
            return "float";
        case Value::Type::String:
            return v.is_markup() ? "Markup" : "str";
        case Value::Type::List:
            return v.list().tuple ? "tuple" : "list";
        case Value::Type::Dict:
            return "dict";
        case Value::Type::Function:
            return v.function().macro ? "Macro" : "function";
        case Value::Type::Object:
            return v.object().type_name();
    }
    return "object";
}

int64_t length(const Value& v) {
    switch (v.type()) {
        case Value::Type::Undefined:
            return 0;
        case Value::Type::String:
            return static_cast<int64_t>(py::length(v.str()));
        case Value::Type::List:
            return static_cast<int64_t>(v.list().items.size());
        case Value::Type::Dict:
            return static_cast<int64_t>(v.dict().items.size());
        default:
            fail("object of type '" + type_name(v) + "' has no len()");
    }
}

bool hashable(const Value& v) {
    const Nesting guard;
    if (v.is_dict() || v.is_undefined()) return false;
    if (!v.is_list()) return true;
    return v.list().tuple && std::all_of(v.list().items.begin(), v.list().items.end(), hashable);
}

bool iterable(const Value& v) {
    return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict() || v.is_object(Object::Kind::Generator);
}

std::vector<Value> iterate(const Value& v) {
    switch (v.type()) {
        case Value::Type::Undefined:
            return {};
        case Value::Type::List:
            return v.list().items;
        case Value::Type::String: {
            std::vector<Value> chars;
            const std::string& s = v.str();
            for (size_t i = 0, len = 0; i < s.size(); i += len) {
                py::decode(s, i, &len);
                chars.push_back(Value::string(s.substr(i, len)));
            }
            return chars;
        }
        case Value::Type::Dict: {
            std::vector<Value> keys;
            keys.reserve(v.dict().items.size());
            for (const auto& kv : v.dict().items) keys.push_back(kv.first);
            return keys;
        }
        default:
            if (v.is_object(Object::Kind::Generator)) return static_cast<Generator&>(v.object()).take();
            fail(std::string("'").append(type_name(v)).append("' object is not iterable"));
    }
}

}  // namespace tracelm::jinja
