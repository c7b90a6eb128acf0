// libFuzzer harness for the GGUF reader: any input either parses or throws std::runtime_error, and every
// view a parsed file hands out lies inside the input (ASan sees libFuzzer's exact-size copy of it).
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "formats/gguf.h"

namespace {

volatile unsigned char g_sink;

void touch(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    unsigned char acc = 0;
    for (size_t i = 0; i < n; ++i) acc ^= p[i];
    g_sink = acc;
}

void walk(const tracelm::GgufValue& v) {
    touch(v.data, v.bytes);
    (void)v.to_string(4);
    for (const tracelm::GgufValue& e : v.elements()) walk(e);
}

// Each typed getter that applies to the key's type (those that may reject a value in range throw).
void use_getters(const tracelm::GgufFile& f, std::string_view key, const tracelm::GgufValue& v) {
    using tracelm::GgufType;
    try {
        switch (v.type) {
            case GgufType::U32: (void)f.get_u32(key); break;
            case GgufType::U64: (void)f.get_u64(key); break;
            case GgufType::F32: (void)f.opt_f32(key); break;
            case GgufType::Bool: (void)f.get_bool(key); break;
            case GgufType::String: touch(f.get_string(key).data(), f.get_string(key).size()); break;
            case GgufType::Array:
                if (v.elem_type == GgufType::String) {
                    for (std::string_view s : f.get_string_array(key)) touch(s.data(), s.size());
                } else if (v.elem_type == GgufType::F32) {
                    (void)f.get_f32_array(key);
                } else {
                    (void)f.get_i32_array(key);
                }
                break;
            default: (void)f.get_int<int32_t>(key); break;
        }
    } catch (const std::runtime_error&) {
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const tracelm::GgufFile f = tracelm::GgufFile::from_memory({data, size}, "fuzz");
        for (const tracelm::GgufKeyValue& kv : f.metadata()) {
            touch(kv.key.data(), kv.key.size());
            walk(kv.value);
            use_getters(f, kv.key, kv.value);
        }
        for (const tracelm::GgufTensor& t : f.tensors()) {
            touch(t.name.data(), t.name.size());
            touch(t.data, t.bytes);
            (void)tracelm::ggml_type_name(t.ggml_type);
            if (f.find_tensor(t.name) != &t) __builtin_trap();  // names are unique
        }
    } catch (const std::runtime_error&) {
    }
    return 0;
}
