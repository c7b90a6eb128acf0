#include "chat/jinja/parser.h"

#include "chat/jinja/ast_walk.h"
#include "chat/jinja/error.h"
#include "chat/jinja/filters.h"
#include "chat/jinja/tests.h"

namespace tracelm::jinja {

namespace {

using TT = Token::Type;

class Parser {
   public:
    Parser(const std::vector<Token>& tokens, const Limits& limits) : t_(tokens), limits_(limits) {}

    Body run() {
        Body body = subparse({});
        if (cur().type != TT::Eof) fail_here("unexpected " + describe(cur()));
        return body;
    }

   private:
    // ---- the token stream
    const Token& cur() const { return t_[i_]; }
    const Token& look() const { return t_[i_ + 1 < t_.size() ? i_ + 1 : i_]; }
    const Token& next() {
        const Token& t = t_[i_];
        if (i_ + 1 < t_.size()) ++i_;
        return t;
    }
    bool is_name(const char* n) const { return cur().type == TT::Name && cur().text == n; }
    bool is_op(const char* o) const { return cur().type == TT::Operator && cur().text == o; }
    bool skip_name(const char* n) {
        if (!is_name(n)) return false;
        next();
        return true;
    }
    bool skip_op(const char* o) {
        if (!is_op(o)) return false;
        next();
        return true;
    }
    void expect_op(const char* o) {
        if (!skip_op(o)) fail_here(std::string("expected '") + o + "', got " + describe(cur()));
    }
    void expect(TT type, const char* what) {
        if (cur().type != type) fail_here(std::string("expected ") + what + ", got " + describe(cur()));
        next();
    }
    std::string expect_name() {
        if (cur().type != TT::Name) fail_here("expected a name, got " + describe(cur()));
        return next().text;
    }
    static std::string describe(const Token& t) {
        switch (t.type) {
            case TT::Eof: return "end of template";
            case TT::BlockEnd: return "end of statement block";
            case TT::VariableEnd: return "end of print statement";
            case TT::Data: return "template data";
            case TT::Name: return "'" + t.text + "'";
            case TT::Operator: return "'" + t.text + "'";
            case TT::String: return "a string";
            default: return "a number";
        }
    }
    [[noreturn]] void fail_here(const std::string& message) const {
        throw Error(Error::Kind::Syntax, message, cur().line);
    }

    // Nesting guard for statements and expressions alike.
    struct Depth {
        explicit Depth(Parser& p) : p_(p) { p_.deeper(); }
        ~Depth() { --p_.depth_; }
        Parser& p_;
    };
    void deeper() {
        if (++depth_ > limits_.max_nesting)
            fail_here("the template nests deeper than " + std::to_string(limits_.max_nesting) + " levels");
    }
    // A chain (a + b + c, x|f|g, x.a.b, a or b or c) builds one tree level per link: each link counts as a level for
    // as long as the chain is parsed, so that the tree, and every recursion over it, stays within max_nesting.
    struct Chain {
        explicit Chain(Parser& p) : p_(p) {}
        void link() {
            p_.deeper();
            ++links_;
        }
        ~Chain() { p_.depth_ -= links_; }
        Parser& p_;
        int links_ = 0;
    };

    // ---- statements
    Body subparse(const std::vector<const char*>& end_tokens) {
        Body body;
        while (cur().type != TT::Eof) {
            const Token& tok = cur();
            if (tok.type == TT::Data) {
                const int line = tok.line;
                std::string text = next().text;
                while (cur().type == TT::Data) text += next().text;
                body.push_back(std::make_unique<TextStmt>(line, std::move(text)));
            } else if (tok.type == TT::VariableBegin) {
                const int line = next().line;
                body.push_back(std::make_unique<PrintStmt>(line, parse_tuple(true, false, {})));
                expect(TT::VariableEnd, "end of print statement");
            } else if (tok.type == TT::BlockBegin) {
                next();
                for (const char* e : end_tokens)
                    if (is_name(e)) return body;
                body.push_back(parse_statement());
                expect(TT::BlockEnd, "end of statement block");
            } else {
                fail_here("unexpected " + describe(tok));
            }
        }
        if (!end_tokens.empty()) {
            std::string names;
            for (const char* e : end_tokens) names += std::string(names.empty() ? "'" : " or '") + e + "'";
            fail_here("unexpected end of template: expected " + names);
        }
        return body;
    }

