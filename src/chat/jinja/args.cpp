#include "chat/jinja/args.h"

#include "chat/jinja/error.h"

namespace tracelm::jinja {

Args::Args(std::string_view function, std::initializer_list<std::string_view> params, CallArgs& call)
    : function_(function), params_(params), slots_(params.size(), nullptr) {
    if (call.positional.size() > params_.size())
        fail(function_ + "() takes at most " + std::to_string(params_.size()) + " arguments (" +
             std::to_string(call.positional.size()) + " given)");
    for (size_t i = 0; i < call.positional.size(); ++i) slots_[i] = &call.positional[i];
    for (const auto& [name, value] : call.named) {
        size_t i = 0;
        while (i < params_.size() && params_[i] != name) ++i;
        if (i == params_.size()) fail(function_ + "() got an unexpected keyword argument '" + name + "'");
        if (slots_[i]) fail(function_ + "() got multiple values for argument '" + name + "'");
        slots_[i] = &value;
    }
}

const Value& Args::get(size_t i) const {
    static const Value undefined;
    return slots_[i] ? *slots_[i] : undefined;
}

bool Args::flag(size_t i, bool fallback) const { return has(i) ? truthy(*slots_[i]) : fallback; }

int64_t Args::integer(size_t i, int64_t fallback) const {
    if (!has(i)) return fallback;
    const Value& v = *slots_[i];
    if (!v.is_int() && !v.is_bool())
        fail(function_ + "(): '" + std::string(params_[i]) + "' must be an integer, not '" + type_name(v) + "'");
    return v.integer();
}

const std::string* Args::string_or_null(size_t i) const {
    if (!has(i) || slots_[i]->is_none()) return nullptr;
    if (!slots_[i]->is_string())
        fail(function_ + "(): '" + std::string(params_[i]) + "' must be a string, not '" + type_name(*slots_[i]) +
             "'");
    return &slots_[i]->str();
}

}  // namespace tracelm::jinja
