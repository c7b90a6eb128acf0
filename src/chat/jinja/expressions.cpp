// Renderer: evaluating expressions.
#include "chat/jinja/access.h"
#include "chat/jinja/error.h"
#include "chat/jinja/globals.h"
#include "chat/jinja/methods.h"
#include "chat/jinja/operators.h"
#include "chat/jinja/renderer.h"

namespace tracelm::jinja {

Value Renderer::lookup(std::string_view name) const {
    for (const Frame* f = frame_; f; f = f->parent)
        for (const auto& [k, v] : f->vars)
            if (k == name) return v;
    for (const auto& [k, v] : variables_)
        if (k == name) return v;
    for (const auto& [k, v] : builtin_globals())
        if (k == name) return v;
    return Value::undefined(std::string("'").append(name).append("' is undefined"));
}

CallArgs Renderer::eval_args(const CallArgsExpr& a) {
    CallArgs out;
    out.positional.reserve(a.positional.size());
    for (const ExprPtr& e : a.positional) out.positional.push_back(eval(*e));
    if (a.star)
        for (Value& v : iterate(eval(*a.star))) out.positional.push_back(std::move(v));
    for (const auto& [k, e] : a.named) out.named.emplace_back(k, eval(*e));
    if (a.star_star) {
        const Value d = eval(*a.star_star);
        if (!d.is_dict()) fail("argument after ** must be a mapping, not " + type_name(d));
        for (const auto& [k, v] : d.dict().items) {
            if (!k.is_string()) fail("keywords must be strings");
            out.named.emplace_back(k.str(), v);
        }
    }
    return out;
}

Value Renderer::call(const Value& fn, CallArgs& args) {
    if (fn.is_function()) return fn.function().call(rt_, args);
    if (fn.is_undefined()) {
        if (fn.undefined_unsafe()) fail("SecurityError: " + fn.undefined_hint());
        fail(fn.undefined_hint());
    }
    fail("'" + type_name(fn) + "' object is not callable");
}

Value Renderer::eval_call(const CallExpr& c, const Value* caller) {
    // obj.method(...) on a str, list or dict calls the method directly, without a bound-method value.
    if (c.callee->kind == Expr::Kind::GetAttr && !caller) {
        const auto& ga = static_cast<const GetAttrExpr&>(*c.callee);
        const Value obj = eval(*ga.object);
        if ((obj.is_string() || obj.is_list() || obj.is_dict()) && method_kind(obj, ga.name) != MethodKind::None) {
            CallArgs args = eval_args(c.args);
            return call_method(rt_, obj, ga.name, args);
        }
        const Value fn = get_attr(rt_, obj, ga.name);
        CallArgs args = eval_args(c.args);
        return call(fn, args);
    }
    const Value fn = eval(*c.callee);
    CallArgs args = eval_args(c.args);
    if (caller) args.named.emplace_back("caller", *caller);
    return call(fn, args);
}

Value Renderer::eval_filter(const FilterExpr& f, const Value& input) {
    if (!f.fn) fail("no filter named '" + f.name + "'");
    CallArgs args = eval_args(f.args);
    return f.fn(rt_, input, args);
}

Value Renderer::apply_filters(const Expr& chain, const Value& input) {
    const auto& f = static_cast<const FilterExpr&>(chain);
    if (!f.value) return eval_filter(f, input);
    return eval_filter(f, apply_filters(*f.value, input));
}

Value Renderer::eval_compare(const CompareExpr& c) {
    Value left = eval(*c.first);
    for (const auto& [op, expr] : c.rest) {
        Value right = eval(*expr);
        if (!compare_op(rt_, op, left, right)) return Value::boolean(false);
        left = std::move(right);
    }
    return Value::boolean(true);
}

Value Renderer::eval(const Expr& e) {
    rt_.step();
    switch (e.kind) {
        case Expr::Kind::Literal:
            return static_cast<const LiteralExpr&>(e).value;
        case Expr::Kind::Name:
            return lookup(static_cast<const NameExpr&>(e).name);
        case Expr::Kind::List: {
            const auto& l = static_cast<const ListExpr&>(e);
            std::vector<Value> items;
            items.reserve(l.items.size());
            for (const ExprPtr& i : l.items) items.push_back(eval(*i));
            return rt_.make_list(std::move(items), l.tuple);
        }
        case Expr::Kind::Dict: {
            DictData d;
            for (const auto& [ke, ve] : static_cast<const DictExpr&>(e).items) {
                Value k = eval(*ke);
                if (!hashable(k)) fail("unhashable type: '" + type_name(k) + "'");
                Value v = eval(*ve);
                bool replaced = false;
                for (auto& kv : d.items) {
                    if (equals(kv.first, k)) {
                        kv.second = v;
                        replaced = true;
                    }
                }
                if (!replaced) d.items.emplace_back(std::move(k), std::move(v));
            }
            rt_.alloc(d.items.size() * 2 * sizeof(Value));
            return Value::dict(std::move(d));
        }
        case Expr::Kind::GetAttr: {
            const auto& g = static_cast<const GetAttrExpr&>(e);
            return get_attr(rt_, eval(*g.object), g.name);
        }
        case Expr::Kind::GetItem: {
            const auto& g = static_cast<const GetItemExpr&>(e);
            const Value obj = eval(*g.object);
            if (g.index->kind == Expr::Kind::Slice) {
                const auto& s = static_cast<const SliceExpr&>(*g.index);
                const auto bound = [&](const ExprPtr& b) { return b ? eval(*b) : Value::none(); };
                return get_slice(rt_, obj, bound(s.start), bound(s.stop), bound(s.step));
            }
            return get_item(rt_, obj, eval(*g.index));
        }
        case Expr::Kind::Slice:
            fail("a slice outside of []");
        case Expr::Kind::Call:
            return eval_call(static_cast<const CallExpr&>(e), nullptr);
        case Expr::Kind::Filter: {
            const auto& f = static_cast<const FilterExpr&>(e);
            return eval_filter(f, eval(*f.value));
        }
        case Expr::Kind::Test: {
            const auto& t = static_cast<const TestExpr&>(e);
            if (!t.fn) fail("no test named '" + t.name + "'");
            const Value v = eval(*t.value);
            CallArgs args = eval_args(t.args);
            return Value::boolean(t.fn(rt_, v, args));
        }
        case Expr::Kind::Unary: {
            const auto& u = static_cast<const UnaryExpr&>(e);
            const Value v = eval(*u.operand);
            if (u.op == '!') return Value::boolean(!truthy(v));
            return negate(v, u.op);
        }
        case Expr::Kind::Binary: {
            const auto& b = static_cast<const BinaryExpr&>(e);
            const Value left = eval(*b.left);
            return binary_op(rt_, b.op, left, eval(*b.right));
        }
        case Expr::Kind::And: {
            const auto& b = static_cast<const BinaryExpr&>(e);
            Value left = eval(*b.left);
            return truthy(left) ? eval(*b.right) : left;
        }
        case Expr::Kind::Or: {
            const auto& b = static_cast<const BinaryExpr&>(e);
            Value left = eval(*b.left);
            return truthy(left) ? left : eval(*b.right);
        }
        case Expr::Kind::Compare:
            return eval_compare(static_cast<const CompareExpr&>(e));
        case Expr::Kind::Concat: {
            std::string out;
            for (const ExprPtr& p : static_cast<const ConcatExpr&>(e).parts) {
                const Value v = eval(*p);
                if (v.is_string()) {
                    out += v.str();
                } else {
                    out += to_str(v);
                }
            }
            return rt_.make_string(std::move(out));
        }
        case Expr::Kind::Cond: {
            const auto& c = static_cast<const CondExpr&>(e);
            if (truthy(eval(*c.test))) return eval(*c.then);
            return c.otherwise ? eval(*c.otherwise) : Value::undefined("the inline if expression evaluated to false "
                                                                       "and no else section was defined.");
        }
    }
    return Value();
}

}  // namespace tracelm::jinja
