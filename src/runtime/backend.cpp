#include "runtime/backend.h"

namespace tracelm {

std::string BackendCapabilities::list(const std::vector<DType>& types) {
    std::string out;
    for (const DType t : types) out += (out.empty() ? "" : ", ") + std::string(dtype_name(t));
    return out;
}

void Backend::violation(const std::string& what, const std::string& buffer) const {
    std::string msg = "capture violation: " + what;
    if (!buffer.empty()) msg += " of '" + buffer + "'";
    msg += " inside captured region";
    throw CaptureViolation(msg);
}

Buffer* Backend::alloc(size_t bytes, const std::string& name) {
    if (capturing_) violation("alloc", name);
    return do_alloc(bytes, name);
}

void Backend::free(Buffer* b) {
    if (b == nullptr) return;
    if (capturing_) violation("free", b->name);
    do_free(b);
}

void Backend::upload(const Tensor& dst, const void* src) {
    if (capturing_) violation("upload", dst.name());
    ++uploads_;
    do_upload(dst, src);
}

void Backend::download(const Tensor& src, void* dst) {
    if (capturing_) violation("download", src.name());
    do_download(src, dst);
}

void Backend::synchronize() {
    if (capturing_) violation("synchronize", "");
    do_synchronize();
}

void Backend::begin_capture() {
    if (!supports_capture()) throw std::runtime_error(name() + " backend does not support graph capture");
    if (capturing_) throw CaptureViolation("capture violation: begin_capture inside captured region");
    do_begin_capture();
    capturing_ = true;
}

GraphId Backend::end_capture() {
    if (!capturing_) throw std::logic_error("end_capture without begin_capture");
    capturing_ = false;
    return do_end_capture();
}

void Backend::replay(GraphId g) {
    if (capturing_) violation("replay", "");
    do_replay(g);
}

void Backend::destroy_graph(GraphId g) {
    if (capturing_) violation("destroy_graph", "");
    do_destroy_graph(g);
}

}  // namespace tracelm
