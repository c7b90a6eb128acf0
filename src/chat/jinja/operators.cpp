#include "chat/jinja/operators.h"

#include <cmath>
#include <limits>
#include <utility>

#include "chat/jinja/error.h"
#include "chat/jinja/percent_format.h"
#include "chat/jinja/py_text.h"

namespace tracelm::jinja {

namespace {

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
    fail("unsupported operand type(s) for " + std::string(op) + ": '" + type_name(a) + "' and '" + type_name(b) +
         "'");
}

[[noreturn]] void overflow() { fail("integer overflow (tracelm's template integers are 64-bit)"); }

bool is_int(const Value& v) { return v.is_int() || v.is_bool(); }

Value repeat(Runtime& rt, const Value& seq, int64_t n) {
    if (n < 0) n = 0;
    if (seq.is_string()) {
        const std::string& s = seq.str();
        if (!s.empty() && static_cast<uint64_t>(n) > rt.limits().max_allocated_bytes / s.size())
            rt.over("allocated bytes", rt.limits().max_allocated_bytes);
        rt.alloc(s.size() * static_cast<size_t>(n));
        std::string out;
        out.reserve(s.size() * static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) out += s;
        return seq.is_markup() ? Value::markup(std::move(out)) : Value::string(std::move(out));
    }
    const std::vector<Value>& items = seq.list().items;
    if (!items.empty() && static_cast<uint64_t>(n) > rt.limits().max_allocated_bytes / (items.size() * sizeof(Value)))
        rt.over("allocated bytes", rt.limits().max_allocated_bytes);
    std::vector<Value> out;
    out.reserve(items.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
    return rt.make_list(std::move(out), seq.list().tuple);
}

Value add(Runtime& rt, const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return Value::number(a.number() + b.number());
        int64_t r = 0;
        if (__builtin_add_overflow(a.integer(), b.integer(), &r)) overflow();
        return Value::integer(r);
    }
    if (a.is_string()) {
        if (!b.is_string()) fail("can only concatenate str (not \"" + type_name(b) + "\") to str");
        if (a.is_markup() || b.is_markup()) {
            // Markup escapes the plain string it meets, on either side.
            std::string out = a.is_markup() ? a.str() : py::html_escape(a.str());
            out += b.is_markup() ? b.str() : py::html_escape(b.str());
            rt.alloc(out.size());
            return Value::markup(std::move(out));
        }
        rt.alloc(a.str().size() + b.str().size());
        return Value::string(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.list().tuple == b.list().tuple) {
        std::vector<Value> out = a.list().items;
        out.insert(out.end(), b.list().items.begin(), b.list().items.end());
        return rt.make_list(std::move(out), a.list().tuple);
    }
    if (a.is_list())
        fail("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
    unsupported("+", a, b);
}

Value multiply(Runtime& rt, const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return Value::number(a.number() * b.number());
        int64_t r = 0;
        if (__builtin_mul_overflow(a.integer(), b.integer(), &r)) overflow();
        return Value::integer(r);
    }
    if ((a.is_string() || a.is_list()) && is_int(b)) return repeat(rt, a, b.integer());
    if ((b.is_string() || b.is_list()) && is_int(a)) return repeat(rt, b, a.integer());
    if (a.is_string() || a.is_list() || b.is_string() || b.is_list())
        fail("can't multiply sequence by non-int of type '" + type_name(a.is_number() ? a : b) + "'");
    unsupported("*", a, b);
}

// CPython's float_divmod.
std::pair<double, double> float_divmod(double x, double y) {
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0 && ((y < 0) != (mod < 0))) {
        mod += y;
        div -= 1.0;
    }
    if (mod == 0) mod = std::copysign(0.0, y);
    double floordiv = std::copysign(0.0, x / y);
    if (div != 0) {
        floordiv = std::floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
    }
    return {floordiv, mod};
}

Value arithmetic(std::string_view op, const Value& a, const Value& b) {
    if (!a.is_number() || !b.is_number()) unsupported(op, a, b);
    const bool ints = !a.is_float() && !b.is_float();
    if (op == "-") {
        if (!ints) return Value::number(a.number() - b.number());
        int64_t r = 0;
        if (__builtin_sub_overflow(a.integer(), b.integer(), &r)) overflow();
        return Value::integer(r);
    }
    if (op == "/") {
        if (b.number() == 0) fail("division by zero");
        return Value::number(a.number() / b.number());
    }
    if (op == "//" || op == "%") {
        if (b.number() == 0) fail(ints ? "integer division or modulo by zero" : "float modulo");
        if (ints) {
            const int64_t x = a.integer(), y = b.integer();
            if (x == std::numeric_limits<int64_t>::min() && y == -1) overflow();
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                --q;
                m += y;
            }
            return Value::integer(op == "//" ? q : m);
        }
        const auto [q, m] = float_divmod(a.number(), b.number());
        return Value::number(op == "%" ? m : q);
    }
    // **
    if (ints && b.integer() >= 0) {
        int64_t base = a.integer(), r = 1;
        for (int64_t e = b.integer(); e > 0; e >>= 1) {
            if ((e & 1) && __builtin_mul_overflow(r, base, &r)) overflow();
            if (e > 1 && __builtin_mul_overflow(base, base, &base)) overflow();
        }
        return Value::integer(r);
    }
    if (a.number() == 0 && b.number() < 0) fail("0.0 cannot be raised to a negative power");
    return Value::number(std::pow(a.number(), b.number()));
}

}  // namespace

