// Runs a parsed template: statements write the output, expressions evaluate to values, with jinja2's scoping. A
// for loop's body and a macro call each get a fresh scope (so `set` inside them does not leak out, which is why
// templates use namespace()); if blocks share their enclosing scope; a macro sees the variables of the scope it
// was defined in as they are when it runs. Every step is charged to the Runtime's budget.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja/ast.h"
#include "chat/jinja/runtime.h"

namespace tracelm::jinja {

class Renderer {
   public:
    // `variables` outlive the renderer; they are looked up after the template's own names, before the globals.
    Renderer(Runtime& rt, const std::vector<std::pair<std::string, Value>>& variables)
        : rt_(rt), variables_(variables) {}

    std::string render(const Body& body);

   private:
    struct Frame {
        Frame* parent = nullptr;
        std::vector<std::pair<std::string_view, Value>> vars;
        bool captured = false;  // a macro defined here may run after the scope ends
        void set(std::string_view name, Value v);
    };
    // A new scope for as long as it lives; a captured one is kept until the render ends.
    class Scope {
       public:
        Scope(Renderer& r, Frame* parent);
        ~Scope();
        Scope(const Scope&) = delete;
        Scope& operator=(const Scope&) = delete;

       private:
        Renderer& r_;
        Frame* saved_;
        std::unique_ptr<Frame> frame_;
    };
    // Output goes to `buffer` for as long as it lives.
    class Capture {
       public:
        Capture(Renderer& r, std::string* buffer) : r_(r), saved_(r.out_) { r.out_ = buffer; }
        ~Capture() { r_.out_ = saved_; }
        Capture(const Capture&) = delete;
        Capture& operator=(const Capture&) = delete;

       private:
        Renderer& r_;
        std::string* saved_;
    };
    enum class Flow { Normal, Break, Continue };

    // statements (renderer.cpp)
    Flow exec(const Body& body);
    Flow exec(const Stmt& s);
    void exec_for(const struct ForStmt& s);
    void emit(std::string_view text);
    std::string capture(const Body& body);
    void assign(const Target& t, const Value& v);
    Value define_macro(const MacroStmt& m);
    Value call_macro(const MacroStmt& m, Frame* scope, CallArgs& args);

    // expressions (expressions.cpp)
    Value eval(const Expr& e);
    Value lookup(std::string_view name) const;
    Value eval_call(const CallExpr& c, const Value* caller);
    CallArgs eval_args(const CallArgsExpr& a);
    Value call(const Value& fn, CallArgs& args);
    // The filters of `chain` applied to `input`, innermost first (chain's innermost value is null).
    Value apply_filters(const Expr& chain, const Value& input);
    Value eval_filter(const FilterExpr& f, const Value& input);
    Value eval_compare(const CompareExpr& c);

    Runtime& rt_;
    const std::vector<std::pair<std::string, Value>>& variables_;
    Frame* frame_ = nullptr;
    std::vector<std::unique_ptr<Frame>> kept_;
    std::string* out_ = nullptr;
};

}  // namespace tracelm::jinja
