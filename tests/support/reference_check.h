// Checks of the CPU backend's ops against their references (src/ops/<family>/): a fixture with a CPU backend and
// a comparison of its float output with the reference's double-precision values.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "support/test_support.h"

namespace tracelm::testing {

class OpReferenceTest : public BackendTest {
   protected:
    OpReferenceTest() : BackendTest(20261203) {}

    // max |got - want| / max(1, max |want|): the error of a float computation relative to its scale.
    static double scaled_error(const std::vector<float>& got, const std::vector<double>& want) {
        if (got.size() != want.size()) return INFINITY;
        double scale = 1.0, err = 0.0;
        for (const double w : want) scale = std::max(scale, std::abs(w));
        for (size_t i = 0; i < got.size(); ++i) {
            const double e = std::abs(double(got[i]) - want[i]);
            err = std::isnan(e) ? INFINITY : std::max(err, e);
        }
        return err / scale;
    }
    static void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol,
                             const std::string& what) {
        ASSERT_EQ(got.size(), want.size()) << what;
        const double err = scaled_error(got, want);
        if (err <= tol) return;
        double scale = 1.0;
        for (const double w : want) scale = std::max(scale, std::abs(w));
        size_t shown = 0;
        for (size_t i = 0; i < got.size() && shown < 5; ++i)
            if (!(std::abs(double(got[i]) - want[i]) <= tol * scale)) {
                ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", reference " << want[i];
                ++shown;
            }
        ADD_FAILURE() << what << ": scaled error " << err << " > " << tol;
    }

    // v rounded to bf16 and back: what a bf16 weight holds.
    static std::vector<float> bf16_values(std::vector<float> v) {
        for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
        return v;
    }
    static std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
        std::vector<uint16_t> out(v.size());
        for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
        return out;
    }
};

}  // namespace tracelm::testing