    // A block's body up to one of end_tokens (left current unless drop).
    Body statements(const std::vector<const char*>& end_tokens, bool drop) {
        skip_op(":");
        expect(TT::BlockEnd, "end of statement block");
        Body body = subparse(end_tokens);
        if (drop) next();
        return body;
    }

    StmtPtr parse_statement() {
        Depth d(*this);
        if (cur().type != TT::Name) fail_here("tag name expected");
        const std::string tag = cur().text;
        const int line = cur().line;
        if (tag == "for") return parse_for();
        if (tag == "if") return parse_if();
        if (tag == "set") return parse_set();
        if (tag == "macro") return parse_macro();
        if (tag == "call") return parse_call_block();
        if (tag == "filter") return parse_filter_block();
        if (tag == "with") return parse_with();
        if (tag == "print") {
            next();
            return std::make_unique<PrintStmt>(line, parse_tuple(true, false, {}));
        }
        if (tag == "break" || tag == "continue") {
            if (loops_ == 0) fail_here("'" + tag + "' outside of a loop");
            next();
            return std::make_unique<BodyStmt>(tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, line);
        }
        if (tag == "generation") {
            next();
            auto s = std::make_unique<BodyStmt>(Stmt::Kind::Generation, line);
            s->body = statements({"endgeneration"}, true);
            return s;
        }
        if (tag == "include" || tag == "import" || tag == "from" || tag == "extends" || tag == "block")
            fail_here("'" + tag + "' is not supported: a chat template cannot load or extend other templates");
        fail_here("encountered unknown tag '" + tag + "'");
    }

    StmtPtr parse_for() {
        auto s = std::make_unique<ForStmt>(next().line);
        s->target = parse_target(false, "in");
        if (!skip_name("in")) fail_here("expected 'in', got " + describe(cur()));
        s->iterable = parse_tuple(false, false, {"recursive"});
        if (skip_name("if")) s->filter = parse_expression(true);
        if (is_name("recursive")) fail_here("recursive for loops are not supported");
        ++loops_;
        s->body = statements({"endfor", "else"}, false);
        --loops_;
        if (next().text == "else") s->otherwise = statements({"endfor"}, true);
        return s;
    }

    StmtPtr parse_if() {
        auto s = std::make_unique<IfStmt>(next().line);
        ++soft_;
        while (true) {
            ExprPtr test = parse_tuple(false, false, {});
            Body body = statements({"elif", "else", "endif"}, false);
            s->branches.emplace_back(std::move(test), std::move(body));
            const std::string tok = next().text;
            if (tok == "elif") continue;
            if (tok == "else") s->otherwise = statements({"endif"}, true);
            break;
        }
        --soft_;
        return s;
    }

    StmtPtr parse_set() {
        const int line = next().line;
        Target target = parse_target(true, nullptr);
        if (skip_op("=")) {
            auto s = std::make_unique<SetStmt>(line);
            s->target = std::move(target);
            s->value = parse_tuple(true, false, {});
            return s;
        }
        auto s = std::make_unique<SetBlockStmt>(line);
        s->target = std::move(target);
        if (is_op("|")) s->filter = parse_filter(nullptr);
        s->body = statements({"endset"}, true);
        return s;
    }

    void parse_signature(MacroStmt& m) {
        expect_op("(");
        while (!is_op(")")) {
            if (!m.params.empty()) expect_op(",");
            m.params.push_back(expect_name());
            if (skip_op("=")) {
                m.defaults.push_back(parse_expression(true));
            } else if (!m.defaults.empty()) {
                fail_here("non-default argument follows default argument");
            }
        }
        expect_op(")");
    }

