// Hostile chat templates (they come with model files and requests): each ends with a clear error naming the limit
// it hit (chat/jinja/limits.h, docs/security.md), quickly and without allocating what it asked for.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "chat/jinja/error.h"
#include "chat/jinja/json.h"
#include "chat/jinja/template.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

using jinja::Error;

// Seconds a hostile template may take to be stopped: they take well under one in a Release build. AddressSanitizer
// slows the interpreter about tenfold (the 20M-step template took 5.3 s under it on a 2-core AMD EPYC VM).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr double kQuickSeconds = 40.0;
#else
constexpr double kQuickSeconds = 5.0;
#endif

long peak_rss_kib() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

struct Failure {
    Error::Kind kind;
    std::string message;
    double seconds;
    long rss_growth_kib;
};

// Parses and renders `source`, which must fail.
Failure failure_of(const std::string& source, const std::vector<std::pair<std::string, jinja::Value>>& vars = {}) {
    const long rss_before = peak_rss_kib();
    const auto t0 = std::chrono::steady_clock::now();
    try {
        const std::string out = jinja::Template(source).render(vars);
        ADD_FAILURE() << "rendered " << out.size() << " bytes";
    } catch (const Error& e) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return {e.kind(), e.what(), s, peak_rss_kib() - rss_before};
    }
    return {Error::Kind::Render, "", 0, 0};
}

void expect_limit(const Failure& f, const std::string& limit) {
    EXPECT_EQ(f.kind, Error::Kind::Limit) << f.message;
    EXPECT_NE(f.message.find(limit), std::string::npos) << f.message;
    EXPECT_LT(f.seconds, kQuickSeconds) << f.message;
}

using testing::repeat;

TEST(JinjaLimits, UnboundedMacroRecursionStopsAtTheCallDepth) {
    expect_limit(failure_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), "64 nested macro calls");
    // Mutual recursion through caller() too.
    expect_limit(failure_of("{% macro a() %}{% call a() %}x{% endcall %}{{ caller() }}{% endmacro %}"
                            "{% call a() %}y{% endcall %}"),
                 "nested macro calls");
}

TEST(JinjaLimits, HugeLoopsStopAtTheIterationLimit) {
    expect_limit(failure_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"),
                 "1000000 loop iterations");
    // jinja2's sandbox itself refuses ranges over 100000 items, whatever their size.
    const Failure big_range = failure_of("{% for i in range(10 ** 12) %}{% endfor %}");
    EXPECT_EQ(big_range.kind, Error::Kind::Render);
    EXPECT_NE(big_range.message.find("Range too big"), std::string::npos) << big_range.message;
    EXPECT_LT(big_range.seconds, kQuickSeconds);
}

TEST(JinjaLimits, HugeOutputStopsAtTheOutputLimit) {
    expect_limit(failure_of("{% for i in range(100000) %}" + std::string(20000, 'x') + "{% endfor %}"),
                 "16777216 output bytes");
}

TEST(JinjaLimits, HugeStringsAndListsStopBeforeTheyAreAllocated) {
    const Failure f = failure_of("{{ 'a' * 10 ** 9 }}");
    expect_limit(f, "allocated bytes");
    EXPECT_LT(f.rss_growth_kib, 64 * 1024) << "the gigabyte was not allocated";
    expect_limit(failure_of("{{ ([1] * 10 ** 9) | length }}"), "allocated bytes");
    // Doubling a string: each step is small, the sum is over the budget.
    expect_limit(failure_of("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
                            "{% endfor %}{{ ns.s | length }}"),
                 "allocated bytes");
}

TEST(JinjaLimits, ManyCheapStepsStopAtTheStepLimit) {
    expect_limit(failure_of("{% for i in range(900) %}{% for j in range(1000) %}{{ " + repeat("i + ", 40) +
                            "j }}{% endfor %}{% endfor %}"),
                 "steps");
}

TEST(JinjaLimits, DeepNestingIsRefusedWhileParsing) {
    const int n = 10000;  // far past the limit of 64, within the template size limit
    for (const std::string& source :
         {repeat("{% if true %}", n) + "x", "{{ " + repeat("(", n) + "1" + repeat(")", n) + " }}",
          "{{ " + repeat("[", n) + repeat("]", n) + " }}", "{{ " + repeat("not ", n) + "1 }}",
          "{{ " + repeat("-", n) + "1 }}", "{{ x" + repeat("|trim", n) + " }}", "{{ x" + repeat(".a", n) + " }}",
          "{{ 1" + repeat(" + 1", n) + " }}", "{{ a" + repeat(" or a", n) + " }}",
          "{{ " + repeat("a if b else ", n) + "c }}", "{{ f" + repeat("()", n) + " }}"}) {
        const Failure f = failure_of(source);
        EXPECT_EQ(f.kind, Error::Kind::Syntax) << f.message;
        EXPECT_LT(f.seconds, kQuickSeconds) << f.message;
        EXPECT_NE(f.message.find("nests deeper than 64"), std::string::npos)
            << source.substr(0, 40) << ": " << f.message;
    }
}

TEST(JinjaLimits, DeepOrSelfContainingValuesAreErrorsNotCrashes) {
    const Failure deep = failure_of("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}"
                                    "{% endfor %}{{ ns.x }}");
    EXPECT_EQ(deep.kind, Error::Kind::Render);
    EXPECT_NE(deep.message.find("nest deeper than 256"), std::string::npos) << deep.message;
    const Failure self = failure_of("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}");
    EXPECT_NE(self.message.find("contains itself"), std::string::npos) << self.message;
    // Input JSON nested deeper than values may be is refused when it is converted.
    nlohmann::ordered_json input = 1;
    for (int i = 0; i < 300; ++i) input = nlohmann::ordered_json::array({input});
    try {
        jinja::from_json(input);
        ADD_FAILURE() << "300 levels of lists were accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("nest deeper than 256"), std::string::npos) << e.what();
    }
}

TEST(JinjaLimits, AnOversizedTemplateIsRefusedBeforeParsing) {
    const Failure f = failure_of(std::string((1 << 20) + 1, 'x'));
    EXPECT_EQ(f.kind, Error::Kind::Limit);
    EXPECT_NE(f.message.find("more than the limit"), std::string::npos) << f.message;
}

}  // namespace
}  // namespace tracelm
