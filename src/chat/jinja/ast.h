// The parsed template: expressions and statements as jinja2's parser builds them. A node's kind says which struct
// it is; the renderer switches on it. Names are kept in the tree, which outlives every render of the template.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja/value.h"

namespace tracelm::jinja {

struct Expr {
    enum class Kind { Literal, Name, List, Dict, GetAttr, GetItem, Slice, Call, Filter, Test, Unary, Binary, And, Or,
                      Compare, Concat, Cond };
    Expr(Kind k, int l) : kind(k), line(l) {}
    virtual ~Expr() = default;
    Kind kind;
    int line;
};
using ExprPtr = std::unique_ptr<Expr>;

struct LiteralExpr : Expr {
    LiteralExpr(int l, Value v) : Expr(Kind::Literal, l), value(std::move(v)) {}
    Value value;
};

struct NameExpr : Expr {
    NameExpr(int l, std::string n) : Expr(Kind::Name, l), name(std::move(n)) {}
    std::string name;
};

struct ListExpr : Expr {  // lists and tuples
    ListExpr(int l, bool t) : Expr(Kind::List, l), tuple(t) {}
    std::vector<ExprPtr> items;
    bool tuple;
};

struct DictExpr : Expr {
    explicit DictExpr(int l) : Expr(Kind::Dict, l) {}
    std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct GetAttrExpr : Expr {  // obj.name
    GetAttrExpr(int l, ExprPtr o, std::string n) : Expr(Kind::GetAttr, l), object(std::move(o)), name(std::move(n)) {}
    ExprPtr object;
    std::string name;
};

struct GetItemExpr : Expr {  // obj[index]
    GetItemExpr(int l, ExprPtr o, ExprPtr i) : Expr(Kind::GetItem, l), object(std::move(o)), index(std::move(i)) {}
    ExprPtr object, index;
};

struct SliceExpr : Expr {  // start:stop:step inside [], each optional
    explicit SliceExpr(int l) : Expr(Kind::Slice, l) {}
    ExprPtr start, stop, step;
};

using FilterFn = Value (*)(Runtime&, const Value& input, CallArgs& args);
using TestFn = bool (*)(Runtime&, const Value& input, CallArgs& args);

struct CallArgsExpr {
    std::vector<ExprPtr> positional;
    std::vector<std::pair<std::string, ExprPtr>> named;
    ExprPtr star, star_star;  // *args, **kwargs
};

struct CallExpr : Expr {
    CallExpr(int l, ExprPtr c) : Expr(Kind::Call, l), callee(std::move(c)) {}
    ExprPtr callee;
    CallArgsExpr args;
};

// value|name(args); value is null in a filter block or `set x | filter`, where the body is the input.
struct FilterExpr : Expr {
    FilterExpr(int l, ExprPtr v, std::string n) : Expr(Kind::Filter, l), value(std::move(v)), name(std::move(n)) {}
    ExprPtr value;
    std::string name;
    FilterFn fn = nullptr;  // null: no such filter (an error when evaluated)
    CallArgsExpr args;
};

struct TestExpr : Expr {  // value is name(args)
    TestExpr(int l, ExprPtr v, std::string n) : Expr(Kind::Test, l), value(std::move(v)), name(std::move(n)) {}
    ExprPtr value;
    std::string name;
    TestFn fn = nullptr;  // null: no such test (an error when evaluated)
    CallArgsExpr args;
};

struct UnaryExpr : Expr {  // op: '-', '+' or '!' (not)
    UnaryExpr(int l, char o, ExprPtr e) : Expr(Kind::Unary, l), op(o), operand(std::move(e)) {}
    char op;
    ExprPtr operand;
};

// + - * / // % ** (and, or: Kind::And / Kind::Or with op empty)
struct BinaryExpr : Expr {
    BinaryExpr(Kind k, int l, std::string o, ExprPtr a, ExprPtr b)
        : Expr(k, l), op(std::move(o)), left(std::move(a)), right(std::move(b)) {}
    std::string op;
    ExprPtr left, right;
};

struct CompareExpr : Expr {  // first op1 e1 op2 e2 ...; ops: == != < <= > >= in notin
    CompareExpr(int l, ExprPtr f) : Expr(Kind::Compare, l), first(std::move(f)) {}
    ExprPtr first;
    std::vector<std::pair<std::string, ExprPtr>> rest;
};

struct ConcatExpr : Expr {  // a ~ b ~ c
    explicit ConcatExpr(int l) : Expr(Kind::Concat, l) {}
    std::vector<ExprPtr> parts;
};

struct CondExpr : Expr {  // then if test else otherwise (otherwise may be null: undefined)
    CondExpr(int l, ExprPtr t, ExprPtr th, ExprPtr o)
        : Expr(Kind::Cond, l), test(std::move(t)), then(std::move(th)), otherwise(std::move(o)) {}
    ExprPtr test, then, otherwise;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
    enum class Kind { Text, Print, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, With, Break, Continue,
                      Generation };
    Stmt(Kind k, int l) : kind(k), line(l) {}
    virtual ~Stmt() = default;
    Kind kind;
    int line;
};

// An assignment target: one name, names to unpack (a tuple), or a namespace attribute (ns.attr).
struct Target {
    std::vector<std::string> names;
    bool tuple = false;
    std::string attribute;  // non-empty: names[0].attribute
};

struct TextStmt : Stmt {
    TextStmt(int l, std::string t) : Stmt(Kind::Text, l), text(std::move(t)) {}
    std::string text;
};

struct PrintStmt : Stmt {
    PrintStmt(int l, ExprPtr e) : Stmt(Kind::Print, l), expr(std::move(e)) {}
    ExprPtr expr;
};

struct IfStmt : Stmt {
    explicit IfStmt(int l) : Stmt(Kind::If, l) {}
    std::vector<std::pair<ExprPtr, Body>> branches;  // if and each elif
    Body otherwise;
};

struct ForStmt : Stmt {
    explicit ForStmt(int l) : Stmt(Kind::For, l) {}
    Target target;
    ExprPtr iterable, filter;  // filter: `for x in xs if cond`, may be null
    Body body, otherwise;
};

struct SetStmt : Stmt {
    explicit SetStmt(int l) : Stmt(Kind::Set, l) {}
    Target target;
    ExprPtr value;
};

struct SetBlockStmt : Stmt {  // {% set x | filters %}body{% endset %}
    explicit SetBlockStmt(int l) : Stmt(Kind::SetBlock, l) {}
    Target target;
    ExprPtr filter;  // a FilterExpr chain ending in a null value, or null
    Body body;
};

struct MacroStmt : Stmt {
    explicit MacroStmt(int l) : Stmt(Kind::Macro, l) {}
    std::string name;
    std::vector<std::string> params;
    std::vector<ExprPtr> defaults;  // for the last defaults.size() params
    Body body;
    bool uses_caller = false, uses_varargs = false, uses_kwargs = false;
};

struct CallBlockStmt : Stmt {  // {% call(params) macro(args) %}body{% endcall %}: body is the macro's caller()
    explicit CallBlockStmt(int l) : Stmt(Kind::CallBlock, l) {}
    MacroStmt caller{0};
    ExprPtr call;
};

struct FilterBlockStmt : Stmt {
    explicit FilterBlockStmt(int l) : Stmt(Kind::FilterBlock, l) {}
    ExprPtr filter;  // FilterExpr chain ending in a null value
    Body body;
};

struct WithStmt : Stmt {
    explicit WithStmt(int l) : Stmt(Kind::With, l) {}
    std::vector<std::pair<Target, ExprPtr>> assignments;
    Body body;
};

struct BodyStmt : Stmt {  // break, continue, and Hugging Face's {% generation %} block (rendered as is)
    BodyStmt(Kind k, int l) : Stmt(k, l) {}
    Body body;
};

}  // namespace tracelm::jinja