    StmtPtr parse_macro() {
        auto s = std::make_unique<MacroStmt>(next().line);
        s->name = expect_name();
        parse_signature(*s);
        macro_body(*s, "endmacro");
        return s;
    }

    // A macro's body, with what it reads of caller, varargs and kwargs (only those it names take them).
    void macro_body(MacroStmt& m, const char* end) {
        const int loops = loops_;
        loops_ = 0;
        m.body = statements({end}, true);
        loops_ = loops;
        scan_names(m.body, m);
    }

    StmtPtr parse_call_block() {
        auto s = std::make_unique<CallBlockStmt>(next().line);
        s->caller.name = "caller";
        if (is_op("(")) parse_signature(s->caller);
        s->call = parse_expression(true);
        if (s->call->kind != Expr::Kind::Call) fail_here("expected a call");
        macro_body(s->caller, "endcall");
        return s;
    }

    StmtPtr parse_filter_block() {
        auto s = std::make_unique<FilterBlockStmt>(next().line);
        s->filter = parse_filter(nullptr, true);
        s->body = statements({"endfilter"}, true);
        return s;
    }

    StmtPtr parse_with() {
        auto s = std::make_unique<WithStmt>(next().line);
        while (cur().type != TT::BlockEnd) {
            if (!s->assignments.empty()) expect_op(",");
            Target t = parse_target(false, nullptr);
            expect_op("=");
            s->assignments.emplace_back(std::move(t), parse_expression(true));
        }
        s->body = statements({"endwith"}, true);
        return s;
    }

    // name, a tuple of names, or (with_namespace) name.attribute.
    Target parse_target(bool with_namespace, const char* end_name) {
        Target t;
        if (with_namespace && cur().type == TT::Name && look().type == TT::Operator && look().text == ".") {
            t.names.push_back(next().text);
            next();
            t.attribute = expect_name();
            return t;
        }
        const bool paren = skip_op("(");
        while (true) {
            if (!t.names.empty()) {
                if (!skip_op(",")) break;
                t.tuple = true;
                if ((paren && is_op(")")) || (end_name && is_name(end_name)) || is_op("=")) break;
            }
            t.names.push_back(expect_name());
        }
        if (paren) {
            expect_op(")");
            t.tuple = true;
        }
        for (const std::string& n : t.names)
            if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
                fail_here("cannot assign to '" + n + "'");
        return t;
    }

    // ---- expressions
    bool tuple_end(const std::vector<const char*>& extra) const {
        if (cur().type == TT::VariableEnd || cur().type == TT::BlockEnd || is_op(")")) return true;
        for (const char* e : extra)
            if (is_name(e)) return true;
        return false;
    }

    ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens, const std::vector<const char*>& extra) {
        const int line = cur().line;
        std::vector<ExprPtr> items;
        bool is_tuple = false;
        while (true) {
            if (!items.empty()) expect_op(",");
            if (tuple_end(extra)) break;
            items.push_back(parse_expression(with_condexpr));
            if (is_op(",")) {
                is_tuple = true;
            } else {
                break;
            }
        }
        if (!is_tuple) {
            if (!items.empty()) return std::move(items[0]);
            if (!explicit_parens) fail_here("expected an expression, got " + describe(cur()));
        }
        auto t = std::make_unique<ListExpr>(line, true);
        t->items = std::move(items);
        return t;
    }

    ExprPtr parse_expression(bool with_condexpr) {
        Depth d(*this);
        return with_condexpr ? parse_condexpr() : parse_or();
    }

    ExprPtr parse_condexpr() {
        int line = cur().line;
        ExprPtr expr = parse_or();
        Chain chain(*this);
        while (skip_name("if")) {
            chain.link();
            ++soft_;
            ExprPtr test = parse_or();
            ExprPtr otherwise = skip_name("else") ? parse_expression(true) : nullptr;
            --soft_;
            expr = std::make_unique<CondExpr>(line, std::move(test), std::move(expr), std::move(otherwise));
            line = cur().line;
        }
        return expr;
    }

