// Read-only, memory-mapped GGUF files (versions 2 and 3, little-endian).
//
// Layout: "GGUF", u32 version, u64 tensor_count, u64 kv_count, the metadata key/value pairs, the
// tensor infos (name, n_dims, ne[0..n_dims), ggml type, offset), then the data section, which starts
// at the next multiple of general.alignment (default 32) and which the tensor offsets are relative
// to. Every count, length, offset and dimension is checked against the bytes that remain before it is
// used: a malformed file is a std::runtime_error naming the file and the problem.
//
// Keys, string values and tensor names are string_views into the mapping: they stay valid as long
// as the GgufFile (which may be moved) lives.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "runtime/dtype.h"

namespace tracelm {

template <typename T>
concept GgufInteger = std::integral<T> && !std::same_as<T, bool>;

// Metadata value types, with their ids in the file.
enum class GgufType : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7,
    String = 8, Array = 9, U64 = 10, I64 = 11, F64 = 12,
};
// "UINT32", "STRING", ... (the names the GGUF specification uses).
std::string_view gguf_type_name(GgufType t);

// A ggml tensor type: its block of block_elems elements takes block_bytes bytes (1 and the element
// size for plain types); dtype is the engine's type, nullopt where tracelm cannot compute with it.
struct GgmlType {
    uint32_t id;
    std::string_view name;  // "F32", "Q4_K", ...: ggml's names
    int64_t block_elems;
    size_t block_bytes;
    std::optional<DType> dtype;
};
const GgmlType* ggml_type(uint32_t id);  // null for ids no known ggml version defines
std::string ggml_type_name(uint32_t id);  // the name, or "unknown type <id>"

// One metadata value: a view of its validated encoding inside the file.
struct GgufValue {
    GgufType type = GgufType::U8;
    GgufType elem_type = GgufType::U8;  // arrays only
    uint64_t count = 0;                 // arrays only: number of elements
    // Scalars: the little-endian value; strings: the characters; arrays: the encoded elements.
    const unsigned char* data = nullptr;
    size_t bytes = 0;

    // The elements of an array, each as a value of its own (empty for anything else).
    std::vector<GgufValue> elements() const;
    // For dumps: scalars and strings in full, arrays as "[a, b, c, ... (N x TYPE)]" up to max_elems.
    std::string to_string(size_t max_elems = 8) const;
};

struct GgufKeyValue {
    std::string_view key;
    GgufValue value;
};

struct GgufTensor {
    std::string_view name;
    uint32_t ggml_type = 0;
    std::optional<DType> dtype;  // nullopt: a type tracelm does not compute with (see require_dtype)
    std::vector<int64_t> dims;   // ne[0] first: the innermost, contiguous dimension, as in ggml
    uint64_t offset = 0;         // from the start of the data section
    const void* data = nullptr;  // into the file; from a path, aligned to alignment() (the map is page-aligned)
    size_t bytes = 0;

    int64_t numel() const;
    // dtype, or "tensor 'x' has type Q2_K, which tracelm does not support (supported: ...)".
    DType require_dtype() const;
};

class GgufFile {
   public:
    explicit GgufFile(const std::string& path);  // maps and parses the file
    // Parses bytes the caller keeps alive (and unchanged) for the life of the object; `name` stands
    // for the path in messages.
    static GgufFile from_memory(std::span<const unsigned char> bytes, std::string name = "<memory>");

