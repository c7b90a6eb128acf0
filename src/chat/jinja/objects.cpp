#include "chat/jinja/objects.h"

#include "chat/jinja/error.h"

namespace tracelm::jinja {

std::string Namespace::repr() const {
    DictData d;
    for (const auto& [k, v] : attrs_) d.items.emplace_back(Value::string(k), v);
    return "<Namespace " + to_str(Value::dict(std::move(d))) + ">";
}

Value Namespace::attr(std::string_view name) const {
    for (const auto& [k, v] : attrs_)
        if (k == name) return v;
    return Value();
}

void Namespace::set(const std::string& name, Value v) {
    for (auto& [k, old] : attrs_) {
        if (k == name) {
            old = std::move(v);
            return;
        }
    }
    attrs_.emplace_back(name, std::move(v));
}

std::string Loop::repr() const {
    return "<LoopContext " + std::to_string(index0_ + 1) + "/" + std::to_string(items_ ? items_->size() : 0) + ">";
}

Value Loop::attr(std::string_view name) const {
    const size_t n = items_ ? items_->size() : 0;
    const auto i = static_cast<int64_t>(index0_);
    const auto len = static_cast<int64_t>(n);
    if (name == "index0") return Value::integer(i);
    if (name == "index") return Value::integer(i + 1);
    if (name == "revindex0") return Value::integer(len - i - 1);
    if (name == "revindex") return Value::integer(len - i);
    if (name == "first") return Value::boolean(i == 0);
    if (name == "last") return Value::boolean(i + 1 == len);
    if (name == "length") return Value::integer(len);
    if (name == "depth") return Value::integer(1);
    if (name == "depth0") return Value::integer(0);
    if (name == "previtem")
        return i > 0 ? (*items_)[index0_ - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem")
        return i + 1 < len ? (*items_)[index0_ + 1] : Value::undefined("there is no next item");
    if (name == "cycle") {
        const size_t at = index0_;
        return Value::function("loop.cycle", [at](Runtime&, CallArgs& args) {
            if (!args.named.empty()) fail("loop.cycle() takes no keyword arguments");
            if (args.positional.empty()) fail("no items for cycling given");
            return args.positional[at % args.positional.size()];
        });
    }
    if (name == "changed") {
        return Value::function("loop.changed", [this](Runtime&, CallArgs& args) {
            const std::vector<Value>& now = args.positional;
            bool same = changed_called_ && now.size() == last_changed_.size();
            for (size_t k = 0; same && k < now.size(); ++k) same = equals(now[k], last_changed_[k]);
            changed_called_ = true;
            last_changed_ = now;
            return Value::boolean(!same);
        });
    }
    return Value();
}

}  // namespace tracelm::jinja
