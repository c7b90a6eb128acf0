// SafetensorsFile: round trips through the writer and rejection of every kind of malformed file.
#include <gtest/gtest.h>

#include "support/test_support.h"
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "checkpoint/random_checkpoint.h"
#include "formats/safetensors_writer.h"
#include "checkpoint/rng.h"
#include "formats/safetensors.h"

namespace tracelm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using testing::TempDir;

std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file from a raw header text and data section, with the length prefix filled in.
std::string raw_file(const std::string& header, const std::string& data) {
    std::string out(8, '\0');
    const uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    return out + header + data;
}

std::vector<uint8_t> byte_pattern(size_t n, uint8_t salt) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + salt);
    return v;
}

// Opening must fail with a runtime_error naming the path and containing `needle`.
void expect_reject(const std::string& path, const std::string& needle) {
    try {
        SafetensorsFile f(path);
        ADD_FAILURE() << "accepted " << path;
    } catch (const std::runtime_error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
        EXPECT_NE(msg.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << msg;
    }
}

void expect_reject_header(const TempDir& dir, const std::string& header, const std::string& data,
                          const std::string& needle) {
    SCOPED_TRACE(header);
    const std::string path = dir.file("bad.safetensors");
    write_all(path, raw_file(header, data));
    expect_reject(path, needle);
}

const std::vector<TensorToWrite> kThree = {
    {"a.weight", DType::F32, {2, 3}, byte_pattern(24, 1)},
    {"b.bias", DType::BF16, {5}, byte_pattern(10, 2)},
    {"c", DType::I64, {1, 2}, byte_pattern(16, 3)},
};

TEST(Safetensors, RoundTripEveryDtype) {
    TempDir dir;
    const std::vector<TensorToWrite> tensors = {
        {"f32", DType::F32, {2, 3}, byte_pattern(24, 1)},
        {"bf16", DType::BF16, {3, 1, 2}, byte_pattern(12, 2)},
        {"f16", DType::F16, {7}, byte_pattern(14, 3)},
        {"i32", DType::I32, {4}, byte_pattern(16, 4)},
        {"i64", DType::I64, {2, 2}, byte_pattern(32, 5)},
        {"scalar", DType::F32, {}, byte_pattern(4, 6)},
        {"empty", DType::F16, {0, 5}, {}},
        {"weird \"name\"/with\\chars", DType::I32, {1}, byte_pattern(4, 7)},
    };
    const std::string path = dir.file("x.safetensors");
    write_safetensors(path, tensors, {{"format", "pt"}, {"note", "hello"}});

    const std::string bytes = read_all(path);
    uint64_t header_len = 0;
    for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
    EXPECT_EQ((8 + header_len) % 8, 0u) << "header must be padded to 8-byte alignment";
    EXPECT_EQ(bytes[8], '{');

    const SafetensorsFile f(path);
    EXPECT_EQ(f.path(), path);
    ASSERT_EQ(f.tensors().size(), tensors.size());
    EXPECT_EQ(f.metadata().at("format"), "pt");
    EXPECT_EQ(f.metadata().at("note"), "hello");
    for (const TensorToWrite& t : tensors) {
        const TensorInfo* info = f.find(t.name);
        ASSERT_NE(info, nullptr) << t.name;
        EXPECT_EQ(info->name, t.name);
        EXPECT_EQ(info->dtype, t.dtype) << t.name;
        EXPECT_EQ(info->shape, t.shape) << t.name;
        ASSERT_EQ(info->bytes, t.bytes.size()) << t.name;
        EXPECT_EQ(info->numel() * static_cast<int64_t>(dtype_size(t.dtype)), static_cast<int64_t>(t.bytes.size()));
        if (!t.bytes.empty()) {
            EXPECT_EQ(std::memcmp(info->data, t.bytes.data(), t.bytes.size()), 0) << t.name;
        }
    }
    EXPECT_EQ(f.find("missing"), nullptr);
    for (size_t i = 1; i < f.tensors().size(); ++i) EXPECT_LT(f.tensors()[i - 1].name, f.tensors()[i].name);
}

TEST(Safetensors, MoveKeepsDataValid) {
    TempDir dir;
    const std::string path = dir.file("m.safetensors");
    write_safetensors(path, kThree);
    SafetensorsFile a(path);
    const TensorInfo* info = a.find("a.weight");
    const void* data = info->data;
    SafetensorsFile b(std::move(a));
    EXPECT_EQ(b.find("a.weight"), info);
    EXPECT_EQ(b.find("a.weight")->data, data);
    SafetensorsFile c(path);
    c = std::move(b);
    EXPECT_EQ(std::memcmp(c.find("a.weight")->data, kThree[0].bytes.data(), 24), 0);
}

TEST(Safetensors, AcceptsHandWrittenFileWithPaddingAndGaps) {
    TempDir dir;
    const std::string path = dir.file("h.safetensors");
    write_all(path, raw_file(R"({"__metadata__":{},"x":{"dtype":"I32","shape":[2],"data_offsets":[4,12]}}   )",
                             std::string(16, '\x01')));
    const SafetensorsFile f(path);
    ASSERT_NE(f.find("x"), nullptr);
    EXPECT_EQ(f.find("x")->bytes, 8u);
}

TEST(Safetensors, TruncationAnywhereIsAnError) {
    TempDir dir;
    const std::string good = dir.file("good.safetensors");
    write_safetensors(good, kThree);
    const std::string bytes = read_all(good);
    uint64_t header_len = 0;
    for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
    const size_t data_start = 8 + header_len;
    ASSERT_EQ(bytes.size(), data_start + 24 + 10 + 16);

    std::vector<size_t> cuts;
    for (size_t n = 0; n <= data_start; ++n) cuts.push_back(n);
    for (size_t n : {data_start + 1, data_start + 23, data_start + 24, data_start + 30, bytes.size() - 1}) cuts.push_back(n);
    const std::string path = dir.file("cut.safetensors");
    for (size_t n : cuts) {
        write_all(path, bytes.substr(0, n));
        EXPECT_THROW(SafetensorsFile{path}, std::runtime_error) << "truncated at " << n;
    }
}

TEST(Safetensors, ImpossibleOrOversizedHeaderLengthsAreRefused) {
    TempDir dir;
    const std::string path = dir.file("len.safetensors");
    std::string bytes = raw_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
    for (int i = 0; i < 8; ++i) bytes[i] = '\xff';
    write_all(path, bytes);
    expect_reject(path, "header length");

    bytes = raw_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
    bytes[0] = static_cast<char>(bytes.size());  // longer than what follows
    write_all(path, bytes);
    expect_reject(path, "header length");

    // Over the 100 MB cap although the file is long enough (sparse, so cheap).
    write_all(path, raw_file(std::string(8, ' '), ""));
    std::string len(8, '\0');
    len[3] = 0x07;  // 0x07000000 = 112 MiB
    { std::fstream(path, std::ios::in | std::ios::out | std::ios::binary).write(len.data(), 8); }
    ASSERT_EQ(truncate(path.c_str(), 0x08000000), 0);
    expect_reject(path, "100 MB");

    write_all(path, "short");
    expect_reject(path, "too short");
    write_all(path, raw_file("", ""));
    expect_reject(path, "not valid JSON");
}

TEST(Safetensors, AMissingFileOrAFolderIsRefused) {
    TempDir dir;
    expect_reject(dir.file("nonexistent.safetensors"), "cannot open");
    fs::create_directory(dir.file("d"));
    expect_reject(dir.file("d"), "not a regular file");
}

TEST(Safetensors, AHeaderThatIsNotTheExpectedJsonIsRefused) {
    TempDir dir;
    const std::string data(8, '\0');
    expect_reject_header(dir, "{", data, "not valid JSON");
    expect_reject_header(dir, R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", data, "not valid JSON");
    expect_reject_header(dir, "[]", data, "not a JSON object");
    expect_reject_header(dir, "42", data, "not a JSON object");
    expect_reject_header(dir, "\"x\"", data, "not a JSON object");
    expect_reject_header(dir, "null    ", data, "not a JSON object");
    expect_reject_header(dir, R"({"x":[1,2]})", data, "tensor 'x': entry is not an object");
    expect_reject_header(dir, R"({"x":{"dtype":"F32","shape":[2]}})", data, "tensor 'x': needs");
    expect_reject_header(dir, R"({"__metadata__":[1]})", data, "__metadata__");
    expect_reject_header(dir, R"({"__metadata__":{"a":1}})", data, "__metadata__ value of 'a'");
    expect_reject_header(dir,
                         R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         data, "repeats key 'x'");
}

TEST(Safetensors, UnsupportedDtypesAreRefusedNamingTheTensor) {
    TempDir dir;
    const std::string data(8, '\0');
    for (const char* dt : {"F64", "BOOL", "U8", "F8_E4M3", "f32", ""}) {
        expect_reject_header(dir, R"({"w.q":{"dtype":")" + std::string(dt) + R"(","shape":[1],"data_offsets":[0,1]}})",
                             data, "tensor 'w.q': unsupported dtype '" + std::string(dt) + "'");
    }
    expect_reject_header(dir, R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", data, "dtype is not a string");
}

TEST(Safetensors, BadShapesAreRefusedAndZeroSizedTensorsAccepted) {
    TempDir dir;
    const std::string data(64, '\0');
    auto header = [](const std::string& shape, const std::string& offsets) {
        return R"({"t":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}}";
    };
    expect_reject_header(dir, header("[1099511627776,1099511627776]", "[0,4]"), data, "overflows");
    expect_reject_header(dir, header("[4611686018427387904,4]", "[0,16]"), data, "overflows");  // bytes overflow
    expect_reject_header(dir, header("[18446744073709551615]", "[0,4]"), data, "invalid dimension");
    expect_reject_header(dir, header("[-1]", "[0,4]"), data, "invalid dimension");
    expect_reject_header(dir, header("[2.0]", "[0,8]"), data, "invalid dimension");
    expect_reject_header(dir, header("[\"2\"]", "[0,8]"), data, "invalid dimension");
    expect_reject_header(dir, header("[1,1,1,1,1,1,1,1,1]", "[0,4]"), data, "rank 9");
    expect_reject_header(dir, header("{}", "[0,4]"), data, "shape is not a list");
    expect_reject_header(dir, header("[3]", "[0,8]"), data, "needs 12");  // size/shape mismatch
    expect_reject_header(dir, header("[2]", "[0,12]"), data, "needs 8");
    // Zero-sized tensors are valid whatever the other dimensions.
    const std::string path = dir.file("zero.safetensors");
    write_all(path, raw_file(header("[1099511627776,1099511627776,0]", "[0,0]"), ""));
    EXPECT_EQ(SafetensorsFile(path).find("t")->bytes, 0u);
}

TEST(Safetensors, BadOrOverlappingOffsetsAreRefused) {
    TempDir dir;
    const std::string data(16, '\0');
    auto one = [](const std::string& offsets) {
        return R"({"t":{"dtype":"I32","shape":[2],"data_offsets":)" + offsets + "}}";
    };
    expect_reject_header(dir, one("[12,20]"), data, "exceed the data section of 16 bytes");
    expect_reject_header(dir, one("[18446744073709551608,18446744073709551616]"), data, "data_offsets");
    expect_reject_header(dir, one("[9223372036854775807,9223372036854775815]"), data, "data_offsets");
    expect_reject_header(dir, one("[8,0]"), data, "reversed");
    expect_reject_header(dir, one("[-8,0]"), data, "not non-negative integers");
    expect_reject_header(dir, one("[0.0,8.0]"), data, "not non-negative integers");
    expect_reject_header(dir, one("[0,8,16]"), data, "not a pair");
    expect_reject_header(dir, one("\"0-8\""), data, "not a pair");
    expect_reject_header(dir,
                         R"({"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"I32","shape":[2],"data_offsets":[4,12]}})",
                         data, "tensors 'a' and 'b' overlap");
    expect_reject_header(dir,
                         R"({"a":{"dtype":"I32","shape":[4],"data_offsets":[0,16]},)"
                         R"("b":{"dtype":"I32","shape":[1],"data_offsets":[8,12]}})",
                         data, "overlap");
    expect_reject_header(dir,
                         R"({"a":{"dtype":"I32","shape":[2],"data_offsets":[8,16]},)"
                         R"("b":{"dtype":"I32","shape":[2],"data_offsets":[8,16]}})",
                         data, "overlap");
}

// Random corruption of a valid header must give either a consistent file or an exception.
TEST(Safetensors, CorruptedHeadersNeverCrash) {
    TempDir dir;
    const std::string good = dir.file("good.safetensors");
    write_safetensors(good, kThree);
    const std::string bytes = read_all(good);
    const std::string path = dir.file("fuzz.safetensors");
    Xoshiro256 rng(7);
    int accepted = 0;
    for (int iter = 0; iter < 3000; ++iter) {
        std::string b = bytes;
        const int flips = 1 + static_cast<int>(rng.below(3));
        for (int k = 0; k < flips; ++k) {
            static const char kChars[] = "0123456789[]{},:\"-.eE FIBU\xff";
            const size_t pos = rng.below(static_cast<uint32_t>(b.size() - 50));  // header bytes mostly
            b[pos] = kChars[rng.below(sizeof kChars - 1)];
        }
        write_all(path, b);
        try {
            const SafetensorsFile f(path);
            ++accepted;
            for (const TensorInfo& t : f.tensors())
                ASSERT_EQ(static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype), t.bytes);
        } catch (const std::runtime_error&) {
        }
    }
    EXPECT_LT(accepted, 3000);
}

}  // namespace
}  // namespace tracelm
