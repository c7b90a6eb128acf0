#include "formats/gguf_writer.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>

#include "formats/gguf.h"

namespace tracelm {

static_assert(std::endian::native == std::endian::little);

namespace {

constexpr uint32_t kAlignment = 32;

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
}
void put_string(std::vector<uint8_t>& out, const std::string& s) {
    put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
}

uint32_t ggml_id(DType dt) {
    for (uint32_t id = 0; id < 64; ++id)
        if (const GgmlType* t = ggml_type(id); t && t->dtype == dt) return id;
    throw std::invalid_argument("no ggml type for " + std::string(dtype_name(dt)));
}

}  // namespace

void GgufWriter::key(const std::string& k, uint32_t type) {
    put_string(kv_, k);
    put<uint32_t>(kv_, type);
    ++n_kv_;
}
void GgufWriter::add_u32(const std::string& k, uint32_t v) {
    key(k, static_cast<uint32_t>(GgufType::U32));
    put(kv_, v);
}
void GgufWriter::add_f32(const std::string& k, float v) {
    key(k, static_cast<uint32_t>(GgufType::F32));
    put(kv_, v);
}
void GgufWriter::add_bool(const std::string& k, bool v) {
    key(k, static_cast<uint32_t>(GgufType::Bool));
    put<uint8_t>(kv_, v ? 1 : 0);
}
void GgufWriter::add_string(const std::string& k, const std::string& v) {
    key(k, static_cast<uint32_t>(GgufType::String));
    put_string(kv_, v);
}
void GgufWriter::add_string_array(const std::string& k, const std::vector<std::string>& v) {
    key(k, static_cast<uint32_t>(GgufType::Array));
    put<uint32_t>(kv_, static_cast<uint32_t>(GgufType::String));
    put<uint64_t>(kv_, v.size());
    for (const std::string& s : v) put_string(kv_, s);
}
void GgufWriter::add_i32_array(const std::string& k, const std::vector<int32_t>& v) {
    key(k, static_cast<uint32_t>(GgufType::Array));
    put<uint32_t>(kv_, static_cast<uint32_t>(GgufType::I32));
    put<uint64_t>(kv_, v.size());
    for (int32_t x : v) put(kv_, x);
}

namespace {

// The bytes of a tensor of `dtype` with ggml dims.
uint64_t tensor_bytes(const std::string& name, DType dtype, const std::vector<int64_t>& dims) {
    if (dims.empty() || !dtype_row_ok(dtype, dims[0]))
        throw std::invalid_argument("tensor '" + name + "': rows of " + std::string(dtype_name(dtype)) +
                                    " must be whole blocks");
    uint64_t rows = 1;
    for (size_t i = 1; i < dims.size(); ++i) rows *= static_cast<uint64_t>(dims[i]);
    return rows * dtype_row_bytes(dtype, dims[0]);
}

}  // namespace

void GgufWriter::add_tensor(const std::string& name, DType dtype, std::vector<int64_t> dims,
                            std::function<void(const Sink&)> produce) {
    const uint64_t bytes = tensor_bytes(name, dtype, dims);
    tensors_.push_back({name, ggml_id(dtype), std::move(dims), bytes, std::move(produce)});
}

void GgufWriter::add_tensor(const std::string& name, DType dtype, std::vector<int64_t> dims, std::vector<uint8_t> bytes) {
    if (const uint64_t need = tensor_bytes(name, dtype, dims); need != bytes.size())
        throw std::invalid_argument("tensor '" + name + "' has " + std::to_string(bytes.size()) +
                                    " bytes, its type and dims need " + std::to_string(need));
    auto data = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
    add_tensor(name, dtype, std::move(dims), [data](const Sink& sink) { sink(data->data(), data->size()); });
}

void GgufWriter::write(const std::string& path) const {
    std::vector<uint8_t> head;
    head.insert(head.end(), {'G', 'G', 'U', 'F'});
    put<uint32_t>(head, 3);
    put<uint64_t>(head, tensors_.size());
    put<uint64_t>(head, n_kv_);
    head.insert(head.end(), kv_.begin(), kv_.end());
    uint64_t offset = 0;
    for (const Tensor& t : tensors_) {
        put_string(head, t.name);
        put<uint32_t>(head, static_cast<uint32_t>(t.dims.size()));
        for (int64_t d : t.dims) put<uint64_t>(head, static_cast<uint64_t>(d));
        put<uint32_t>(head, t.type);
        put<uint64_t>(head, offset);
        offset += (t.bytes + kAlignment - 1) / kAlignment * kAlignment;
    }
    head.resize((head.size() + kAlignment - 1) / kAlignment * kAlignment, 0);
    const std::string tmp = path + ".tmp";
    try {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) throw std::runtime_error("cannot write " + path);
        out.write(reinterpret_cast<const char*>(head.data()), static_cast<std::streamsize>(head.size()));
        const char zeros[kAlignment] = {};
        for (const Tensor& t : tensors_) {
            uint64_t written = 0;
            t.produce([&](const void* p, size_t n) {
                if (written + n > t.bytes) throw std::logic_error("tensor '" + t.name + "': too many bytes produced");
                out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
                written += n;
            });
            if (written != t.bytes) throw std::logic_error("tensor '" + t.name + "': too few bytes produced");
            out.write(zeros, static_cast<std::streamsize>((kAlignment - t.bytes % kAlignment) % kAlignment));
        }
        out.close();
        if (!out) throw std::runtime_error("write error on " + path);
        std::filesystem::rename(tmp, path);
    } catch (...) {
        std::error_code ec;
        std::filesystem::remove(tmp, ec);
        throw;
    }
}

}  // namespace tracelm
