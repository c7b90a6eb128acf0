#include "formats/gguf.h"

#include "runtime/untrusted.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <utility>

namespace tracelm {

// GGUF v2/v3 files are little-endian (v3 big-endian files are recognised and refused) and their data is
// handed out as raw host memory; sizes go through size_t.
static_assert(std::endian::native == std::endian::little);
static_assert(sizeof(size_t) == 8);

namespace {

// Block layouts from ggml's ggml-common.h (its static_asserts), cross-checked with GGML_QUANT_SIZES of
// the gguf Python package 0.19.0. One disagreement: the package gives Q8_1 40 bytes, the size of the old
// float-scaled block; ggml-common.h's block_q8_1 is two f16 plus 32 int8, 36 bytes. Q8_1 and Q8_K are
// ggml's intermediate types, listed so that a file holding them is still measured correctly.
constexpr GgmlType kGgmlTypes[] = {
    {0, "F32", 1, 4, DType::F32},
    {1, "F16", 1, 2, DType::F16},
    {2, "Q4_0", 32, 18, DType::Q4_0},
    {3, "Q4_1", 32, 20, DType::Q4_1},
    {6, "Q5_0", 32, 22, DType::Q5_0},
    {7, "Q5_1", 32, 24, DType::Q5_1},
    {8, "Q8_0", 32, 34, DType::Q8_0},
    {9, "Q8_1", 32, 36, std::nullopt},
    {10, "Q2_K", 256, 84, std::nullopt},
    {11, "Q3_K", 256, 110, std::nullopt},
    {12, "Q4_K", 256, 144, DType::Q4_K},
    {13, "Q5_K", 256, 176, DType::Q5_K},
    {14, "Q6_K", 256, 210, DType::Q6_K},
    {15, "Q8_K", 256, 292, std::nullopt},
    {16, "IQ2_XXS", 256, 66, std::nullopt},
    {17, "IQ2_XS", 256, 74, std::nullopt},
    {18, "IQ3_XXS", 256, 98, std::nullopt},
    {19, "IQ1_S", 256, 50, std::nullopt},
    {20, "IQ4_NL", 32, 18, std::nullopt},
    {21, "IQ3_S", 256, 110, std::nullopt},
    {22, "IQ2_S", 256, 82, std::nullopt},
    {23, "IQ4_XS", 256, 136, std::nullopt},
    {24, "I8", 1, 1, std::nullopt},
    {25, "I16", 1, 2, std::nullopt},
    {26, "I32", 1, 4, DType::I32},
    {27, "I64", 1, 8, DType::I64},
    {28, "F64", 1, 8, std::nullopt},
    {29, "IQ1_M", 256, 56, std::nullopt},
    {30, "BF16", 1, 2, DType::BF16},
    {34, "TQ1_0", 256, 54, std::nullopt},
    {35, "TQ2_0", 256, 66, std::nullopt},
    {39, "MXFP4", 32, 17, std::nullopt},
    {40, "NVFP4", 64, 36, std::nullopt},
    {41, "Q1_0", 128, 18, std::nullopt},
};

constexpr uint32_t kMaxValueType = static_cast<uint32_t>(GgufType::F64);
constexpr int kMaxArrayDepth = 8;  // ggml itself reads no nesting; this bounds the recursion
constexpr uint32_t kMaxDims = 4;   // GGML_MAX_DIMS
constexpr uint64_t kDefaultAlignment = 32;
// Smallest encodings, to bound counts by the bytes that remain before anything is read or allocated:
// a key/value pair is a key length, a one-byte key, a type and a one-byte value; a tensor info is a
// name length, a one-byte name, n_dims, one dimension, a type and an offset.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

std::string str(uint64_t v) { return std::to_string(v); }

size_t scalar_bytes(GgufType t) {
    switch (t) {
        case GgufType::U8:
        case GgufType::I8:
        case GgufType::Bool: return 1;
        case GgufType::U16:
        case GgufType::I16: return 2;
        case GgufType::U32:
        case GgufType::I32:
        case GgufType::F32: return 4;
        case GgufType::U64:
        case GgufType::I64:
        case GgufType::F64: return 8;
        case GgufType::String:
        case GgufType::Array: return 0;
    }
    return 0;
}

// The smallest encoding of one array element of type t.
uint64_t min_elem_bytes(GgufType t) {
    if (t == GgufType::String) return 8;      // length
    if (t == GgufType::Array) return 4 + 8;   // element type, count
    return scalar_bytes(t);
}

bool is_integer(GgufType t) {
    switch (t) {
        case GgufType::U8:
        case GgufType::I8:
        case GgufType::U16:
        case GgufType::I16:
        case GgufType::U32:
        case GgufType::I32:
        case GgufType::U64:
        case GgufType::I64: return true;
        default: return false;
    }
}

template <typename T>
T load(const unsigned char* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

// Sign and magnitude of an integer value (its type already checked by the caller).
std::pair<bool, uint64_t> integer_of(GgufType t, const unsigned char* p) {
    auto s = [](int64_t v) {
        return v < 0 ? std::pair{true, 0 - static_cast<uint64_t>(v)} : std::pair{false, static_cast<uint64_t>(v)};
    };
    switch (t) {
        case GgufType::U8: return {false, load<uint8_t>(p)};
        case GgufType::U16: return {false, load<uint16_t>(p)};
        case GgufType::U32: return {false, load<uint32_t>(p)};
        case GgufType::U64: return {false, load<uint64_t>(p)};
        case GgufType::I8: return s(load<int8_t>(p));
        case GgufType::I16: return s(load<int16_t>(p));
        case GgufType::I32: return s(load<int32_t>(p));
        case GgufType::I64: return s(load<int64_t>(p));
        default: return {false, 0};
    }
}

// Bounds-checked reading. `what` describes the field for messages; nothing is built unless it fails.
class Cursor {
   public:
    Cursor(const unsigned char* base, size_t size, const std::string& path) : base_(base), size_(size), path_(path) {}

    size_t pos() const { return pos_; }
    size_t remaining() const { return size_ - pos_; }
    const unsigned char* base() const { return base_; }

    [[noreturn]] void fail(const std::string& msg) const { throw std::runtime_error("gguf: " + path_ + ": " + msg); }

    const unsigned char* take(uint64_t n, std::string_view what) {
        if (n > remaining())
            fail("truncated file: " + std::string(what) + " at offset " + str(pos_) + " needs " + str(n) +
                 " bytes, but the file ends after " + str(remaining()));
        const unsigned char* p = base_ + pos_;
        pos_ += n;
        return p;
    }
    template <typename T>
    T read(std::string_view what) {
        return load<T>(take(sizeof(T), what));
    }
    std::string_view string(std::string_view what) {
        const size_t at = pos_;
        const auto n = read<uint64_t>(what);
        if (n > remaining())
            fail(std::string(what) + " at offset " + str(at) + " has length " + str(n) + ", but the file ends " +
                 str(remaining()) + " bytes after it");
        return {reinterpret_cast<const char*>(take(n, what)), static_cast<size_t>(n)};
    }

   private:
    const unsigned char* base_;
    size_t size_;
    size_t pos_ = 0;
    const std::string& path_;
};

void check_bools(Cursor& c, const unsigned char* p, uint64_t n, std::string_view where) {
    for (uint64_t i = 0; i < n; ++i)
        if (p[i] > 1)
            c.fail(std::string(where) + ": BOOL at offset " + str(static_cast<uint64_t>(p + i - c.base())) +
                   " has byte value " + str(p[i]) + " (must be 0 or 1)");
}

// Reads (and fully validates) one value of type t at the cursor. `where` names the key for messages.
GgufValue parse_value(Cursor& c, GgufType t, int depth, std::string_view where) {
    GgufValue v;
    v.type = t;
    if (t == GgufType::String) {
        const std::string_view s = c.string(where);
        v.data = reinterpret_cast<const unsigned char*>(s.data());
        v.bytes = s.size();
        return v;
    }
    if (t != GgufType::Array) {
        v.bytes = scalar_bytes(t);
        v.data = c.take(v.bytes, where);
        if (t == GgufType::Bool) check_bools(c, v.data, 1, where);
        return v;
    }
    const auto et = c.read<uint32_t>(where);
    if (et > kMaxValueType) c.fail(std::string(where) + ": unknown array element type " + str(et));
    v.elem_type = static_cast<GgufType>(et);
    if (v.elem_type == GgufType::Array && depth + 1 >= kMaxArrayDepth)
        c.fail(std::string(where) + ": arrays nested more than " + str(kMaxArrayDepth) + " deep");
    v.count = c.read<uint64_t>(where);
    const uint64_t min_bytes = min_elem_bytes(v.elem_type);
    if (v.count > c.remaining() / min_bytes)
        c.fail(std::string(where) + ": array of " + str(v.count) + " " + std::string(gguf_type_name(v.elem_type)) +
               " elements needs at least " + str(min_bytes) + " bytes each, but the file ends " +
               str(c.remaining()) + " bytes later");
    const size_t start = c.pos();
    if (const size_t eb = scalar_bytes(v.elem_type); eb != 0) {
        const unsigned char* p = c.take(v.count * eb, where);
        if (v.elem_type == GgufType::Bool) check_bools(c, p, v.count, where);
    } else {
        // Each element consumes at least one byte, so this loop is bounded by the file size.
        for (uint64_t i = 0; i < v.count; ++i) parse_value(c, v.elem_type, depth + 1, where);
    }
    v.data = c.base() + start;
    v.bytes = c.pos() - start;
    return v;
}

std::string format_scalar(GgufType t, const unsigned char* p) {
    char buf[64];
    switch (t) {
        case GgufType::F32: std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(load<float>(p))); return buf;
        case GgufType::F64: std::snprintf(buf, sizeof(buf), "%.17g", load<double>(p)); return buf;
        case GgufType::Bool: return *p ? "true" : "false";
        default: {
            const auto [neg, mag] = integer_of(t, p);
            return neg ? std::string("-") + str(mag) : str(mag);
        }
    }
}

}  // namespace

std::string_view gguf_type_name(GgufType t) {
    constexpr std::string_view names[] = {"UINT8", "INT8",   "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
                                          "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64", "FLOAT64"};
    const auto i = static_cast<uint32_t>(t);
    return i <= kMaxValueType ? names[i] : "UNKNOWN";
}

const GgmlType* ggml_type(uint32_t id) {
    for (const GgmlType& t : kGgmlTypes)
        if (t.id == id) return &t;
    return nullptr;
}

std::string ggml_type_name(uint32_t id) {
    const GgmlType* t = ggml_type(id);
    return t ? std::string(t->name) : "unknown type " + str(id);
}

// ---- GgufValue ----

std::vector<GgufValue> GgufValue::elements() const {
    std::vector<GgufValue> out;
    if (type != GgufType::Array) return out;
    out.reserve(static_cast<size_t>(count));  // validated: count elements fit in `bytes`
    const std::string no_path;
    Cursor c(data, bytes, no_path);
    for (uint64_t i = 0; i < count; ++i) out.push_back(parse_value(c, elem_type, 0, "element"));
    return out;
}

std::string GgufValue::to_string(size_t max_elems) const {
    constexpr size_t kMaxString = 256;
    if (type == GgufType::String) {
        const std::string_view s(reinterpret_cast<const char*>(data), bytes);
        return "\"" + untrusted::escape(s, kMaxString) + "\"";
    }
    if (type != GgufType::Array) return format_scalar(type, data);
    std::string out = "[";
    const size_t eb = scalar_bytes(elem_type);
    if (eb != 0) {
        for (uint64_t i = 0; i < count && i < max_elems; ++i)
            out += (i ? ", " : "") + format_scalar(elem_type, data + i * eb);
    } else {
        const std::string no_path;
        Cursor c(data, bytes, no_path);
        for (uint64_t i = 0; i < count && i < max_elems; ++i)
            out += (i ? ", " : "") + parse_value(c, elem_type, 0, "element").to_string(max_elems);
    }
    if (count > max_elems) out += ", ...";
    return out + "] (" + str(count) + " x " + std::string(gguf_type_name(elem_type)) + ")";
}

// ---- GgufTensor ----

int64_t GgufTensor::numel() const {
    return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
}

DType GgufTensor::require_dtype() const {
    if (dtype) return *dtype;
    std::string supported;
    for (const GgmlType& t : kGgmlTypes)
        if (t.dtype) supported += (supported.empty() ? "" : ", ") + std::string(t.name);
    throw std::runtime_error("tensor '" + untrusted::escape(name) + "' has type " + ggml_type_name(ggml_type) +
                             ", which tracelm does not support (supported: " + supported + ")");
}

// ---- GgufFile ----

GgufFile::GgufFile(const std::string& path) : path_(path) {
    const untrusted::OpenedFile file = untrusted::open_regular_file(path);
    if (file.fd < 0) fail(file.error);
    const int fd = file.fd;
    const auto file_bytes = static_cast<size_t>(file.bytes);
    if (file_bytes == 0) {
        ::close(fd);
        fail("file is empty");
    }
    void* m = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    const int map_errno = errno;
    ::close(fd);  // the mapping keeps its own reference to the file
    if (m == MAP_FAILED) fail(std::string("mmap failed: ") + std::strerror(map_errno));
    map_ = m;
    map_bytes_ = file_bytes;
    base_ = static_cast<const unsigned char*>(m);
    size_ = file_bytes;
    try {
        parse();
    } catch (...) {
        unmap();
        throw;
    }
}

GgufFile GgufFile::from_memory(std::span<const unsigned char> bytes, std::string name) {
    GgufFile f;
    f.path_ = std::move(name);
    f.base_ = bytes.data();
    f.size_ = bytes.size();
    f.parse();
    return f;
}

GgufFile::~GgufFile() { unmap(); }

GgufFile::GgufFile(GgufFile&& o) noexcept
    : path_(std::move(o.path_)),
      map_(std::exchange(o.map_, nullptr)),
      map_bytes_(std::exchange(o.map_bytes_, 0)),
      base_(std::exchange(o.base_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      version_(o.version_),
      alignment_(o.alignment_),
      data_offset_(o.data_offset_),
      kvs_(std::move(o.kvs_)),
      kv_index_(std::move(o.kv_index_)),
      tensors_(std::move(o.tensors_)),
      tensor_index_(std::move(o.tensor_index_)) {}

GgufFile& GgufFile::operator=(GgufFile&& o) noexcept {
    if (this != &o) {
        unmap();
        path_ = std::move(o.path_);
        map_ = std::exchange(o.map_, nullptr);
        map_bytes_ = std::exchange(o.map_bytes_, 0);
        base_ = std::exchange(o.base_, nullptr);
        size_ = std::exchange(o.size_, 0);
        version_ = o.version_;
        alignment_ = o.alignment_;
        data_offset_ = o.data_offset_;
        kvs_ = std::move(o.kvs_);
        kv_index_ = std::move(o.kv_index_);
        tensors_ = std::move(o.tensors_);
        tensor_index_ = std::move(o.tensor_index_);
    }
    return *this;
}

void GgufFile::unmap() {
    if (map_ != nullptr) ::munmap(map_, map_bytes_);
    map_ = nullptr;
    map_bytes_ = 0;
}

void GgufFile::fail(const std::string& msg) const { throw std::runtime_error("gguf: " + path_ + ": " + msg); }

void GgufFile::parse() {
    Cursor c(base_, size_, path_);
    if (size_ < 4 || std::memcmp(base_, "GGUF", 4) != 0) {
        std::string found;
        for (size_t i = 0; i < std::min<size_t>(size_, 4); ++i) found += untrusted::escape(std::string_view(
                                                                        reinterpret_cast<const char*>(base_ + i), 1));
        fail("not a GGUF file: it starts with \"" + found + "\", not the magic \"GGUF\"");
    }
    c.take(4, "magic");
    version_ = c.read<uint32_t>("version");
    if (version_ == 1) fail("GGUF version 1 is not supported (only versions 2 and 3); convert the model again");
    if (version_ != 2 && version_ != 3) {
        if (const uint32_t swapped = __builtin_bswap32(version_); swapped == 2 || swapped == 3)
            fail("big-endian GGUF (version " + str(swapped) + ") is not supported");
        fail("unsupported GGUF version " + str(version_) + " (supported: 2 and 3)");
    }
    const auto tensor_count = c.read<uint64_t>("tensor_count");
    const auto kv_count = c.read<uint64_t>("kv_count");
    if (kv_count > c.remaining() / kMinKvBytes)
        fail("kv_count " + str(kv_count) + " cannot fit in the " + str(c.remaining()) +
             " bytes after the header (a key/value pair takes at least " + str(kMinKvBytes) + ")");

    for (uint64_t i = 0; i < kv_count; ++i) {
        const std::string_view key = c.string("metadata key");
        if (key.empty()) fail("metadata key #" + str(i) + " is empty");
        const std::string where = "metadata key '" + untrusted::escape(key) + "'";
        const auto type = c.read<uint32_t>(where);
        if (type > kMaxValueType) fail(where + " has unknown value type " + str(type));
        GgufValue v = parse_value(c, static_cast<GgufType>(type), 0, where);
        if (!kv_index_.emplace(key, kvs_.size()).second) fail(where + " appears twice");
        kvs_.push_back({key, v});
    }

    if (const GgufValue* a = find("general.alignment")) {
        if (a->type != GgufType::U32)
            fail("general.alignment has type " + std::string(gguf_type_name(a->type)) + ", expected UINT32");
        alignment_ = load<uint32_t>(a->data);
        if (!std::has_single_bit(alignment_))
            fail("general.alignment " + str(alignment_) + " is not a non-zero power of two");
    } else {
        alignment_ = kDefaultAlignment;
    }

    if (tensor_count > c.remaining() / kMinTensorInfoBytes)
        fail("tensor_count " + str(tensor_count) + " cannot fit in the " + str(c.remaining()) +
             " bytes after the metadata (a tensor info takes at least " + str(kMinTensorInfoBytes) + ")");
    for (uint64_t i = 0; i < tensor_count; ++i) {
        GgufTensor t;
        t.name = c.string("tensor name");
        if (t.name.empty()) fail("tensor #" + str(i) + " has an empty name");
        const std::string where = "tensor '" + untrusted::escape(t.name) + "'";
        const auto n_dims = c.read<uint32_t>(where);
        if (n_dims == 0 || n_dims > kMaxDims) fail(where + " has n_dims " + str(n_dims) + " (must be 1 to 4)");
        int64_t numel = 1;
        bool overflow = false;
        for (uint32_t d = 0; d < n_dims; ++d) {
            const auto ne = c.read<uint64_t>(where);
            if (ne == 0) fail(where + " has dimension ne[" + str(d) + "] = 0");
            if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
                fail(where + " has dimension ne[" + str(d) + "] = " + str(ne) + ", beyond int64");
            t.dims.push_back(static_cast<int64_t>(ne));
            overflow = overflow || __builtin_mul_overflow(numel, static_cast<int64_t>(ne), &numel);
        }
        std::string dims_text;
        for (int64_t d : t.dims) dims_text += (dims_text.empty() ? "" : ", ") + str(static_cast<uint64_t>(d));
        if (overflow) fail(where + " dims [" + dims_text + "] overflow the element count");
        t.ggml_type = c.read<uint32_t>(where);
        const GgmlType* type = ggml_type(t.ggml_type);
        if (type == nullptr) fail(where + " has unknown ggml type id " + str(t.ggml_type));
        t.dtype = type->dtype;
        if (t.dims[0] % type->block_elems != 0)
            fail(where + " has ne[0] = " + str(static_cast<uint64_t>(t.dims[0])) + ", not a whole number of " +
                 std::string(type->name) + " blocks of " + str(static_cast<uint64_t>(type->block_elems)) +
                 " elements");
        uint64_t bytes = 0;
        if (__builtin_mul_overflow(static_cast<uint64_t>(numel / type->block_elems), type->block_bytes, &bytes))
            fail(where + " dims [" + dims_text + "] of " + std::string(type->name) + " overflow the byte size");
        t.bytes = bytes;
        t.offset = c.read<uint64_t>(where);
        if (t.offset % alignment_ != 0)
            fail(where + " offset " + str(t.offset) + " is not a multiple of the alignment " + str(alignment_));
        if (!tensor_index_.emplace(t.name, tensors_.size()).second) fail(where + " appears twice");
        tensors_.push_back(std::move(t));
    }

    // The data section starts at the next multiple of the alignment; a file without tensors may end first.
    data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
    if (tensors_.empty()) return;
    if (data_offset_ > size_)
        fail("the data section would start at offset " + str(data_offset_) + ", past the end of the file (size " +
             str(size_) + ")");
    const uint64_t data_bytes = size_ - data_offset_;
    for (GgufTensor& t : tensors_) {
        if (t.offset > data_bytes || t.bytes > data_bytes - t.offset) {
            const uint64_t begin = data_offset_ + std::min<uint64_t>(t.offset, data_bytes + 1);
            uint64_t end = 0;
            const std::string range =
                t.offset > data_bytes
                    ? "offset " + str(t.offset) + " of the data section (which starts at " + str(data_offset_) + ")"
                    : "data [" + str(begin) + ", " +
                          (__builtin_add_overflow(begin, t.bytes, &end) ? std::string("2^64 and beyond") : str(end)) +
                          ")";
            fail("tensor '" + untrusted::escape(t.name) + "' " + range + " runs past the end of the file (size " +
                 str(size_) + ")");
        }
        t.data = base_ + data_offset_ + t.offset;
    }
    std::vector<const GgufTensor*> by_offset;
    by_offset.reserve(tensors_.size());
    for (const GgufTensor& t : tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
        const GgufTensor& a = *by_offset[i - 1];
        const GgufTensor& b = *by_offset[i];
        if (a.offset + a.bytes > b.offset)  // both within the file: no overflow
            fail("tensors '" + untrusted::escape(a.name) + "' and '" + untrusted::escape(b.name) + "' overlap");
    }
}

// ---- metadata access ----

const GgufValue* GgufFile::find(std::string_view key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const GgufValue& GgufFile::get(std::string_view key) const {
    const GgufValue* v = find(key);
    if (v == nullptr) fail("missing metadata key '" + untrusted::escape(key) + "'");
    return *v;
}

const GgufValue& GgufFile::typed(std::string_view key, GgufType want) const {
    const GgufValue& v = get(key);
    if (v.type != want)
        fail("metadata key '" + untrusted::escape(key) + "' has type " + std::string(gguf_type_name(v.type)) + ", expected " +
             std::string(gguf_type_name(want)));
    return v;
}

uint32_t GgufFile::get_u32(std::string_view key) const { return load<uint32_t>(typed(key, GgufType::U32).data); }
uint64_t GgufFile::get_u64(std::string_view key) const { return load<uint64_t>(typed(key, GgufType::U64).data); }
float GgufFile::get_f32(std::string_view key) const { return load<float>(typed(key, GgufType::F32).data); }
bool GgufFile::get_bool(std::string_view key) const { return *typed(key, GgufType::Bool).data != 0; }
std::string_view GgufFile::get_string(std::string_view key) const {
    const GgufValue& v = typed(key, GgufType::String);
    return {reinterpret_cast<const char*>(v.data), v.bytes};
}

std::optional<uint32_t> GgufFile::opt_u32(std::string_view key) const {
    return find(key) ? std::optional(get_u32(key)) : std::nullopt;
}
std::optional<uint64_t> GgufFile::opt_u64(std::string_view key) const {
    return find(key) ? std::optional(get_u64(key)) : std::nullopt;
}
std::optional<float> GgufFile::opt_f32(std::string_view key) const {
    return find(key) ? std::optional(get_f32(key)) : std::nullopt;
}
std::optional<bool> GgufFile::opt_bool(std::string_view key) const {
    return find(key) ? std::optional(get_bool(key)) : std::nullopt;
}
std::optional<std::string_view> GgufFile::opt_string(std::string_view key) const {
    return find(key) ? std::optional(get_string(key)) : std::nullopt;
}

std::optional<GgufFile::IntValue> GgufFile::find_integer(std::string_view key) const {
    const GgufValue* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!is_integer(v->type))
        fail("metadata key '" + untrusted::escape(key) + "' has type " + std::string(gguf_type_name(v->type)) +
             ", expected an integer");
    const auto [neg, mag] = integer_of(v->type, v->data);
    return IntValue{neg, mag};
}

GgufFile::IntValue GgufFile::get_integer(std::string_view key) const {
    get(key);  // throws when missing
    return *find_integer(key);
}

void GgufFile::int_out_of_range(std::string_view key, IntValue v, std::string_view target) const {
    fail("metadata key '" + untrusted::escape(key) + "' = " + std::string(v.negative ? "-" : "") + str(v.magnitude) +
         " does not fit in " + std::string(target));
}

const GgufValue& GgufFile::get_array(std::string_view key) const { return typed(key, GgufType::Array); }

namespace {
[[noreturn]] void wrong_elements(const std::string& path, std::string_view key, GgufType have, const char* want) {
    throw std::runtime_error("gguf: " + path + ": metadata key '" + untrusted::escape(key) + "' is an array of " +
                             std::string(gguf_type_name(have)) + ", expected an array of " + want);
}
}  // namespace

std::vector<std::string_view> GgufFile::get_string_array(std::string_view key) const {
    const GgufValue& a = get_array(key);
    if (a.elem_type != GgufType::String) wrong_elements(path_, key, a.elem_type, "STRING");
    std::vector<std::string_view> out;
    out.reserve(static_cast<size_t>(a.count));  // validated: each element takes at least 8 bytes of a.bytes
    Cursor c(a.data, a.bytes, path_);
    for (uint64_t i = 0; i < a.count; ++i) out.push_back(c.string("string element"));
    return out;
}

std::vector<float> GgufFile::get_f32_array(std::string_view key) const {
    const GgufValue& a = get_array(key);
    if (a.elem_type != GgufType::F32) wrong_elements(path_, key, a.elem_type, "FLOAT32");
    std::vector<float> out(static_cast<size_t>(a.count));
    if (a.count != 0) std::memcpy(out.data(), a.data, a.bytes);
    return out;
}

std::vector<int32_t> GgufFile::get_i32_array(std::string_view key) const {
    const GgufValue& a = get_array(key);
    if (!is_integer(a.elem_type)) wrong_elements(path_, key, a.elem_type, "integers");
    const size_t eb = scalar_bytes(a.elem_type);
    std::vector<int32_t> out;
    out.reserve(static_cast<size_t>(a.count));
    for (uint64_t i = 0; i < a.count; ++i) {
        const auto [neg, mag] = integer_of(a.elem_type, a.data + i * eb);
        if (mag > (neg ? uint64_t{1} << 31 : (uint64_t{1} << 31) - 1))
            fail("metadata key '" + untrusted::escape(key) + "' element " + str(i) + " = " + std::string(neg ? "-" : "") + str(mag) +
                 " does not fit in int32");
        out.push_back(neg ? static_cast<int32_t>(-static_cast<int64_t>(mag)) : static_cast<int32_t>(mag));
    }
    return out;
}

// ---- tensors ----

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::get_tensor(std::string_view name) const {
    const GgufTensor* t = find_tensor(name);
    if (t == nullptr) fail("missing tensor '" + untrusted::escape(name) + "'");
    return *t;
}

}  // namespace tracelm