    ~GgufFile();
    GgufFile(GgufFile&& other) noexcept;
    GgufFile& operator=(GgufFile&& other) noexcept;
    GgufFile(const GgufFile&) = delete;
    GgufFile& operator=(const GgufFile&) = delete;

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }  // where the data section starts in the file
    size_t file_size() const { return size_; }

    // ---- metadata ----
    // In file order.
    const std::vector<GgufKeyValue>& metadata() const { return kvs_; }
    const GgufValue* find(std::string_view key) const;  // null when absent
    const GgufValue& get(std::string_view key) const;   // throws "... missing metadata key 'k'"

    // Exactly typed: throw when the key is missing or holds another type.
    uint32_t get_u32(std::string_view key) const;
    uint64_t get_u64(std::string_view key) const;
    float get_f32(std::string_view key) const;
    bool get_bool(std::string_view key) const;
    std::string_view get_string(std::string_view key) const;
    // Any integer type whose value fits in T.
    template <GgufInteger T = int64_t>
    T get_int(std::string_view key) const;

    // nullopt when the key is absent; a present key of another type still throws.
    std::optional<uint32_t> opt_u32(std::string_view key) const;
    std::optional<uint64_t> opt_u64(std::string_view key) const;
    std::optional<float> opt_f32(std::string_view key) const;
    std::optional<bool> opt_bool(std::string_view key) const;
    std::optional<std::string_view> opt_string(std::string_view key) const;
    template <GgufInteger T = int64_t>
    std::optional<T> opt_int(std::string_view key) const;

    // Arrays: of STRING; of FLOAT32; of any integer type whose every element fits in int32.
    std::vector<std::string_view> get_string_array(std::string_view key) const;
    std::vector<float> get_f32_array(std::string_view key) const;
    std::vector<int32_t> get_i32_array(std::string_view key) const;
    const GgufValue& get_array(std::string_view key) const;  // any array, e.g. nested ones

    // ---- tensors ----
    const std::vector<GgufTensor>& tensors() const { return tensors_; }  // in file order
    const GgufTensor* find_tensor(std::string_view name) const;          // null when absent
    const GgufTensor& get_tensor(std::string_view name) const;           // throws naming path and tensor

   private:
    GgufFile() = default;
    void parse();
    void unmap();
    [[noreturn]] void fail(const std::string& msg) const;
    const GgufValue& typed(std::string_view key, GgufType want) const;
    // An integer value as sign and magnitude, so that every integer type converts without loss.
    struct IntValue {
        bool negative;
        uint64_t magnitude;
    };
    std::optional<IntValue> find_integer(std::string_view key) const;  // nullopt when absent
    IntValue get_integer(std::string_view key) const;                  // throws when absent
    [[noreturn]] void int_out_of_range(std::string_view key, IntValue v, std::string_view target) const;
    template <GgufInteger T>
    T int_to(std::string_view key, IntValue v) const;
    template <GgufInteger T>
    static constexpr std::string_view int_type_name();

    std::string path_;
    void* map_ = nullptr;  // owned mapping; null when parsing borrowed memory
    size_t map_bytes_ = 0;
    const unsigned char* base_ = nullptr;
    size_t size_ = 0;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    std::vector<GgufKeyValue> kvs_;
    std::map<std::string_view, size_t, std::less<>> kv_index_;
    std::vector<GgufTensor> tensors_;
    std::map<std::string_view, size_t, std::less<>> tensor_index_;
};

template <GgufInteger T>
constexpr std::string_view GgufFile::int_type_name() {
    constexpr std::string_view signed_names[] = {"int8", "int16", "", "int32", "", "", "", "int64"};
    constexpr std::string_view unsigned_names[] = {"uint8", "uint16", "", "uint32", "", "", "", "uint64"};
    return std::is_signed_v<T> ? signed_names[sizeof(T) - 1] : unsigned_names[sizeof(T) - 1];
}

template <GgufInteger T>
T GgufFile::int_to(std::string_view key, IntValue v) const {
    if (v.negative) {
        // magnitude in [1, 2^63]: the value is -magnitude.
        if constexpr (std::is_signed_v<T>) {
            if (v.magnitude - 1 <= static_cast<uint64_t>(std::numeric_limits<T>::max()))
                return static_cast<T>(-static_cast<int64_t>(v.magnitude - 1) - 1);
        }
    } else if (v.magnitude <= static_cast<uint64_t>(std::numeric_limits<T>::max())) {
        return static_cast<T>(v.magnitude);
    }
    int_out_of_range(key, v, int_type_name<T>());
}

template <GgufInteger T>
T GgufFile::get_int(std::string_view key) const {
    return int_to<T>(key, get_integer(key));
}

template <GgufInteger T>
std::optional<T> GgufFile::opt_int(std::string_view key) const {
    const auto v = find_integer(key);
    if (!v) return std::nullopt;
    return int_to<T>(key, *v);
}

}  // namespace tracelm
