// The objects templates create: namespace() objects, whose attributes `{% set ns.x = ... %}` assigns, and the
// `loop` object of a for loop (index, first, last, previtem, cycle, ...), with jinja2's names and reprs.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja/value.h"

namespace tracelm::jinja {

class Namespace : public Object {
   public:
    Kind kind() const override { return Kind::Namespace; }
    const char* type_name() const override { return "Namespace"; }
    std::string repr() const override;
    Value attr(std::string_view name) const override;
    void set(const std::string& name, Value v);
    void release() override { attrs_.clear(); }

   private:
    std::vector<std::pair<std::string, Value>> attrs_;
};

class Loop : public Object {
   public:
    explicit Loop(std::shared_ptr<const std::vector<Value>> items) : items_(std::move(items)) {}
    Kind kind() const override { return Kind::Loop; }
    const char* type_name() const override { return "LoopContext"; }
    std::string repr() const override;
    Value attr(std::string_view name) const override;
    void release() override {
        items_.reset();
        last_changed_.clear();
    }
    void at(size_t index0) { index0_ = index0; }

   private:
    std::shared_ptr<const std::vector<Value>> items_;
    size_t index0_ = 0;
    mutable std::vector<Value> last_changed_;  // loop.changed()'s previous arguments
    mutable bool changed_called_ = false;
};

}  // namespace tracelm::jinja
