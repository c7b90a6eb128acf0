// Template values: what JSON holds (none, booleans, integers, floats, strings, lists, ordered dicts) plus what it
// cannot: jinja2's Undefined, tuples, callables (macros, globals, bound methods) and objects (namespaces, loop
// objects, generators). Values are immutable once built (the sandbox forbids mutating lists and dicts), so
// strings and containers are shared, and copying a Value is cheap.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tracelm::jinja {

class Value;
class Runtime;

// Lists and dicts nest at most this deep (so that walking or freeing one never exhausts the stack).
constexpr int kMaxValueDepth = 256;

struct ListData {
    std::vector<Value> items;
    bool tuple = false;
    int depth = 1;
};

// Insertion-ordered, as Python's dict.
struct DictData {
    std::vector<std::pair<Value, Value>> items;
    int depth = 1;
    const Value* find(const Value& key) const;
    const Value* find(std::string_view key) const;
};

struct CallArgs {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> named;
};

struct Function {
    std::string name;
    std::function<Value(Runtime&, CallArgs&)> call;
    bool macro = false;
};

// Objects that are not plain data. attr() gives Undefined for names the object lacks.
class Object {
   public:
    enum class Kind { Namespace, Loop, Generator, Cycler, Joiner };
    virtual ~Object() = default;
    virtual Kind kind() const = 0;
    virtual const char* type_name() const = 0;
    virtual std::string repr() const = 0;
    virtual Value attr(std::string_view name) const;
    // Drops the values the object holds: the end of a render breaks any reference cycle through it.
    virtual void release() {}
};

// A string, and whether it is markupsafe's Markup (from the safe and escape filters): a str that escapes the plain
// strings added to it, as Python's jinja2 does even with autoescaping off.
struct StrData {
    std::string text;
    bool markup = false;
};

// What jinja2's Undefined carries: why the value is missing, and whether it stands for a forbidden attribute.
struct UndefinedInfo {
    std::shared_ptr<const std::string> hint;  // null: "undefined value"
    bool unsafe = false;                       // calling it is a security error
};

class Value {
   public:
    enum class Type : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Function, Object };

    Value() = default;  // undefined
    static Value undefined(std::string hint, bool unsafe = false);
    static Value none() { return Value(std::monostate{}); }
    static Value boolean(bool b) { return Value(b); }
    static Value integer(int64_t i) { return Value(i); }
    static Value number(double d) { return Value(d); }
    static Value string(std::string s) { return Value(std::make_shared<const StrData>(StrData{std::move(s), false})); }
    static Value markup(std::string s) { return Value(std::make_shared<const StrData>(StrData{std::move(s), true})); }
    static Value list(std::vector<Value> items, bool tuple = false);
    static Value dict(DictData d);
    static Value function(std::string name, std::function<Value(Runtime&, CallArgs&)> call, bool macro = false);
    static Value object(std::shared_ptr<Object> o) { return Value(std::move(o)); }

    Type type() const { return static_cast<Type>(v_.index()); }
    bool is_undefined() const { return type() == Type::Undefined; }
    bool is_none() const { return type() == Type::None; }
    bool is_bool() const { return type() == Type::Bool; }
    bool is_int() const { return type() == Type::Int; }
    bool is_float() const { return type() == Type::Float; }
    bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python's bool is an int
    bool is_string() const { return type() == Type::String; }
    bool is_list() const { return type() == Type::List; }  // lists and tuples
    bool is_dict() const { return type() == Type::Dict; }
    bool is_function() const { return type() == Type::Function; }
    bool is_object() const { return type() == Type::Object; }
    bool is_object(Object::Kind k) const { return is_object() && object().kind() == k; }

    bool boolean() const { return std::get<bool>(v_); }
    int64_t integer() const { return is_bool() ? static_cast<int64_t>(boolean()) : std::get<int64_t>(v_); }
    double number() const { return is_float() ? std::get<double>(v_) : static_cast<double>(integer()); }
    const std::string& str() const { return std::get<StrPtr>(v_)->text; }
    bool is_markup() const { return is_string() && std::get<StrPtr>(v_)->markup; }
    const ListData& list() const { return *std::get<ListPtr>(v_); }
    const DictData& dict() const { return *std::get<DictPtr>(v_); }
    const Function& function() const { return *std::get<FnPtr>(v_); }
    Object& object() const { return *std::get<ObjPtr>(v_); }
    const std::string& undefined_hint() const;
    bool undefined_unsafe() const { return std::get<UndefinedInfo>(v_).unsafe; }
    // Python's `is`: the same object (or equal immutable scalars).
    bool same_object(const Value& other) const;

   private:
    using StrPtr = std::shared_ptr<const StrData>;
    using ListPtr = std::shared_ptr<const ListData>;
    using DictPtr = std::shared_ptr<const DictData>;
    using FnPtr = std::shared_ptr<const Function>;
    using ObjPtr = std::shared_ptr<Object>;
    template <typename T>
    explicit Value(T v) : v_(std::move(v)) {}
    std::variant<UndefinedInfo, std::monostate, bool, int64_t, double, StrPtr, ListPtr, DictPtr, FnPtr, ObjPtr> v_;
};

// Python's semantics on values. Those that recurse into containers fail beyond kMaxValueDepth levels (a
// namespace may contain itself).
bool truthy(const Value& v);
bool equals(const Value& a, const Value& b);
// <0, 0, >0; throws Error (Render) for types Python cannot order.
int compare(const Value& a, const Value& b);
std::string to_str(const Value& v);  // str()
std::string repr(const Value& v);    // repr()
std::string type_name(const Value& v);
// len(); throws for values without a length.
int64_t length(const Value& v);
bool hashable(const Value& v);
// The items iteration yields: a list's items, a string's characters, a dict's keys, a generator's rest (which it
// consumes); Undefined gives none. Throws for values that are not iterable.
std::vector<Value> iterate(const Value& v);
bool iterable(const Value& v);

// An iterator that can be walked once, as jinja2's select/map filters return: always true, without a length.
class Generator : public Object {
   public:
    explicit Generator(std::vector<Value> items) : items_(std::move(items)) {}
    Kind kind() const override { return Kind::Generator; }
    const char* type_name() const override { return "generator"; }
    std::string repr() const override { return "<generator object>"; }
    std::vector<Value> take();
    bool take_one(Value* out);
    void release() override { items_.clear(); }

   private:
    std::vector<Value> items_;
    size_t pos_ = 0;
};

}  // namespace tracelm::jinja