Value binary_op(Runtime& rt, std::string_view op, const Value& a, const Value& b) {
    if (a.is_undefined()) fail(a.undefined_hint());
    if (b.is_undefined()) fail(b.undefined_hint());
    if (op == "+") return add(rt, a, b);
    if (op == "*") return multiply(rt, a, b);
    if (op == "%" && a.is_string()) return Value::string(percent_format(rt, a.str(), b));
    return arithmetic(op, a, b);
}

Value negate(const Value& v, char op) {
    if (v.is_undefined()) fail(v.undefined_hint());
    if (!v.is_number()) fail(std::string("bad operand type for unary ") + op + ": '" + type_name(v) + "'");
    if (op == '+') return v.is_float() ? v : Value::integer(v.integer());
    if (v.is_float()) return Value::number(-v.number());
    if (v.integer() == std::numeric_limits<int64_t>::min()) overflow();
    return Value::integer(-v.integer());
}

bool contains(Runtime& rt, const Value& haystack, const Value& needle) {
    switch (haystack.type()) {
        case Value::Type::Undefined:
            return false;
        case Value::Type::String:
            if (!needle.is_string())
                fail("'in <string>' requires string as left operand, not " + type_name(needle));
            rt.scan(haystack.str().size());
            return haystack.str().find(needle.str()) != std::string::npos;
        case Value::Type::List:
            rt.scan(haystack.list().items.size() * sizeof(Value));
            for (const Value& v : haystack.list().items)
                if (equals(v, needle)) return true;
            return false;
        case Value::Type::Dict:
            if (!hashable(needle)) fail("unhashable type: '" + type_name(needle) + "'");
            return haystack.dict().find(needle) != nullptr;
        default:
            if (haystack.is_object(Object::Kind::Generator)) {
                auto& g = static_cast<Generator&>(haystack.object());
                for (Value v; g.take_one(&v);)
                    if (equals(v, needle)) return true;
                return false;
            }
            fail("argument of type '" + type_name(haystack) + "' is not iterable");
    }
}

bool compare_op(Runtime& rt, std::string_view op, const Value& a, const Value& b) {
    if (op == "==") return equals(a, b);
    if (op == "!=") return !equals(a, b);
    if (op == "in") return contains(rt, b, a);
    if (op == "notin") return !contains(rt, b, a);
    const int c = compare(a, b);
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
}

}  // namespace tracelm::jinja
