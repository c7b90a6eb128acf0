#include "backends/registry.h"

#include <stdexcept>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels/cpu_features.h"
#include "backends/cuda/capabilities.h"
#ifdef TRACELM_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif
#include "backends/vulkan/capabilities.h"
#ifdef TRACELM_HAVE_VULKAN
#include "backends/vulkan/vulkan_backend.h"
#endif

namespace tracelm {

namespace {

// The backends with one device refuse another index rather than ignore it.
void require_device_zero(const char* backend, const BackendOptions& o) {
    if (o.device != 0)
        throw std::runtime_error(std::string("backend '") + backend + "' has one device, 0 (asked for device " +
                                 std::to_string(o.device) + ")");
}

std::unique_ptr<Backend> make_cpu(const BackendOptions& o) {
    require_device_zero("cpu", o);
    return std::make_unique<cpu::CpuBackend>(o.threads > 0 ? o.threads : cpu::ThreadPool::default_threads());
}
std::vector<std::string> cpu_devices() {
    return {"0: host CPU (" + std::to_string(cpu::ThreadPool::default_threads()) + " threads, " +
            cpu::isa_name(cpu::active_isa()) + " kernels)"};
}

#ifdef TRACELM_HAVE_CUDA
std::unique_ptr<Backend> make_cuda(const BackendOptions& o) {
    require_device_zero("cuda", o);
    return std::make_unique<cuda::CudaBackend>();
}
std::string cuda_unavailable() { return cuda::unavailable_reason(); }
std::vector<std::string> cuda_devices() { return {"0: " + cuda::CudaBackend().device_name()}; }
#else
std::string cuda_unavailable() {
    return "this tracelm was built without CUDA (configure with -DTRACELM_CUDA=ON on a machine with nvcc)";
}
std::unique_ptr<Backend> make_cuda(const BackendOptions&) { throw std::runtime_error(cuda_unavailable()); }
std::vector<std::string> cuda_devices() { return {}; }
#endif

#ifdef TRACELM_HAVE_VULKAN
std::unique_ptr<Backend> make_vulkan(const BackendOptions& o) {
    vulkan::VulkanOptions v;
    v.device = o.device;
    return std::make_unique<vulkan::VulkanBackend>(v);
}
std::string vulkan_unavailable() { return vulkan::unavailable_reason(); }
std::vector<std::string> vulkan_devices() { return vulkan::device_names(); }
#else
std::string vulkan_unavailable() {
    return "this tracelm was built without Vulkan (install libvulkan-dev and glslc, configure with -DTRACELM_VULKAN=ON)";
}
std::unique_ptr<Backend> make_vulkan(const BackendOptions&) { throw std::runtime_error(vulkan_unavailable()); }
std::vector<std::string> vulkan_devices() { return {}; }
#endif

}  // namespace

const std::vector<BackendInfo>& backend_registry() {
    static const std::vector<BackendInfo> registry = {
        {"cpu", [] { return std::string(); }, make_cpu, cpu::CpuBackend::static_capabilities, cpu_devices},
        {"cuda", cuda_unavailable, make_cuda, cuda::capabilities, cuda_devices},
        {"vulkan", vulkan_unavailable, make_vulkan, vulkan::capabilities, vulkan_devices},
    };
    return registry;
}

std::string backend_names() {
    std::string out;
    for (const BackendInfo& b : backend_registry()) out += (out.empty() ? "" : "|") + b.name;
    return out;
}

const BackendInfo& backend_info(const std::string& name) {
    for (const BackendInfo& b : backend_registry())
        if (b.name == name) return b;
    throw std::runtime_error("unknown backend '" + name + "' (choose " + backend_names() + ")");
}

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& options) {
    const BackendInfo& b = backend_info(name);
    const std::string why = b.unavailable();
    if (!why.empty()) throw std::runtime_error("backend '" + name + "' is not available: " + why);
    return b.make(options);
}

}  // namespace tracelm
