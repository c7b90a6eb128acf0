// untrusted::parse_ordered_json's limits: nesting depth, and members per object (an ordered map finds each key by a
// linear search, so one wide object would cost quadratic time).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "runtime/untrusted.h"

namespace tracelm::untrusted {
namespace {

std::string object_of(size_t members, const std::string& inner = "0") {
    std::string s = "{";
    for (size_t i = 0; i < members; ++i) {
        if (i > 0) s += ',';
        s.append("\"k").append(std::to_string(i)).append("\":").append(inner);
    }
    s += '}';
    return s;
}

std::string refusal(const std::string& text) {
    try {
        (void)parse_ordered_json(text);
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "";
}

TEST(UntrustedJson, AnObjectMayHaveUpToTheMemberLimit) {
    const auto j = parse_ordered_json(object_of(kMaxOrderedMembers));
    EXPECT_EQ(j.size(), kMaxOrderedMembers);
    EXPECT_EQ(j.begin().key(), "k0") << "keys keep the text's order";
    // Members are counted per object: each of many objects may reach the limit, inner ones apart from outer ones.
    std::string two_wide = "[";
    two_wide.append(object_of(kMaxOrderedMembers)).append(",").append(object_of(kMaxOrderedMembers)).append("]");
    EXPECT_EQ(parse_ordered_json(two_wide).size(), 2u);
    EXPECT_EQ(parse_ordered_json(object_of(3, object_of(kMaxOrderedMembers))).size(), 3u);
}

TEST(UntrustedJson, AWiderObjectIsRefusedNamingTheLimit) {
    const std::string limit = "JSON object with more than 1024 members (the limit)";
    EXPECT_EQ(refusal(object_of(kMaxOrderedMembers + 1)), limit);
    EXPECT_EQ(refusal(object_of(80000)), limit) << "refused at its 1025th member, not parsed whole";
    std::string inner = "{\"a\": ";
    inner.append(object_of(kMaxOrderedMembers + 1)).append("}");
    EXPECT_EQ(refusal(inner), limit) << "an inner object";
    // The outer object's count goes on after an inner object closes.
    std::string outer = object_of(kMaxOrderedMembers);
    outer.back() = ',';
    outer += "\"inner\": {\"x\": 1}}";
    EXPECT_EQ(refusal(outer), limit);
}

TEST(UntrustedJson, DeepNestingIsRefused) {
    EXPECT_EQ(refusal(std::string(100, '[') + std::string(100, ']')), DepthGuard::error());
}

}  // namespace
}  // namespace tracelm::untrusted
