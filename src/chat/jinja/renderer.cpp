#include "chat/jinja/renderer.h"

#include "chat/jinja/error.h"
#include "chat/jinja/objects.h"

namespace tracelm::jinja {

void Renderer::Frame::set(std::string_view name, Value v) {
    for (auto& [k, old] : vars) {
        if (k == name) {
            old = std::move(v);
            return;
        }
    }
    vars.emplace_back(name, std::move(v));
}

Renderer::Scope::Scope(Renderer& r, Frame* parent) : r_(r), saved_(r.frame_), frame_(std::make_unique<Frame>()) {
    frame_->parent = parent;
    r_.frame_ = frame_.get();
}

Renderer::Scope::~Scope() {
    r_.frame_ = saved_;
    if (frame_->captured) r_.kept_.push_back(std::move(frame_));
}

std::string Renderer::render(const Body& body) {
    std::string out;
    Capture c(*this, &out);
    Scope root(*this, nullptr);
    exec(body);
    return out;
}

void Renderer::emit(std::string_view text) {
    if (text.size() > rt_.limits().max_output_bytes - std::min(out_->size(), rt_.limits().max_output_bytes))
        rt_.over("output bytes", rt_.limits().max_output_bytes);
    out_->append(text);
}

std::string Renderer::capture(const Body& body) {
    std::string text;
    {
        Capture c(*this, &text);
        Scope s(*this, frame_);
        exec(body);
    }
    rt_.alloc(text.size());
    return text;
}

Renderer::Flow Renderer::exec(const Body& body) {
    for (const StmtPtr& s : body) {
        const Flow f = exec(*s);
        if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
}

void Renderer::assign(const Target& t, const Value& v) {
    if (!t.attribute.empty()) {
        const Value ns = lookup(t.names[0]);
        if (!ns.is_object(Object::Kind::Namespace)) fail("cannot assign attribute on non-namespace object");
        static_cast<Namespace&>(ns.object()).set(t.attribute, v);
        return;
    }
    if (!t.tuple) {
        frame_->set(t.names[0], v);
        return;
    }
    const std::vector<Value> items = iterate(v);
    if (items.size() != t.names.size())
        fail(items.size() > t.names.size()
                 ? "too many values to unpack (expected " + std::to_string(t.names.size()) + ")"
                 : "not enough values to unpack (expected " + std::to_string(t.names.size()) + ", got " +
                       std::to_string(items.size()) + ")");
    for (size_t i = 0; i < items.size(); ++i) frame_->set(t.names[i], items[i]);
}

Renderer::Flow Renderer::exec(const Stmt& s) {
    rt_.step();
    try {
        switch (s.kind) {
            case Stmt::Kind::Text:
                emit(static_cast<const TextStmt&>(s).text);
                break;
            case Stmt::Kind::Print: {
                const Value v = eval(*static_cast<const PrintStmt&>(s).expr);
                if (v.is_string()) {
                    emit(v.str());
                } else {
                    emit(to_str(v));
                }
                break;
            }
            case Stmt::Kind::If: {
                const auto& i = static_cast<const IfStmt&>(s);
                for (const auto& [test, body] : i.branches)
                    if (truthy(eval(*test))) return exec(body);
                return exec(i.otherwise);
            }
            case Stmt::Kind::For:
                exec_for(static_cast<const ForStmt&>(s));
                break;
            case Stmt::Kind::Set: {
                const auto& set = static_cast<const SetStmt&>(s);
                assign(set.target, eval(*set.value));
                break;
            }
            case Stmt::Kind::SetBlock: {
                const auto& set = static_cast<const SetBlockStmt&>(s);
                Value v = Value::string(capture(set.body));
                if (set.filter) v = apply_filters(*set.filter, v);
                assign(set.target, v);
                break;
            }
            case Stmt::Kind::Macro: {
                const auto& m = static_cast<const MacroStmt&>(s);
                frame_->set(m.name, define_macro(m));
                break;
            }
            case Stmt::Kind::CallBlock: {
                const auto& cb = static_cast<const CallBlockStmt&>(s);
                const Value caller = define_macro(cb.caller);
                const Value v = eval_call(static_cast<const CallExpr&>(*cb.call), &caller);
                emit(v.is_string() ? v.str() : to_str(v));
                break;
            }
            case Stmt::Kind::FilterBlock: {
                const auto& fb = static_cast<const FilterBlockStmt&>(s);
                const Value v = apply_filters(*fb.filter, Value::string(capture(fb.body)));
                emit(to_str(v));
                break;
            }
            case Stmt::Kind::With: {
                const auto& w = static_cast<const WithStmt&>(s);
                std::vector<Value> values;
                for (const auto& a : w.assignments) values.push_back(eval(*a.second));
                Scope scope(*this, frame_);
                for (size_t i = 0; i < values.size(); ++i) assign(w.assignments[i].first, values[i]);
                return exec(w.body);
            }
            case Stmt::Kind::Generation:  // transformers renders it as a call block: the body has its own scope
                emit(capture(static_cast<const BodyStmt&>(s).body));
                break;
            case Stmt::Kind::Break:
                return Flow::Break;
            case Stmt::Kind::Continue:
                return Flow::Continue;
        }
    } catch (const Error& e) {
        throw e.at_line(s.line);
    }
    return Flow::Normal;
}

void Renderer::exec_for(const ForStmt& f) {
    const Value iterable = eval(*f.iterable);
    if (iterable.is_none() || (!iterable.is_undefined() && !jinja::iterable(iterable)))
        fail("'" + type_name(iterable) + "' object is not iterable");
    std::vector<Value> items = iterate(iterable);
    if (f.filter) {
        std::vector<Value> kept;
        for (Value& item : items) {
            rt_.iteration();
            Scope scope(*this, frame_);
            assign(f.target, item);
            if (truthy(eval(*f.filter))) kept.push_back(std::move(item));
        }
        items = std::move(kept);
    }
    if (items.empty()) {
        exec(f.otherwise);
        return;
    }
    const auto shared = std::make_shared<const std::vector<Value>>(std::move(items));
    const auto loop = rt_.make_object<Loop>(shared);
    const Value loop_value = Value::object(loop);
    Frame* const outer = frame_;
    for (size_t i = 0; i < shared->size(); ++i) {
        rt_.iteration();
        Scope scope(*this, outer);
        loop->at(i);
        assign(f.target, (*shared)[i]);
        frame_->set("loop", loop_value);
        if (exec(f.body) == Flow::Break) break;
    }
}

Value Renderer::define_macro(const MacroStmt& m) {
    Frame* const scope = frame_;
    scope->captured = true;
    return Value::function(
        m.name, [this, &m, scope](Runtime&, CallArgs& args) { return call_macro(m, scope, args); }, true);
}

Value Renderer::call_macro(const MacroStmt& m, Frame* scope, CallArgs& args) {
    const Runtime::CallScope depth(rt_);
    const std::string who = "macro '" + m.name + "'";
    std::vector<Value> varargs;
    DictData kwargs;
    std::string text;
    {
        Scope s(*this, scope);
        std::vector<bool> bound(m.params.size(), false);
        for (size_t i = 0; i < args.positional.size(); ++i) {
            if (i < m.params.size()) {
                frame_->set(m.params[i], args.positional[i]);
                bound[i] = true;
            } else if (m.uses_varargs) {
                varargs.push_back(args.positional[i]);
            } else {
                fail(who + " takes not more than " + std::to_string(m.params.size()) + " argument(s)");
            }
        }
        for (const auto& [name, value] : args.named) {
            size_t i = 0;
            while (i < m.params.size() && m.params[i] != name) ++i;
            if (i < m.params.size()) {
                if (bound[i]) fail(who + " got multiple values for argument '" + name + "'");
                frame_->set(m.params[i], value);
                bound[i] = true;
            } else if (name == "caller" && m.uses_caller) {
                frame_->set("caller", value);
            } else if (m.uses_kwargs) {
                kwargs.items.emplace_back(Value::string(name), value);
            } else {
                fail(who + " takes no keyword argument '" + name + "'");
            }
        }
        // Defaults are evaluated when the macro runs, in its own scope (they may name earlier parameters).
        const size_t first_default = m.params.size() - m.defaults.size();
        for (size_t i = 0; i < m.params.size(); ++i) {
            if (bound[i]) continue;
            frame_->set(m.params[i], i >= first_default ? eval(*m.defaults[i - first_default])
                                                        : Value::undefined("parameter '" + m.params[i] +
                                                                           "' was not provided"));
        }
        if (m.uses_varargs) frame_->set("varargs", rt_.make_list(std::move(varargs), true));
        if (m.uses_kwargs) frame_->set("kwargs", Value::dict(std::move(kwargs)));
        if (m.uses_caller) {
            bool has_caller = false;
            for (const auto& kv : frame_->vars) has_caller |= kv.first == "caller";
            if (!has_caller) frame_->set("caller", Value::undefined("No caller defined"));
        }
        Capture c(*this, &text);
        exec(m.body);
    }
    return rt_.make_string(std::move(text));
}

}  // namespace tracelm::jinja
