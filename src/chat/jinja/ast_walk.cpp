#include "chat/jinja/ast_walk.h"

namespace tracelm::jinja {

namespace {

struct Walker {
    const std::function<void(const Stmt&)>& on_stmt;
    const std::function<void(const Expr&)>& on_expr;

    void args(const CallArgsExpr& a) {
        for (const auto& p : a.positional) expr(p.get());
        for (const auto& kv : a.named) expr(kv.second.get());
        expr(a.star.get());
        expr(a.star_star.get());
    }

    void expr(const Expr* e) {
        if (!e) return;
        on_expr(*e);
        switch (e->kind) {
            case Expr::Kind::List:
                for (const auto& i : static_cast<const ListExpr*>(e)->items) expr(i.get());
                break;
            case Expr::Kind::Dict:
                for (const auto& kv : static_cast<const DictExpr*>(e)->items) {
                    expr(kv.first.get());
                    expr(kv.second.get());
                }
                break;
            case Expr::Kind::GetAttr:
                expr(static_cast<const GetAttrExpr*>(e)->object.get());
                break;
            case Expr::Kind::GetItem:
                expr(static_cast<const GetItemExpr*>(e)->object.get());
                expr(static_cast<const GetItemExpr*>(e)->index.get());
                break;
            case Expr::Kind::Slice: {
                const auto* s = static_cast<const SliceExpr*>(e);
                expr(s->start.get());
                expr(s->stop.get());
                expr(s->step.get());
                break;
            }
            case Expr::Kind::Call:
                expr(static_cast<const CallExpr*>(e)->callee.get());
                args(static_cast<const CallExpr*>(e)->args);
                break;
            case Expr::Kind::Filter:
                expr(static_cast<const FilterExpr*>(e)->value.get());
                args(static_cast<const FilterExpr*>(e)->args);
                break;
            case Expr::Kind::Test:
                expr(static_cast<const TestExpr*>(e)->value.get());
                args(static_cast<const TestExpr*>(e)->args);
                break;
            case Expr::Kind::Unary:
                expr(static_cast<const UnaryExpr*>(e)->operand.get());
                break;
            case Expr::Kind::Binary:
            case Expr::Kind::And:
            case Expr::Kind::Or:
                expr(static_cast<const BinaryExpr*>(e)->left.get());
                expr(static_cast<const BinaryExpr*>(e)->right.get());
                break;
            case Expr::Kind::Compare:
                expr(static_cast<const CompareExpr*>(e)->first.get());
                for (const auto& r : static_cast<const CompareExpr*>(e)->rest) expr(r.second.get());
                break;
            case Expr::Kind::Concat:
                for (const auto& p : static_cast<const ConcatExpr*>(e)->parts) expr(p.get());
                break;
            case Expr::Kind::Cond: {
                const auto* c = static_cast<const CondExpr*>(e);
                expr(c->test.get());
                expr(c->then.get());
                expr(c->otherwise.get());
                break;
            }
            case Expr::Kind::Literal:
            case Expr::Kind::Name:
                break;
        }
    }

    void stmts(const Body& body) {
        for (const StmtPtr& s : body) stmt(*s);
    }

    void stmt(const Stmt& s) {
        on_stmt(s);
        switch (s.kind) {
            case Stmt::Kind::Print:
                expr(static_cast<const PrintStmt&>(s).expr.get());
                break;
            case Stmt::Kind::If:
                for (const auto& [test, body] : static_cast<const IfStmt&>(s).branches) {
                    expr(test.get());
                    stmts(body);
                }
                stmts(static_cast<const IfStmt&>(s).otherwise);
                break;
            case Stmt::Kind::For: {
                const auto& f = static_cast<const ForStmt&>(s);
                expr(f.iterable.get());
                expr(f.filter.get());
                stmts(f.body);
                stmts(f.otherwise);
                break;
            }
            case Stmt::Kind::Set:
                expr(static_cast<const SetStmt&>(s).value.get());
                break;
            case Stmt::Kind::SetBlock:
                expr(static_cast<const SetBlockStmt&>(s).filter.get());
                stmts(static_cast<const SetBlockStmt&>(s).body);
                break;
            case Stmt::Kind::Macro:
                for (const auto& d : static_cast<const MacroStmt&>(s).defaults) expr(d.get());
                stmts(static_cast<const MacroStmt&>(s).body);
                break;
            case Stmt::Kind::CallBlock:
                expr(static_cast<const CallBlockStmt&>(s).call.get());
                stmt(static_cast<const CallBlockStmt&>(s).caller);
                break;
            case Stmt::Kind::FilterBlock:
                expr(static_cast<const FilterBlockStmt&>(s).filter.get());
                stmts(static_cast<const FilterBlockStmt&>(s).body);
                break;
            case Stmt::Kind::With:
                for (const auto& a : static_cast<const WithStmt&>(s).assignments) expr(a.second.get());
                stmts(static_cast<const WithStmt&>(s).body);
                break;
            case Stmt::Kind::Generation:
                stmts(static_cast<const BodyStmt&>(s).body);
                break;
            case Stmt::Kind::Text:
            case Stmt::Kind::Break:
            case Stmt::Kind::Continue:
                break;
        }
    }
};

}  // namespace

void walk(const Body& body, const std::function<void(const Stmt&)>& on_stmt,
          const std::function<void(const Expr&)>& on_expr) {
    Walker{on_stmt, on_expr}.stmts(body);
}

}  // namespace tracelm::jinja
