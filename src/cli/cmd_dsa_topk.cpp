#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "ops/dsa/dsa_topk.h"
#include "runtime/untrusted.h"
#include "cli/commands.h"
#ifdef TRACELM_HAVE_CUDA
#include "backends/cuda/dsa_topk_cuda.h"
#endif

namespace tracelm::cli {

namespace {

using nlohmann::json;

// The output is printed in full, so its size is bounded here (not in the op): 2^26 indices print as
// roughly half a gigabyte of JSON.
constexpr int64_t kMaxOutputIndices = int64_t{1} << 26;

struct DsaTopkArgs {
    std::string input;
    std::string impl = "fast";
};

[[noreturn]] void bad(const std::string& path, const std::string& what) {
    throw std::runtime_error(path + ": " + what);
}

float parse_score(const json& v, const std::string& path, const std::string& where) {
    if (v.is_number()) {
        // From the midpoint between FLT_MAX and 2^128 on, a double rounds to infinity as f32 (and converting it is
        // undefined behaviour in C++), so it is refused rather than converted.
        constexpr double kF32Overflow = 0x1.ffffffp127;
        const double d = v.get<double>();
        if (std::abs(d) >= kF32Overflow) {
            bad(path, where + " = " + untrusted::escape(v.dump()) + " is beyond the f32 range (write \"inf\" or \"-inf\")");
        }
        return static_cast<float>(d);
    }
    if (v.is_string()) {
        const std::string& s = v.get_ref<const std::string&>();
        if (s == "nan") return std::numeric_limits<float>::quiet_NaN();
        if (s == "inf") return std::numeric_limits<float>::infinity();
        if (s == "-inf") return -std::numeric_limits<float>::infinity();
        if (s == "-0.0") return -0.0f;
    }
    bad(path, where + " must be a number or one of \"nan\", \"inf\", \"-inf\", \"-0.0\", got " + untrusted::escape(v.dump()));
}

int64_t parse_int(const json& v, const std::string& path, const std::string& where) {
    const bool fits = v.is_number_integer() &&
                      !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()});
    if (!fits) bad(path, where + " must be an integer in the signed 64-bit range, got " + untrusted::escape(v.dump()));
    return v.get<int64_t>();
}

const json& field(const json& j, const char* key, const std::string& path) {
    const auto it = j.find(key);
    if (it == j.end()) bad(path, std::string("missing \"") + key + "\"");
    return *it;
}

std::vector<int64_t> parse_ints(const json& j, const char* key, const std::string& path) {
    const json& a = field(j, key, path);
    if (!a.is_array()) bad(path, std::string("\"") + key + "\" must be an array of integers");
    std::vector<int64_t> out;
    for (size_t i = 0; i < a.size(); ++i) {
        out.push_back(parse_int(a[i], path, std::string(key) + "[" + std::to_string(i) + "]"));
    }
    return out;
}

dsa::TopkCase read_case(const std::string& path) {
    const std::string text = untrusted::read_regular_file(path, untrusted::kMaxJsonFileBytes);
    json j;
    try {
        j = untrusted::parse_json(text);
    } catch (const std::runtime_error& e) {
        bad(path, e.what());
    }
    if (!j.is_object()) bad(path, "expected a JSON object with \"scores\", \"window_start\", \"window_end\", \"topk\"");

    dsa::TopkCase c;
    const json& scores = field(j, "scores", path);
    if (!scores.is_array()) bad(path, "\"scores\" must be an array of rows");
    c.rows = static_cast<int64_t>(scores.size());
    for (size_t r = 0; r < scores.size(); ++r) {
        const json& row = scores[r];
        const std::string where = "scores[" + std::to_string(r) + "]";
        if (!row.is_array()) bad(path, where + " must be an array of scores");
        if (r == 0) c.keys = static_cast<int64_t>(row.size());
        if (static_cast<int64_t>(row.size()) != c.keys) {
            bad(path, where + " has " + std::to_string(row.size()) + " scores but scores[0] has " +
                          std::to_string(c.keys) + " (rows must have equal length)");
        }
        for (size_t i = 0; i < row.size(); ++i) {
            c.scores.push_back(parse_score(row[i], path, where + "[" + std::to_string(i) + "]"));
        }
    }
    c.window_start = parse_ints(j, "window_start", path);
    c.window_end = parse_ints(j, "window_end", path);
    c.topk = parse_int(field(j, "topk", path), path, "topk");
    dsa::check_case(c);
    if (c.rows > 0 && c.topk > kMaxOutputIndices / c.rows) {
        bad(path, "topk " + std::to_string(c.topk) + " for " + std::to_string(c.rows) + " rows would print more than " +
                      std::to_string(kMaxOutputIndices) + " indices");
    }
    return c;
}

std::vector<int64_t> select(const dsa::TopkCase& c, const std::string& impl) {
    if (impl == "reference") return dsa::topk_reference(c);
    if (impl == "cuda") {
#ifdef TRACELM_HAVE_CUDA
        return cuda::dsa_topk_host(c);
#else
        throw std::runtime_error("dsa-topk: this build has no CUDA support (configure with -DTRACELM_CUDA=ON)");
#endif
    }
    cpu::CpuBackend backend;
    dsa::TopkRunner runner(backend, c.rows, c.keys, c.topk);
    return runner.run(c);
}

int run_dsa_topk(const DsaTopkArgs& a) {
    const dsa::TopkCase c = read_case(a.input);
    const std::vector<int64_t> indices = select(c, a.impl);
    // Printed a row at a time rather than through a json value, which would take several times the memory.
    std::fputs("{\"indices\":[", stdout);
    std::string line;
    for (int64_t r = 0; r < c.rows; ++r) {
        line = r == 0 ? "[" : ",[";
        for (int64_t k = 0; k < c.topk; ++k) {
            if (k > 0) line += ',';
            line += std::to_string(indices[static_cast<size_t>(r * c.topk + k)]);
        }
        line += ']';
        std::fwrite(line.data(), 1, line.size(), stdout);
    }
    std::fputs("]}\n", stdout);
    return 0;
}

}  // namespace

Action add_dsa_topk(CLI::App& app) {
    auto a = std::make_shared<DsaTopkArgs>();
    app.add_option("--input", a->input,
                   "JSON case {\"scores\": [[...], ...], \"window_start\": [...], \"window_end\": [...], \"topk\": K}; "
                   "scores may be \"nan\", \"inf\", \"-inf\" or \"-0.0\"")
        ->required()
        ->check(CLI::ExistingFile);
    app.add_option("--impl", a->impl, "implementation: reference, fast (CPU kernel, the default) or cuda")
        ->check(CLI::IsMember({"reference", "fast", "cuda"}));
    return [a] { return run_dsa_topk(*a); };
}

}  // namespace tracelm::cli
