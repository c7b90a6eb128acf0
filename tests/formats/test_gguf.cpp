// GgufFile: the fixtures written by the gguf Python package (scripts/make_gguf_fixtures.py) read back to
// the values the script recorded in testdata/gguf/fixtures.json; corrupted variants of their bytes are
// rejected with a clear message; the real SmolLM2 GGUF, when present, has the facts the Python reader
// reports.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Bytes = std::vector<unsigned char>;
using ::tracelm::testing::repo_path;

std::string fixture(const std::string& name) { return repo_path("testdata/gguf/" + name); }

Bytes read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const Bytes& b) {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

const json& fixtures() {
    static const json j = [] {
        std::ifstream in(fixture("fixtures.json"));
        return json::parse(in);
    }();
    return j;
}
const json& spec(const std::string& file) { return fixtures().at("files").at(file); }

using testing::TempDir;

// ---- decoding a value independently of the getters, into the JSON form fixtures.json uses ----

template <typename T>
T load(const unsigned char* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

json decode(const GgufValue& v) {
    switch (v.type) {
        case GgufType::U8: return load<uint8_t>(v.data);
        case GgufType::I8: return load<int8_t>(v.data);
        case GgufType::U16: return load<uint16_t>(v.data);
        case GgufType::I16: return load<int16_t>(v.data);
        case GgufType::U32: return load<uint32_t>(v.data);
        case GgufType::I32: return load<int32_t>(v.data);
        case GgufType::U64: return load<uint64_t>(v.data);
        case GgufType::I64: return load<int64_t>(v.data);
        case GgufType::F32: return static_cast<double>(load<float>(v.data));
        case GgufType::F64: return load<double>(v.data);
        case GgufType::Bool: return *v.data != 0;
        case GgufType::String: return std::string(reinterpret_cast<const char*>(v.data), v.bytes);
        case GgufType::Array: {
            json elems = json::array();
            for (const GgufValue& e : v.elements()) elems.push_back(decode(e));
            EXPECT_EQ(elems.size(), v.count);
            return {{"elem_type", std::string(gguf_type_name(v.elem_type))}, {"elements", elems}};
        }
    }
    return nullptr;
}

// Element values of a tensor as floats, decoded with exact arithmetic from the block layouts in ggml's
// ggml-common.h (F16 and BF16 through the engine's scalar conversions).
std::vector<double> tensor_values(const GgufTensor& t) {
    const auto* p = static_cast<const unsigned char*>(t.data);
    const auto n = static_cast<size_t>(t.numel());
    std::vector<double> out;
    for (size_t i = 0; i < n; ++i) {
        switch (t.ggml_type) {
            case 0: out.push_back(load<float>(p + 4 * i)); break;
            case 1: out.push_back(f16_to_f32(load<uint16_t>(p + 2 * i))); break;
            case 30: out.push_back(bf16_to_f32(load<uint16_t>(p + 2 * i))); break;
            case 24: out.push_back(static_cast<int8_t>(p[i])); break;
            case 8: {  // Q8_0: f16 d, 32 x int8; x = d * q
                const unsigned char* b = p + (i / 32) * 34;
                out.push_back(f16_to_f32(load<uint16_t>(b)) * static_cast<float>(static_cast<int8_t>(b[2 + i % 32])));
                break;
            }
            case 2: {  // Q4_0: f16 d, 16 bytes; element j < 16 is the low nibble of byte j, j >= 16 the high one
                const unsigned char* b = p + (i / 32) * 18;
                const size_t j = i % 32;
                const int q = (j < 16 ? b[2 + j] & 0xf : b[2 + j - 16] >> 4) - 8;
                out.push_back(f16_to_f32(load<uint16_t>(b)) * static_cast<float>(q));
                break;
            }
            default: ADD_FAILURE() << "no decoder for type " << t.ggml_type; return out;
        }
    }
    return out;
}

std::string hex(const void* data, size_t n) {
    static const char* digits = "0123456789abcdef";
    std::string s;
    for (size_t i = 0; i < n; ++i) {
        const auto b = static_cast<const unsigned char*>(data)[i];
        s += digits[b >> 4];
        s += digits[b & 0xf];
    }
    return s;
}

// The whole file against what the writer script recorded.
void expect_matches_spec(const GgufFile& f, const json& s) {
    EXPECT_EQ(f.version(), s.at("version").get<uint32_t>());
    EXPECT_EQ(f.alignment(), s.at("alignment").get<uint64_t>());
    EXPECT_EQ(f.data_offset(), s.at("data_offset").get<uint64_t>());
    EXPECT_EQ(f.file_size(), s.at("file_size").get<size_t>());

    const json& kvs = s.at("metadata");
    ASSERT_EQ(f.metadata().size(), kvs.size());
    for (size_t i = 0; i < kvs.size(); ++i) {
        const std::string key = kvs[i].at("key");
        SCOPED_TRACE(key);
        EXPECT_EQ(f.metadata()[i].key, key);  // file order
        const GgufValue* v = f.find(key);
        ASSERT_NE(v, nullptr);
        EXPECT_EQ(gguf_type_name(v->type), kvs[i].at("type").get<std::string>());
        EXPECT_EQ(decode(*v), kvs[i].at("value"));
    }

    const json& ts = s.at("tensors");
    ASSERT_EQ(f.tensors().size(), ts.size());
    for (size_t i = 0; i < ts.size(); ++i) {
        const json& e = ts[i];
        const std::string name = e.at("name");
        SCOPED_TRACE(name);
        const GgufTensor& t = f.tensors()[i];
        EXPECT_EQ(t.name, name);
        EXPECT_EQ(&f.get_tensor(name), &t);
        EXPECT_EQ(t.ggml_type, e.at("ggml_type").get<uint32_t>());
        EXPECT_EQ(ggml_type_name(t.ggml_type), e.at("type_name").get<std::string>());
        EXPECT_EQ(t.dims, e.at("dims").get<std::vector<int64_t>>());
        EXPECT_EQ(t.offset, e.at("offset").get<uint64_t>());
        EXPECT_EQ(t.bytes, e.at("bytes").get<size_t>());
        EXPECT_EQ(hex(t.data, t.bytes), e.at("raw_hex").get<std::string>());
        EXPECT_EQ(tensor_values(t), e.at("values").get<std::vector<double>>());
    }
}

TEST(GgufFixture, V3MatchesWriter) {
    const GgufFile f(fixture("all_types_v3.gguf"));
    expect_matches_spec(f, spec("all_types_v3.gguf"));
    // Opened from a file, the data is as aligned as general.alignment says (the mapping is page-aligned).
    for (const GgufTensor& t : f.tensors()) EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 64, 0u) << t.name;
}

TEST(GgufFixture, V2MatchesHandWrittenFile) {
    const GgufFile f(fixture("small_v2.gguf"));
    expect_matches_spec(f, spec("small_v2.gguf"));
    EXPECT_EQ(f.get_u32("llama.block_count"), 2u);
    EXPECT_EQ(f.get_f32("test.scale"), 0.25f);
    EXPECT_FALSE(f.get_bool("test.flag"));
    EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens"), (std::vector<std::string_view>{"<s>", "a", "b"}));
    EXPECT_TRUE(f.get_i32_array("test.empty_array").empty());
    EXPECT_EQ(f.get_i32_array("test.u16_array"), (std::vector<int32_t>{1, 65535}));
    EXPECT_EQ(f.get("test.empty_array").to_string(), "[] (0 x INT32)");
}

TEST(GgufFixture, FromMemoryEqualsFile) {
    const Bytes bytes = read_bytes(fixture("all_types_v3.gguf"));
    const GgufFile f = GgufFile::from_memory(bytes, "fixture");
    expect_matches_spec(f, spec("all_types_v3.gguf"));
    EXPECT_EQ(f.path(), "fixture");
    EXPECT_EQ(f.tensors()[0].data, bytes.data() + f.data_offset());
}

TEST(GgufFixture, TypedGettersReadEveryValueOfTheFixture) {
    const GgufFile f(fixture("all_types_v3.gguf"));
    EXPECT_EQ(f.get_string("general.architecture"), "tracelm_test");
    EXPECT_EQ(f.get_u32("general.alignment"), 64u);
    EXPECT_EQ(f.get_u32("test.u32"), 4000000000u);
    EXPECT_EQ(f.get_u64("test.u64"), (uint64_t{1} << 63) + 5);
    EXPECT_EQ(f.get_f32("test.f32"), 0.1f);
    EXPECT_TRUE(f.get_bool("test.bool_true"));
    EXPECT_FALSE(f.get_bool("test.bool_false"));
    EXPECT_EQ(f.get_string("test.string"), "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93");
    EXPECT_EQ(f.get_string("test.empty_string"), "");

    // The integer getter takes any integer type whose value fits.
    EXPECT_EQ(f.get_int("test.u8"), 200);
    EXPECT_EQ(f.get_int<uint8_t>("test.u8"), 200);
    EXPECT_EQ(f.get_int<int8_t>("test.i8"), -100);
    EXPECT_EQ(f.get_int<int16_t>("test.i16"), -30000);
    EXPECT_EQ(f.get_int<int32_t>("test.i32"), -2000000000);
    EXPECT_EQ(f.get_int<uint32_t>("test.u32"), 4000000000u);
    EXPECT_EQ(f.get_int<int64_t>("test.i64"), -(int64_t{1} << 62) - 7);
    EXPECT_EQ(f.get_int<uint64_t>("test.u64"), (uint64_t{1} << 63) + 5);
    EXPECT_EQ(f.opt_int<int>("test.missing"), std::nullopt);
    EXPECT_EQ(f.opt_int<uint16_t>("test.u16"), 60000);

    EXPECT_EQ(f.get_string_array("test.arr_str"), (std::vector<std::string_view>{"a", "bc", "", "\xc3\xbc\xe2\x9c\x93"}));
    EXPECT_EQ(f.get_f32_array("test.arr_f32"), (std::vector<float>{0.5f, -1.25f, 3e-5f}));
    EXPECT_EQ(f.get_i32_array("test.arr_i32"), (std::vector<int32_t>{1, -2, 3, 2147483647, -2147483647 - 1}));
    EXPECT_EQ(f.get_i32_array("test.arr_u8"), (std::vector<int32_t>{0, 7, 255}));
    EXPECT_EQ(f.get_i32_array("test.arr_i64"), (std::vector<int32_t>{5, -6}));
    const std::vector<GgufValue> nested = f.get_array("test.arr_nested").elements();
    ASSERT_EQ(nested.size(), 3u);
    EXPECT_EQ(nested[2].count, 3u);

    EXPECT_EQ(f.opt_u32("test.missing"), std::nullopt);
    EXPECT_EQ(f.opt_u32("test.u32"), 4000000000u);
    EXPECT_EQ(f.opt_string("test.string"), f.get_string("test.string"));
    EXPECT_EQ(f.opt_bool("test.missing"), std::nullopt);
    EXPECT_EQ(f.opt_f32("test.missing"), std::nullopt);
    EXPECT_EQ(f.opt_u64("test.u64"), f.get_u64("test.u64"));

    EXPECT_EQ(f.get("test.arr_i32").to_string(), "[1, -2, 3, 2147483647, -2147483648] (5 x INT32)");
    EXPECT_EQ(f.get("test.arr_i32").to_string(2), "[1, -2, ...] (5 x INT32)");
    EXPECT_EQ(f.get("test.arr_nested_str").to_string(), "[[\"x\"] (1 x STRING), [\"y\", \"zz\"] (2 x STRING)] (2 x ARRAY)");
    EXPECT_EQ(f.get("test.f32").to_string(), "0.100000001");
    EXPECT_EQ(f.get("test.i8").to_string(), "-100");
    EXPECT_EQ(f.get("test.bool_true").to_string(), "true");
}

// The message of the runtime_error `fn` throws ("" and a failure when it throws nothing).
template <typename Fn>
std::string error_of(Fn fn) {
    try {
        fn();
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    ADD_FAILURE() << "no exception";
    return "";
}

#define EXPECT_ERROR(expr, needle)                                                    \
    do {                                                                              \
        const std::string msg_ = error_of([&] { (void)(expr); });                     \
        EXPECT_NE(msg_.find(needle), std::string::npos) << "wanted '" << (needle) << "' in: " << msg_; \
    } while (0)

TEST(GgufFixture, GetterErrorsNameKeyAndTypes) {
    const std::string path = fixture("all_types_v3.gguf");
    const GgufFile f(path);
    EXPECT_ERROR(f.get_u32("llama.block_count"), "gguf: " + path + ": missing metadata key 'llama.block_count'");
    EXPECT_ERROR(f.get_u32("test.string"), "metadata key 'test.string' has type STRING, expected UINT32");
    EXPECT_ERROR(f.opt_u32("test.string"), "has type STRING, expected UINT32");
    EXPECT_ERROR(f.get_f32("test.f64"), "has type FLOAT64, expected FLOAT32");
    EXPECT_ERROR(f.get_bool("test.u8"), "has type UINT8, expected BOOL");
    EXPECT_ERROR(f.get_string("test.arr_str"), "has type ARRAY, expected STRING");
    EXPECT_ERROR(f.get_int("test.f32"), "has type FLOAT32, expected an integer");
    EXPECT_ERROR(f.opt_int("test.string"), "expected an integer");
    EXPECT_ERROR(f.get_int<int64_t>("test.u64"), "metadata key 'test.u64' = 9223372036854775813 does not fit in int64");
    EXPECT_ERROR(f.get_int<uint8_t>("test.i8"), "= -100 does not fit in uint8");
    EXPECT_ERROR(f.get_int<int8_t>("test.u8"), "= 200 does not fit in int8");
    EXPECT_ERROR(f.get_int<uint32_t>("test.i64"), "does not fit in uint32");
    EXPECT_ERROR(f.get_int("test.missing"), "missing metadata key 'test.missing'");
    EXPECT_ERROR(f.get_f32_array("test.arr_str"), "is an array of STRING, expected an array of FLOAT32");
    EXPECT_ERROR(f.get_string_array("test.arr_i32"), "is an array of INT32, expected an array of STRING");
    EXPECT_ERROR(f.get_i32_array("test.arr_f32"), "expected an array of integers");
    EXPECT_ERROR(f.get_i32_array("test.arr_u32_big"), "element 1 = 4000000000 does not fit in int32");
    EXPECT_ERROR(f.get_array("test.u8"), "has type UINT8, expected ARRAY");
    EXPECT_ERROR(f.get_tensor("nope"), "missing tensor 'nope'");
}

TEST(GgufFixture, TensorTypesMapToDTypesAndAnUnsupportedOneIsNamed) {
    const GgufFile f(fixture("all_types_v3.gguf"));
    EXPECT_EQ(f.get_tensor("t.f32").dtype, DType::F32);
    EXPECT_EQ(f.get_tensor("t.f16").dtype, DType::F16);
    EXPECT_EQ(f.get_tensor("t.bf16").dtype, DType::BF16);
    EXPECT_EQ(f.get_tensor("t.q8_0").require_dtype(), DType::Q8_0);
    EXPECT_EQ(f.get_tensor("t.q4_0").require_dtype(), DType::Q4_0);
    EXPECT_EQ(f.get_tensor("t.4d").numel(), 24);
    const GgufTensor& i8 = f.get_tensor("t.i8");
    EXPECT_EQ(i8.dtype, std::nullopt);
    EXPECT_ERROR(i8.require_dtype(),
                 "tensor 't.i8' has type I8, which tracelm does not support (supported: F32, F16, Q4_0, Q4_1, Q5_0, "
                 "Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, I32, I64, BF16)");
}

TEST(GgufFixture, MovedFileKeepsViews) {
    GgufFile a(fixture("all_types_v3.gguf"));
    const std::string_view arch = a.get_string("general.architecture");
    const void* data = a.get_tensor("t.f32").data;
    GgufFile b(std::move(a));
    EXPECT_EQ(b.get_string("general.architecture").data(), arch.data());
    GgufFile c(fixture("small_v2.gguf"));
    c = std::move(b);
    EXPECT_EQ(c.get_tensor("t.f32").data, data);
    EXPECT_EQ(c.get_string("general.architecture"), "tracelm_test");
    EXPECT_EQ(c.metadata()[0].key, "general.architecture");
}

// Block layouts as ggml-common.h's static_asserts give them (Q8_1 there is two f16 plus 32 int8).
TEST(GgufTypes, TableMatchesGgml) {
    struct Row {
        uint32_t id;
        const char* name;
        int64_t elems;
        size_t bytes;
    };
    const Row rows[] = {{0, "F32", 1, 4},        {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},     {3, "Q4_1", 32, 20},
                        {6, "Q5_0", 32, 22},     {7, "Q5_1", 32, 24},      {8, "Q8_0", 32, 34},     {9, "Q8_1", 32, 36},
                        {10, "Q2_K", 256, 84},   {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},  {13, "Q5_K", 256, 176},
                        {14, "Q6_K", 256, 210},  {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
                        {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},  {20, "IQ4_NL", 32, 18},  {21, "IQ3_S", 256, 110},
                        {22, "IQ2_S", 256, 82},  {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},        {25, "I16", 1, 2},
                        {26, "I32", 1, 4},       {27, "I64", 1, 8},        {28, "F64", 1, 8},       {29, "IQ1_M", 256, 56},
                        {30, "BF16", 1, 2},      {34, "TQ1_0", 256, 54},   {35, "TQ2_0", 256, 66},  {39, "MXFP4", 32, 17}};
    for (const Row& r : rows) {
        const GgmlType* t = ggml_type(r.id);
        ASSERT_NE(t, nullptr) << r.name;
        EXPECT_EQ(t->name, r.name);
        EXPECT_EQ(t->block_elems, r.elems) << r.name;
        EXPECT_EQ(t->block_bytes, r.bytes) << r.name;
        // Where the engine has the type, its own layout must agree.
        if (t->dtype) {
            EXPECT_EQ(dtype_block_elems(*t->dtype), r.elems) << r.name;
            EXPECT_EQ(dtype_block_bytes(*t->dtype), r.bytes) << r.name;
        }
    }
    for (uint32_t removed : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 1000u}) EXPECT_EQ(ggml_type(removed), nullptr);
    EXPECT_EQ(ggml_type_name(4), "unknown type 4");
    EXPECT_EQ(ggml_type_name(12), "Q4_K");
}

// ---- corruption ----

size_t find_bytes(const Bytes& b, const std::string& needle, size_t from = 0) {
    auto it = std::search(b.begin() + static_cast<std::ptrdiff_t>(from), b.end(), needle.begin(), needle.end());
    if (it == b.end()) throw std::runtime_error("fixture lacks '" + needle + "'");
    return static_cast<size_t>(it - b.begin());
}
// A GGUF string as encoded: u64 length, bytes.
std::string encoded(const std::string& s) {
    std::string out(8, '\0');
    const uint64_t n = s.size();
    std::memcpy(out.data(), &n, 8);
    return out + s;
}
// Offset just after the key (or tensor name) `s` in its encoded form.
size_t after(const Bytes& b, const std::string& s) { return find_bytes(b, encoded(s)) + 8 + s.size(); }
void put_u32(Bytes& b, size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); }
void put_u64(Bytes& b, size_t at, uint64_t v) { std::memcpy(b.data() + at, &v, 8); }

std::string parse_error(const Bytes& b) {
    return error_of([&] { (void)GgufFile::from_memory(b, "corrupt.gguf"); });
}

// Each corrupted variant must be rejected with a message containing `needle`.
class GgufCorrupt : public ::testing::Test {
   protected:
    Bytes v3 = read_bytes(fixture("all_types_v3.gguf"));
    Bytes v2 = read_bytes(fixture("small_v2.gguf"));

    void expect_reject(const Bytes& b, const std::string& needle) {
        const std::string msg = parse_error(b);
        EXPECT_NE(msg.find("gguf: corrupt.gguf: "), std::string::npos) << msg;
        EXPECT_NE(msg.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << msg;
    }
    template <typename Patch>
    void expect_reject(Patch patch, const std::string& needle) {
        Bytes b = v3;
        patch(b);
        expect_reject(b, needle);
    }
};

TEST_F(GgufCorrupt, EveryTruncationIsRejected) {
    for (const char* name : {"all_types_v3.gguf", "small_v2.gguf"}) {
        const Bytes full = read_bytes(fixture(name));
        const json& s = spec(name);
        // Everything up to the end of the last tensor's data is needed; the writer's padding after it is not.
        uint64_t end = 0;
        for (const json& t : s.at("tensors"))
            end = std::max(end, s.at("data_offset").get<uint64_t>() + t.at("offset").get<uint64_t>() + t.at("bytes").get<uint64_t>());
        ASSERT_LE(end, full.size());
        for (size_t n = 0; n <= full.size(); ++n) {
            const Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
            if (n >= end) {
                EXPECT_NO_THROW((void)GgufFile::from_memory(cut)) << name << " cut to " << n;
                continue;
            }
            const std::string msg = parse_error(cut);
            const bool clear = msg.find("truncated file") != std::string::npos ||
                               msg.find("but the file ends") != std::string::npos ||
                               msg.find("cannot fit") != std::string::npos ||
                               msg.find("past the end of the file") != std::string::npos ||
                               msg.find("not a GGUF file") != std::string::npos;
            EXPECT_TRUE(clear) << name << " cut to " << n << ": " << msg;
        }
    }
}

TEST_F(GgufCorrupt, TruncatedFilesOnDiskNameThePath) {
    TempDir dir;
    const size_t ti_start = find_bytes(v3, encoded("t.f32"));
    const size_t t4d = after(v3, "t.4d");
    const size_t data = spec("all_types_v3.gguf").at("data_offset").get<size_t>();
    ASSERT_EQ(data, 1536u);
    const struct {
        size_t size;
        std::string needle;
    } cases[] = {
        {0, "file is empty"},
        {3, "not a GGUF file"},
        {24, "kv_count 27 cannot fit in the 0 bytes after the header"},
        {ti_start - 3, "metadata key 'test.arr_nested3': array of 1 INT32 elements needs at least 4 bytes each, but "
                       "the file ends 1 bytes later"},
        {ti_start, "tensor_count 7 cannot fit in the 0 bytes after the metadata"},
        {t4d + 2, "truncated file: tensor 't.4d' at offset " + std::to_string(t4d) + " needs 4 bytes, but the file ends after 2"},
        {data - 1, "the data section would start at offset 1536, past the end of the file (size 1535)"},
        {data, "tensor 't.f32' data [1536, 1632) runs past the end of the file (size 1536)"},
        {data + 200, "tensor 't.bf16' data [1728, 1776) runs past the end of the file (size 1736)"},
    };
    for (const auto& c : cases) {
        const std::string path = dir.file("cut" + std::to_string(c.size) + ".gguf");
        write_bytes(path, Bytes(v3.begin(), v3.begin() + static_cast<std::ptrdiff_t>(c.size)));
        const std::string msg = error_of([&] { GgufFile f(path); });
        EXPECT_NE(msg.find("gguf: " + path + ": "), std::string::npos) << msg;
        EXPECT_NE(msg.find(c.needle), std::string::npos) << "wanted '" << c.needle << "' in: " << msg;
    }
}

TEST_F(GgufCorrupt, AnAbsentFileOrAFolderIsRefused) {
    TempDir dir;
    EXPECT_ERROR(GgufFile(dir.file("absent.gguf")), "gguf: " + dir.file("absent.gguf") + ": cannot open");
    EXPECT_ERROR(GgufFile(dir.file("")), "not a regular file");
}

TEST_F(GgufCorrupt, ABadHeaderIsRefusedNamingTheBadValue) {
    expect_reject([](Bytes& b) { b[0] = 'X'; }, "not a GGUF file: it starts with \"XGUF\"");
    expect_reject([](Bytes& b) { put_u32(b, 4, 1); }, "GGUF version 1 is not supported (only versions 2 and 3)");
    expect_reject([](Bytes& b) { put_u32(b, 4, 4); }, "unsupported GGUF version 4 (supported: 2 and 3)");
    expect_reject([](Bytes& b) { put_u32(b, 4, 0x03000000); }, "big-endian GGUF (version 3) is not supported");
    expect_reject([](Bytes& b) { put_u64(b, 16, uint64_t{1} << 60); }, "kv_count 1152921504606846976 cannot fit");
    expect_reject([](Bytes& b) { put_u64(b, 8, uint64_t{1} << 60); }, "tensor_count 1152921504606846976 cannot fit");
}

TEST_F(GgufCorrupt, BadMetadataIsRefusedNamingTheKey) {
    const size_t first_key = 24;
    expect_reject([&](Bytes& b) { put_u64(b, first_key, uint64_t{1} << 62); },
                  "metadata key at offset 24 has length 4611686018427387904, but the file ends");
    expect_reject([&](Bytes& b) { put_u64(b, first_key, 0); }, "metadata key #0 is empty");
    expect_reject([&](Bytes& b) { put_u64(b, after(b, "test.string") + 4, uint64_t{1} << 62); },
                  "metadata key 'test.string' at offset");
    expect_reject([&](Bytes& b) { put_u32(b, after(b, "test.u8"), 13); }, "metadata key 'test.u8' has unknown value type 13");
    expect_reject([&](Bytes& b) { b[after(b, "test.bool_true") + 4] = 2; },
                  "metadata key 'test.bool_true': BOOL at offset");
    expect_reject([&](Bytes& b) { b[after(b, "test.arr_bool") + 4 + 4 + 8 + 1] = 7; }, "has byte value 7 (must be 0 or 1)");
    expect_reject([&](Bytes& b) { put_u32(b, after(b, "test.arr_i32") + 4, 99); },
                  "metadata key 'test.arr_i32': unknown array element type 99");
    expect_reject([&](Bytes& b) { put_u64(b, after(b, "test.arr_i32") + 8, uint64_t{1} << 61); },
                  "metadata key 'test.arr_i32': array of 2305843009213693952 INT32 elements needs at least 4 bytes each");
    expect_reject([&](Bytes& b) { put_u64(b, after(b, "test.arr_str") + 8, ~uint64_t{0}); },
                  "array of 18446744073709551615 STRING elements");
    expect_reject([&](Bytes& b) { put_u64(b, after(b, "test.arr_nested") + 8, uint64_t{1} << 40); },
                  "array of 1099511627776 ARRAY elements");
    // An inner array's count that runs past its parent's bytes (and the file).
    expect_reject([&](Bytes& b) { put_u64(b, after(b, "test.arr_nested") + 20, uint64_t{1} << 50); },
                  "array of 1125899906842624 INT32 elements");
    expect_reject([&](Bytes& b) { b[after(b, "test.i8") - 2] = 'u'; }, "metadata key 'test.u8' appears twice");
    // general.alignment: a UINT32 power of two.
    const size_t align_value = after(v3, "general.alignment") + 4;
    for (uint32_t bad : {0u, 3u, 96u, 0x80000001u})
        expect_reject([&](Bytes& b) { put_u32(b, align_value, bad); },
                      "general.alignment " + std::to_string(bad) + " is not a non-zero power of two");
    expect_reject([&](Bytes& b) { put_u32(b, align_value - 4, 5); }, "general.alignment has type INT32, expected UINT32");
}

TEST_F(GgufCorrupt, BadTensorInfosAreRefusedNamingTheTensor) {
    const size_t f32 = after(v3, "t.f32");  // n_dims, ne[0], ne[1], type, offset
    const size_t f16 = after(v3, "t.f16");
    const size_t q8 = after(v3, "t.q8_0");
    const size_t t4d = after(v3, "t.4d");
    expect_reject([&](Bytes& b) { put_u32(b, f32, 5); }, "tensor 't.f32' has n_dims 5 (must be 1 to 4)");
    expect_reject([&](Bytes& b) { put_u32(b, f32, 0); }, "tensor 't.f32' has n_dims 0");
    expect_reject([&](Bytes& b) { put_u64(b, f32 + 4, 0); }, "tensor 't.f32' has dimension ne[0] = 0");
    expect_reject([&](Bytes& b) { put_u64(b, f32 + 12, 0); }, "tensor 't.f32' has dimension ne[1] = 0");
    expect_reject([&](Bytes& b) { put_u64(b, f32 + 4, uint64_t{1} << 63); }, "ne[0] = 9223372036854775808, beyond int64");
    expect_reject([&](Bytes& b) { put_u64(b, f32 + 12, uint64_t{1} << 62); },
                  "tensor 't.f32' dims [8, 4611686018427387904] overflow the element count");
    expect_reject(
        [&](Bytes& b) {
            for (int d = 0; d < 4; ++d) put_u64(b, t4d + 4 + 8 * d, uint64_t{1} << 20);
        },
        "tensor 't.4d' dims [1048576, 1048576, 1048576, 1048576] overflow the element count");
    expect_reject(
        [&](Bytes& b) {
            put_u64(b, f32 + 4, uint64_t{1} << 62);
            put_u64(b, f32 + 12, 1);
        },
        "tensor 't.f32' dims [4611686018427387904, 1] of F32 overflow the byte size");
    expect_reject([&](Bytes& b) { put_u32(b, f16 + 4 + 16, 4); }, "tensor 't.f16' has unknown ggml type id 4");
    expect_reject([&](Bytes& b) { put_u32(b, f16 + 4 + 16, 100000); }, "unknown ggml type id 100000");
    expect_reject([&](Bytes& b) { put_u64(b, q8 + 4, 48); }, "tensor 't.q8_0' has ne[0] = 48, not a whole number of Q8_0 blocks of 32 elements");
    expect_reject([&](Bytes& b) { put_u32(b, f16 + 4 + 16, 12); }, "tensor 't.f16' has ne[0] = 5, not a whole number of Q4_K blocks of 256");
    expect_reject([&](Bytes& b) { put_u64(b, f16 + 4 + 16 + 4, 130); }, "tensor 't.f16' offset 130 is not a multiple of the alignment 64");
    expect_reject([&](Bytes& b) { put_u64(b, f16 + 4 + 16 + 4, 64); }, "tensors 't.f32' and 't.f16' overlap");
    expect_reject([&](Bytes& b) { put_u64(b, t4d + 4 + 32 + 4, uint64_t{1} << 40); },
                  "tensor 't.4d' offset 1099511627776 of the data section (which starts at 1536) runs past the end of the file (size 2240)");
    // In the data section but running past its end: [1536 + 640, + 96 bytes).
    expect_reject([&](Bytes& b) { put_u64(b, t4d + 4 + 32 + 4, 640); },
                  "tensor 't.4d' data [2176, 2272) runs past the end of the file (size 2240)");
    expect_reject(
        [&](Bytes& b) {
            b[f16 - 2] = '3';
            b[f16 - 1] = '2';
        },
        "tensor 't.f32' appears twice");
    expect_reject([&](Bytes& b) { put_u64(b, f32 - 5 - 8, 0); }, "tensor #0 has an empty name");
}

// A minimal file around hand-encoded key/value pairs, for shapes the fixtures do not have.
Bytes minimal_gguf(const std::string& kvs, uint64_t kv_count) {
    std::string s = "GGUF";
    const uint32_t version = 3;
    const uint64_t counts[2] = {0, kv_count};
    s.append(reinterpret_cast<const char*>(&version), 4);
    s.append(reinterpret_cast<const char*>(counts), 16);
    s += kvs;
    return {s.begin(), s.end()};
}

std::string nested_arrays(int depth) {
    std::string s = encoded("deep");
    const uint32_t array = 9;
    const uint32_t i32 = 5;
    const uint64_t one = 1;
    const uint64_t zero = 0;
    s.append(reinterpret_cast<const char*>(&array), 4);
    for (int d = 1; d < depth; ++d) {
        s.append(reinterpret_cast<const char*>(&array), 4);
        s.append(reinterpret_cast<const char*>(&one), 8);
    }
    s.append(reinterpret_cast<const char*>(&i32), 4);
    s.append(reinterpret_cast<const char*>(&zero), 8);
    return s;
}

TEST_F(GgufCorrupt, NestingDepthIsLimited) {
    const Bytes ok = minimal_gguf(nested_arrays(8), 1);
    const GgufFile f = GgufFile::from_memory(ok);
    EXPECT_TRUE(f.tensors().empty());  // no tensors: the file may end right after the metadata
    EXPECT_EQ(f.get_array("deep").count, 1u);
    expect_reject(minimal_gguf(nested_arrays(9), 1), "metadata key 'deep': arrays nested more than 8 deep");
}

TEST(GgufSmolLM2, ReadsTheRealFilesMetadataAndTensors) {
    TRACELM_NEED_SMOLLM2();
    const GgufFile f(::tracelm::testing::smollm2_gguf_path());
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.get_u32("llama.block_count"), 30u);
    EXPECT_EQ(f.get_int<int>("llama.embedding_length"), 576);
    EXPECT_EQ(f.get_u32("llama.attention.head_count"), 9u);
    EXPECT_EQ(f.get_u32("llama.attention.head_count_kv"), 3u);
    EXPECT_EQ(f.get_f32("llama.rope.freq_base"), 100000.0f);
    EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_bos_token"));
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(f.metadata().size(), 33u);
    EXPECT_EQ(f.data_offset(), 1785664u);
    ASSERT_EQ(f.tensors().size(), 272u);

    const GgufTensor& emb = f.get_tensor("token_embd.weight");
    EXPECT_EQ(ggml_type_name(emb.ggml_type), "Q8_0");
    EXPECT_EQ(emb.dtype, DType::Q8_0);
    EXPECT_EQ(emb.dims, (std::vector<int64_t>{576, 49152}));
    EXPECT_EQ(emb.bytes, 576u / 32 * 34 * 49152);
    const GgufTensor& q = f.get_tensor("blk.0.attn_q.weight");
    EXPECT_EQ(ggml_type_name(q.ggml_type), "Q4_1");
    EXPECT_EQ(q.dims, (std::vector<int64_t>{576, 576}));
    EXPECT_EQ(f.get_tensor("blk.0.attn_norm.weight").dtype, DType::F32);

    const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
    ASSERT_EQ(tokens.size(), 49152u);
    EXPECT_EQ(f.get_string_array("tokenizer.ggml.merges").size(), 48900u);
    EXPECT_EQ(f.get_i32_array("tokenizer.ggml.token_type").size(), 49152u);
}

}  // namespace
}  // namespace tracelm
