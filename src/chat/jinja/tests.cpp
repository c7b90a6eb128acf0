#include "chat/jinja/tests.h"

#include <unordered_map>

#include "chat/jinja/args.h"
#include "chat/jinja/error.h"
#include "chat/jinja/filters.h"
#include "chat/jinja/operators.h"
#include "chat/jinja/py_text.h"

namespace tracelm::jinja {

namespace {

bool no_args(const char* name, CallArgs& call) {
    Args a(name, {}, call);
    return true;
}

const Value& one_arg(const char* name, CallArgs& call) {
    if (call.positional.size() + call.named.size() != 1) fail(std::string(name) + "() takes exactly one argument");
    return call.positional.empty() ? call.named[0].second : call.positional[0];
}

// value % n == r, as Python computes it for ints and floats.
bool modulo_is(Runtime& rt, const Value& v, const Value& n, int64_t r) {
    return equals(binary_op(rt, "%", v, n), Value::integer(r));
}

bool compare_test(Runtime& rt, const char* op, const Value& v, CallArgs& call) {
    return compare_op(rt, op, v, one_arg(op, call));
}

const std::unordered_map<std::string_view, TestFn>& registry() {
    static const std::unordered_map<std::string_view, TestFn> tests = {
        {"defined", [](Runtime&, const Value& v, CallArgs& c) { return no_args("defined", c) && !v.is_undefined(); }},
        {"undefined",
         [](Runtime&, const Value& v, CallArgs& c) { return no_args("undefined", c) && v.is_undefined(); }},
        {"none", [](Runtime&, const Value& v, CallArgs& c) { return no_args("none", c) && v.is_none(); }},
        {"boolean", [](Runtime&, const Value& v, CallArgs& c) { return no_args("boolean", c) && v.is_bool(); }},
        {"true",
         [](Runtime&, const Value& v, CallArgs& c) { return no_args("true", c) && v.is_bool() && v.boolean(); }},
        {"false",
         [](Runtime&, const Value& v, CallArgs& c) { return no_args("false", c) && v.is_bool() && !v.boolean(); }},
        {"integer", [](Runtime&, const Value& v, CallArgs& c) { return no_args("integer", c) && v.is_int(); }},
        {"float", [](Runtime&, const Value& v, CallArgs& c) { return no_args("float", c) && v.is_float(); }},
        {"number", [](Runtime&, const Value& v, CallArgs& c) { return no_args("number", c) && v.is_number(); }},
        {"string", [](Runtime&, const Value& v, CallArgs& c) { return no_args("string", c) && v.is_string(); }},
        {"mapping", [](Runtime&, const Value& v, CallArgs& c) { return no_args("mapping", c) && v.is_dict(); }},
        {"iterable",
         [](Runtime&, const Value& v, CallArgs& c) {
             return no_args("iterable", c) && (iterable(v) || v.is_object(Object::Kind::Loop));
         }},
        {"sequence",
         [](Runtime&, const Value& v, CallArgs& c) {
             return no_args("sequence", c) && (v.is_string() || v.is_list() || v.is_dict());
         }},
        {"callable",
         [](Runtime&, const Value& v, CallArgs& c) { return no_args("callable", c) && v.is_function(); }},
        {"sameas",
         [](Runtime&, const Value& v, CallArgs& c) { return v.same_object(one_arg("sameas", c)); }},
        {"escaped", [](Runtime&, const Value& v, CallArgs& c) { return no_args("escaped", c) && v.is_markup(); }},
        {"odd",
         [](Runtime& rt, const Value& v, CallArgs& c) {
             return no_args("odd", c) && modulo_is(rt, v, Value::integer(2), 1);
         }},
        {"even",
         [](Runtime& rt, const Value& v, CallArgs& c) {
             return no_args("even", c) && modulo_is(rt, v, Value::integer(2), 0);
         }},
        {"divisibleby",
         [](Runtime& rt, const Value& v, CallArgs& c) { return modulo_is(rt, v, one_arg("divisibleby", c), 0); }},
        {"lower",
         [](Runtime&, const Value& v, CallArgs& c) { return no_args("lower", c) && py::str_islower(to_str(v)); }},
        {"upper",
         [](Runtime&, const Value& v, CallArgs& c) { return no_args("upper", c) && py::str_isupper(to_str(v)); }},
        {"in", [](Runtime& rt, const Value& v, CallArgs& c) { return contains(rt, one_arg("in", c), v); }},
        {"filter",
         [](Runtime&, const Value& v, CallArgs& c) {
             return no_args("filter", c) && v.is_string() && find_filter(v.str()) != nullptr;
         }},
        {"test",
         [](Runtime&, const Value& v, CallArgs& c) {
             return no_args("test", c) && v.is_string() && find_test(v.str()) != nullptr;
         }},
        {"==", [](Runtime& rt, const Value& v, CallArgs& c) { return compare_test(rt, "==", v, c); }},
        {"eq", [](Runtime& rt, const Value& v, CallArgs& c) { return compare_test(rt, "==", v, c); }},
        {"equalto", [](Runtime& rt, const Value& v, CallArgs& c) { return compare_test(rt, "==", v, c); }},
        {"!=", [](Runtime& rt, const Value& v, CallArgs& c) { return compare_test(rt, "!=", v, c); }},
        {"ne", [](Runtime& rt, const Value& v, CallArgs& c) { return compare_test(rt, "!=", v, c); }},
        {"<", [](Runtime& rt, const Value& v, CallArgs& c) { return compare_test(rt, "<", v, c); }},
        {"lt", [](Runtime& rt, const Value& v, CallArgs& c) { return compare_test(rt, "<", v, c); }},
        {"lessthan", [](Runtime& rt, const Value& v, CallArgs& c) { return compare_test(rt, "<", v, c); }},
        {"<=", [](Runtime& rt, const Value& v, CallArgs& c) { return compare_test(rt, "<=", v, c); }},
        {"le", [](Runtime& rt, const Value& v, CallArgs& c) { return compare_test(rt, "<=", v, c); }},
        {">", [](Runtime& rt, const Value& v, CallArgs& c) { return compare_test(rt, ">", v, c); }},
        {"gt", [](Runtime& rt, const Value& v, CallArgs& c) { return compare_test(rt, ">", v, c); }},
        {"greaterthan", [](Runtime& rt, const Value& v, CallArgs& c) { return compare_test(rt, ">", v, c); }},
        {">=", [](Runtime& rt, const Value& v, CallArgs& c) { return compare_test(rt, ">=", v, c); }},
        {"ge", [](Runtime& rt, const Value& v, CallArgs& c) { return compare_test(rt, ">=", v, c); }},
    };
    return tests;
}

}  // namespace

TestFn find_test(std::string_view name) {
    const auto& r = registry();
    const auto it = r.find(name);
    return it == r.end() ? nullptr : it->second;
}

}  // namespace tracelm::jinja