    ExprPtr parse_or() {
        ExprPtr left = parse_and();
        Chain chain(*this);
        while (is_name("or")) {
            chain.link();
            const int line = next().line;
            left = std::make_unique<BinaryExpr>(Expr::Kind::Or, line, "", std::move(left), parse_and());
        }
        return left;
    }

    ExprPtr parse_and() {
        ExprPtr left = parse_not();
        Chain chain(*this);
        while (is_name("and")) {
            chain.link();
            const int line = next().line;
            left = std::make_unique<BinaryExpr>(Expr::Kind::And, line, "", std::move(left), parse_not());
        }
        return left;
    }

    ExprPtr parse_not() {
        if (is_name("not")) {
            Depth d(*this);
            const int line = next().line;
            return std::make_unique<UnaryExpr>(line, '!', parse_not());
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        const int line = cur().line;
        ExprPtr first = parse_math1();
        std::unique_ptr<CompareExpr> cmp;
        while (true) {
            std::string op;
            if (cur().type == TT::Operator &&
                (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
                 cur().text == ">" || cur().text == ">=")) {
                op = next().text;
            } else if (skip_name("in")) {
                op = "in";
            } else if (is_name("not") && look().type == TT::Name && look().text == "in") {
                next();
                next();
                op = "notin";
            } else {
                break;
            }
            if (!cmp) cmp = std::make_unique<CompareExpr>(line, std::move(first));
            cmp->rest.emplace_back(op, parse_math1());
        }
        if (cmp) return cmp;
        return first;
    }

    ExprPtr binary_chain(const std::vector<const char*>& ops, ExprPtr (Parser::*operand)()) {
        ExprPtr left = (this->*operand)();
        Chain chain(*this);
        while (true) {
            const char* found = nullptr;
            for (const char* o : ops)
                if (is_op(o)) found = o;
            if (!found) return left;
            chain.link();
            const int line = next().line;
            left = std::make_unique<BinaryExpr>(Expr::Kind::Binary, line, found, std::move(left), (this->*operand)());
        }
    }

    ExprPtr parse_math1() { return binary_chain({"+", "-"}, &Parser::parse_concat); }

    ExprPtr parse_concat() {
        const int line = cur().line;
        ExprPtr first = parse_math2();
        if (!is_op("~")) return first;
        auto c = std::make_unique<ConcatExpr>(line);
        c->parts.push_back(std::move(first));
        while (skip_op("~")) c->parts.push_back(parse_math2());
        return c;
    }

    ExprPtr parse_math2() { return binary_chain({"*", "/", "//", "%"}, &Parser::parse_pow); }
    ExprPtr parse_pow() { return binary_chain({"**"}, &Parser::parse_unary_filtered); }
    ExprPtr parse_unary_filtered() { return parse_unary(true); }

    ExprPtr parse_unary(bool with_filter) {
        Depth d(*this);
        const int line = cur().line;
        ExprPtr node;
        if (is_op("-") || is_op("+")) {
            const char op = next().text[0];
            node = std::make_unique<UnaryExpr>(line, op, parse_unary(false));
        } else {
            node = parse_primary();
        }
        node = parse_postfix(std::move(node));
        if (with_filter) node = parse_filter_expr(std::move(node));
        return node;
    }

    ExprPtr parse_primary() {
        const Token& tok = cur();
        const int line = tok.line;
        switch (tok.type) {
            case TT::Name: {
                const std::string n = next().text;
                if (n == "true" || n == "True") return std::make_unique<LiteralExpr>(line, Value::boolean(true));
                if (n == "false" || n == "False") return std::make_unique<LiteralExpr>(line, Value::boolean(false));
                if (n == "none" || n == "None") return std::make_unique<LiteralExpr>(line, Value::none());
                return std::make_unique<NameExpr>(line, n);
            }
            case TT::String: {
                std::string s = next().text;
                while (cur().type == TT::String) s += next().text;
                return std::make_unique<LiteralExpr>(line, Value::string(std::move(s)));
            }
            case TT::Integer:
                return std::make_unique<LiteralExpr>(line, Value::integer(next().integer));
            case TT::Float:
                return std::make_unique<LiteralExpr>(line, Value::number(next().number));
            case TT::Operator:
                if (tok.text == "(") {
                    next();
                    ExprPtr e = parse_tuple(true, true, {});
                    expect_op(")");
                    return e;
                }
                if (tok.text == "[") return parse_list();
                if (tok.text == "{") return parse_dict();
                break;
            default:
                break;
        }
        fail_here("unexpected " + describe(tok));
    }

    ExprPtr parse_list() {
        auto l = std::make_unique<ListExpr>(next().line, false);
        while (!is_op("]")) {
            if (!l->items.empty()) expect_op(",");
            if (is_op("]")) break;
            l->items.push_back(parse_expression(true));
        }
        expect_op("]");
        return l;
    }

    ExprPtr parse_dict() {
        auto d = std::make_unique<DictExpr>(next().line);
        while (!is_op("}")) {
            if (!d->items.empty()) expect_op(",");
            if (is_op("}")) break;
            ExprPtr key = parse_expression(true);
            expect_op(":");
            d->items.emplace_back(std::move(key), parse_expression(true));
        }
        expect_op("}");
        return d;
    }

    ExprPtr parse_postfix(ExprPtr node) {
        Chain chain(*this);
        while (true) {
            if (is_op(".") || is_op("[") || is_op("(")) chain.link();
            if (is_op(".") || is_op("[")) {
                node = parse_subscript(std::move(node));
            } else if (is_op("(")) {
                node = parse_call(std::move(node));
            } else {
                return node;
            }
        }
    }

    ExprPtr parse_filter_expr(ExprPtr node) {
        Chain chain(*this);
        while (true) {
            if (is_op("|") || is_name("is") || is_op("(")) chain.link();
            if (is_op("|")) {
                node = parse_filter(std::move(node));
            } else if (is_name("is")) {
                node = parse_test(std::move(node));
            } else if (is_op("(")) {
                node = parse_call(std::move(node));
            } else {
                return node;
            }
        }
    }

    ExprPtr parse_subscript(ExprPtr node) {
        const Token& tok = next();
        const int line = tok.line;
        if (tok.text == ".") {
            if (cur().type == TT::Name) return std::make_unique<GetAttrExpr>(line, std::move(node), next().text);
            if (cur().type != TT::Integer) fail_here("expected a name or a number");
            auto index = std::make_unique<LiteralExpr>(line, Value::integer(next().integer));
            return std::make_unique<GetItemExpr>(line, std::move(node), std::move(index));
        }
        std::vector<ExprPtr> args;
        while (!is_op("]")) {
            if (!args.empty()) expect_op(",");
            args.push_back(parse_subscribed());
        }
        expect_op("]");
        if (args.size() == 1) return std::make_unique<GetItemExpr>(line, std::move(node), std::move(args[0]));
        auto t = std::make_unique<ListExpr>(line, true);
        t->items = std::move(args);
        return std::make_unique<GetItemExpr>(line, std::move(node), std::move(t));
    }

    ExprPtr parse_subscribed() {
        const int line = cur().line;
        ExprPtr start;
        if (!is_op(":")) {
            start = parse_expression(true);
            if (!is_op(":")) return start;
        }
        next();
        auto s = std::make_unique<SliceExpr>(line);
        s->start = std::move(start);
        if (!is_op(":") && !is_op("]") && !is_op(",")) s->stop = parse_expression(true);
        if (skip_op(":") && !is_op("]") && !is_op(",")) s->step = parse_expression(true);
        return s;
    }

    void parse_call_args(CallArgsExpr& a) {
        expect_op("(");
        bool need_comma = false;
        while (!is_op(")")) {
            if (need_comma) {
                expect_op(",");
                if (is_op(")")) break;
            }
            if (skip_op("*")) {
                if (a.star || a.star_star) fail_here("invalid syntax for function call expression");
                a.star = parse_expression(true);
            } else if (skip_op("**")) {
                if (a.star_star) fail_here("invalid syntax for function call expression");
                a.star_star = parse_expression(true);
            } else if (cur().type == TT::Name && look().type == TT::Operator && look().text == "=") {
                if (a.star_star) fail_here("invalid syntax for function call expression");
                std::string key = next().text;
                next();
                a.named.emplace_back(std::move(key), parse_expression(true));
            } else {
                if (a.star || a.star_star || !a.named.empty()) fail_here("invalid syntax for function call expression");
                a.positional.push_back(parse_expression(true));
            }
            need_comma = true;
        }
        expect_op(")");
    }

    ExprPtr parse_call(ExprPtr callee) {
        auto c = std::make_unique<CallExpr>(cur().line, std::move(callee));
        parse_call_args(c->args);
        return c;
    }

    std::string dotted_name() {
        std::string name = expect_name();
        while (skip_op(".")) name += "." + expect_name();
        return name;
    }

    ExprPtr parse_filter(ExprPtr node, bool start_inline = false) {
        Chain chain(*this);
        while (is_op("|") || start_inline) {
            chain.link();
            if (!start_inline) next();
            start_inline = false;
            const int line = cur().line;
            auto f = std::make_unique<FilterExpr>(line, std::move(node), dotted_name());
            f->fn = find_filter(f->name);
            // jinja2 refuses an unknown filter when it compiles the template, unless it sits in a conditional
            // branch, where it only fails if that branch runs.
            if (!f->fn && soft_ == 0) throw Error(Error::Kind::Syntax, "no filter named '" + f->name + "'", line);
            if (is_op("(")) parse_call_args(f->args);
            node = std::move(f);
        }
        return node;
    }

    ExprPtr parse_test(ExprPtr node) {
        const int line = next().line;
        const bool negated = skip_name("not");
        auto t = std::make_unique<TestExpr>(line, std::move(node), dotted_name());
        t->fn = find_test(t->name);
        if (!t->fn && soft_ == 0) throw Error(Error::Kind::Syntax, "no test named '" + t->name + "'", line);
        if (is_op("(")) {
            parse_call_args(t->args);
        } else if ((cur().type == TT::Name || cur().type == TT::String || cur().type == TT::Integer ||
                    cur().type == TT::Float || is_op("(") || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
            if (is_name("is")) fail_here("you cannot chain multiple tests with is");
            t->args.positional.push_back(parse_postfix(parse_primary()));
        }
        if (negated) return std::make_unique<UnaryExpr>(line, '!', std::move(t));
        return t;
    }

    // ---- which of caller, varargs and kwargs a macro body names
    static void scan_names(const Body& body, MacroStmt& m) {
        walk(body, [](const Stmt&) {}, [&](const Expr& e) {
            if (e.kind != Expr::Kind::Name) return;
            const std::string& n = static_cast<const NameExpr&>(e).name;
            m.uses_caller |= n == "caller";
            m.uses_varargs |= n == "varargs";
            m.uses_kwargs |= n == "kwargs";
        });
    }

    const std::vector<Token>& t_;
    const Limits& limits_;
    size_t i_ = 0;
    int depth_ = 0;
    int loops_ = 0;  // enclosing for loops (break and continue need one)
    int soft_ = 0;   // enclosing conditional branches (unknown filters and tests fail only when they run)
};

}  // namespace

Body parse(const std::vector<Token>& tokens, const Limits& limits) { return Parser(tokens, limits).run(); }

}  // namespace tracelm::jinja
