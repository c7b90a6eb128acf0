#include "formats/safetensors_writer.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace tracelm {

// safetensors data is little-endian and written as raw host memory.
static_assert(std::endian::native == std::endian::little);

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

std::string safetensors_dtype(DType t) {
    switch (t) {
        case DType::F32: return "F32";
        case DType::BF16: return "BF16";
        case DType::F16: return "F16";
        case DType::I32: return "I32";
        case DType::I64: return "I64";
        default: break;
    }
    throw std::logic_error("safetensors has no " + std::string(dtype_name(t)) + " dtype");
}

// Buffered output that throws, naming the file, on any error.
class OutFile {
   public:
    explicit OutFile(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "wb")) {
        if (f_ == nullptr) throw std::runtime_error(path + ": cannot create: " + std::strerror(errno));
    }
    ~OutFile() {
        if (f_ != nullptr) std::fclose(f_);
    }
    OutFile(const OutFile&) = delete;
    OutFile& operator=(const OutFile&) = delete;

    void write(const void* p, size_t n) {
        if (n != 0 && std::fwrite(p, 1, n, f_) != n)
            throw std::runtime_error(path_ + ": write failed: " + std::strerror(errno));
        written_ += n;
    }
    uint64_t written() const { return written_; }
    void close() {
        const int rc = std::fclose(f_);
        f_ = nullptr;
        if (rc != 0) throw std::runtime_error(path_ + ": close failed: " + std::strerror(errno));
    }

   private:
    std::string path_;
    std::FILE* f_;
    uint64_t written_ = 0;
};

}  // namespace

std::optional<uint64_t> SafetensorsTensorSpec::byte_size() const {
    uint64_t n = dtype_size(dtype);
    for (int64_t d : shape)
        if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
    return n;
}

void write_safetensors_streamed(const std::string& path, const std::vector<SafetensorsTensorSpec>& specs,
                                const std::map<std::string, std::string>& metadata,
                                const std::function<void(size_t, const ByteSink&)>& produce) {
    ordered_json header = ordered_json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    uint64_t offset = 0;
    for (const SafetensorsTensorSpec& s : specs) {
        if (s.name.empty() || s.name == "__metadata__")
            throw std::runtime_error(path + ": invalid tensor name '" + s.name + "'");
        if (header.contains(s.name)) throw std::runtime_error(path + ": duplicate tensor '" + s.name + "'");
        const auto bytes = s.byte_size();
        if (!bytes) throw std::runtime_error(path + ": tensor '" + s.name + "' has an invalid shape");
        uint64_t end;
        if (__builtin_add_overflow(offset, *bytes, &end)) throw std::runtime_error(path + ": tensors too large");
        header[s.name] = {{"dtype", safetensors_dtype(s.dtype)}, {"shape", s.shape}, {"data_offsets", {offset, end}}};
        offset = end;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));

    const std::string tmp = path + ".tmp";
    try {
        OutFile out(tmp);
        out.write(len, 8);
        out.write(text.data(), text.size());
        const ByteSink sink = [&out](const void* p, size_t n) { out.write(p, n); };
        for (size_t i = 0; i < specs.size(); ++i) produce(i, sink);
        if (out.written() != 8 + text.size() + offset)
            throw std::logic_error(path + ": tensor data does not match the header");
        out.close();
        fs::rename(tmp, path);
    } catch (...) {
        std::error_code ec;
        fs::remove(tmp, ec);
        throw;
    }
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    std::vector<SafetensorsTensorSpec> specs;
    for (const TensorToWrite& t : tensors) {
        SafetensorsTensorSpec s{t.name, t.dtype, t.shape};
        const auto need = s.byte_size();
        if (!need) throw std::runtime_error(path + ": tensor '" + t.name + "' has an invalid shape");
        if (*need != t.bytes.size())
            throw std::runtime_error(path + ": tensor '" + t.name + "' has " + std::to_string(t.bytes.size()) +
                                     " bytes, its shape needs " + std::to_string(*need));
        specs.push_back(std::move(s));
    }
    write_safetensors_streamed(path, specs, metadata, [&](size_t i, const ByteSink& out) {
        out(tensors[i].bytes.data(), tensors[i].bytes.size());
    });
}

}  // namespace tracelm
