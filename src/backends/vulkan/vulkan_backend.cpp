#include "backends/vulkan/vulkan_backend.h"

#include <vulkan/vulkan.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "backends/vulkan/vulkan_shaders.h"
#include "ops/sampling/sampling.h"

namespace tracelm::vulkan {

namespace {

// The errors a device reports at run time, by name.
std::string result_name(VkResult r) {
    switch (r) {
        case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST (the device was lost: a driver reset, hang or fault)";
        case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
        case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
        case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
        default: return "VkResult " + std::to_string(r);
    }
}

void check(VkResult r, const char* what) {
    if (r != VK_SUCCESS) throw std::runtime_error(std::string("Vulkan ") + what + ": " + result_name(r));
}

[[noreturn]] void not_implemented(const char* op) {
    throw NotImplemented(std::string("not implemented on the Vulkan backend: ") + op);
}

// Every pipeline has one layout: up to kBindings storage buffers, pushed per dispatch (VK_KHR_push_descriptor, so a
// recorded command buffer carries its own bindings and no descriptor pool outlives it), and kPushBytes of push
// constants (the minimum every device offers) for sizes and offsets.
constexpr uint32_t kBindings = 8;
constexpr uint32_t kPushBytes = 128;
// The most host-visible staging memory held: larger transfers (weights) go through it in pieces.
constexpr size_t kStagingBytes = size_t{64} << 20;

VkInstance make_instance(bool validation) {
    VkApplicationInfo app{};
    app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
    app.pApplicationName = "tracelm";
    app.apiVersion = VK_API_VERSION_1_2;
    VkInstanceCreateInfo ci{};
    ci.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
    ci.pApplicationInfo = &app;
    const char* layer = "VK_LAYER_KHRONOS_validation";
    const char* ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    // Synchronization validation too: it checks the barriers between dispatches, which the default checks do not.
    const VkValidationFeatureEnableEXT sync = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
    VkValidationFeaturesEXT features{};
    features.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT;
    features.enabledValidationFeatureCount = 1;
    features.pEnabledValidationFeatures = &sync;
    if (validation) {
        ci.pNext = &features;
        ci.enabledLayerCount = 1;
        ci.ppEnabledLayerNames = &layer;
        ci.enabledExtensionCount = 1;
        ci.ppEnabledExtensionNames = &ext;
    }
    VkInstance instance = VK_NULL_HANDLE;
    const VkResult r = vkCreateInstance(&ci, nullptr, &instance);
    if (r == VK_ERROR_LAYER_NOT_PRESENT)
        throw std::runtime_error("Vulkan validation asked for, but VK_LAYER_KHRONOS_validation is not installed "
                                 "(vulkan-validationlayers)");
    if (r != VK_SUCCESS) throw std::runtime_error("no Vulkan device: vkCreateInstance failed (VkResult " + std::to_string(r) + ")");
    return instance;
}

std::vector<VkPhysicalDevice> physical_devices(VkInstance instance) {
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(instance, &n, nullptr);
    std::vector<VkPhysicalDevice> devices(n);
    if (n > 0) vkEnumeratePhysicalDevices(instance, &n, devices.data());
    devices.resize(n);
    return devices;
}

bool has_extension(VkPhysicalDevice pd, const char* name) {
    uint32_t n = 0;
    vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
    std::vector<VkExtensionProperties> exts(n);
    vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, exts.data());
    return std::any_of(exts.begin(), exts.end(), [&](const auto& e) { return std::strcmp(e.extensionName, name) == 0; });
}

// The first queue family with compute, or -1.
int compute_family(VkPhysicalDevice pd) {
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
    std::vector<VkQueueFamilyProperties> qf(n);
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, qf.data());
    for (uint32_t i = 0; i < n; ++i)
        if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) != 0) return static_cast<int>(i);
    return -1;
}

// The largest device-local memory heap (buffers are allocated there), capped by TRACELM_VULKAN_HEAP_LIMIT_BYTES: a
// testing knob that makes a device look smaller, so the check of a model against it can be exercised on lavapipe.
uint64_t device_local_bytes(VkPhysicalDevice pd) {
    VkPhysicalDeviceMemoryProperties mp{};
    vkGetPhysicalDeviceMemoryProperties(pd, &mp);
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < mp.memoryHeapCount; ++i)
        if ((mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0) bytes = std::max(bytes, mp.memoryHeaps[i].size);
    if (const char* cap = std::getenv("TRACELM_VULKAN_HEAP_LIMIT_BYTES"); cap != nullptr && *cap != '\0')
        bytes = std::min<uint64_t>(bytes, std::strtoull(cap, nullptr, 10));
    return bytes;
}

std::string device_line(size_t i, VkPhysicalDevice pd) {
    VkPhysicalDeviceProperties p{};
    vkGetPhysicalDeviceProperties(pd, &p);
    const char* kind = p.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU   ? "discrete GPU"
                       : p.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ? "integrated GPU"
                       : p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU            ? "cpu"
                                                                                 : "other";
    char memory[32];
    std::snprintf(memory, sizeof(memory), "%.1f GiB", static_cast<double>(device_local_bytes(pd)) / (1u << 30));
    return std::to_string(i) + ": " + p.deviceName + " (" + kind + ", " + memory + " device-local)";
}

// The devices the loader reports, asked once per process (instance creation is not free on lavapipe).
const std::vector<std::string>& probe() {
    static const std::vector<std::string> lines = [] {
        std::vector<std::string> out;
        VkInstance instance = VK_NULL_HANDLE;
        try {
            instance = make_instance(false);
        } catch (const std::exception&) {
            return out;
        }
        const auto devices = physical_devices(instance);
        for (size_t i = 0; i < devices.size(); ++i) out.push_back(device_line(i, devices[i]));
        vkDestroyInstance(instance, nullptr);
        return out;
    }();
    return lines;
}

bool env_validation() {
    const char* v = std::getenv("TRACELM_VULKAN_VALIDATION");
    return v != nullptr && std::string(v) == "1";
}

// Weight types as the shaders' WTYPE specialisation constant (shaders/common.glsl).
uint32_t weight_code(DType dt) {
    switch (dt) {
        case DType::F32: return 0;
        case DType::F16: return 1;
        case DType::BF16: return 2;
        case DType::Q8_0: return 3;
        case DType::Q4_0: return 4;
        case DType::Q4_1: return 5;
        case DType::Q5_0: return 6;
        case DType::Q5_1: return 7;
        case DType::Q4_K: return 8;
        case DType::Q5_K: return 9;
        case DType::Q6_K: return 10;
        default: break;
    }
    throw std::invalid_argument(std::string("vulkan: no shader for weight type ") + std::string(dtype_name(dt)));
}

}  // namespace

std::vector<std::string> device_names() { return probe(); }

std::string unavailable_reason() {
    return probe().empty() ? "no Vulkan device: the loader found none (install mesa-vulkan-drivers for lavapipe)" : "";
}

// A Buffer with its Vulkan objects; data stays null (see vulkan_backend.h).
struct VkBuf : Buffer {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceMemory memory = VK_NULL_HANDLE;
};

// One descriptor of a dispatch: a whole buffer, or (a weight's window) `range` bytes of it from `offset`.
struct Binding {
    Binding(const Buffer* b) : buf(b) {}  // NOLINT(google-explicit-constructor): dispatch's lists of whole buffers
    Binding(const Buffer* b, uint64_t off, uint64_t r) : buf(b), offset(off), range(r) {}
    const Buffer* buf;
    uint64_t offset = 0;
    uint64_t range = VK_WHOLE_SIZE;
};

// Rows [row0, row0 + rows) of a weight, bound from byte `offset` of its buffer for `range` bytes; `skip`: the bytes
// from `offset` to the first row (the offset is aligned down to minStorageBufferOffsetAlignment).
struct WeightWindow {
    int64_t row0, rows;
    Binding binding;
    size_t skip;
};

// The host memory the driver allocates for the device (its VkAllocationCallbacks), counted per thread, so that a test
// can tell the driver's own allocations on a thread (lavapipe allocates a record in every vkQueueSubmit) from
// tracelm's; the driver's worker threads allocate on their own. Each block keeps
// its size and its distance from malloc's pointer just before it, for reallocation and release.
struct DriverAllocator {
    static thread_local uint64_t allocations_on_this_thread;
    struct Header {
        size_t size, offset;
    };
    static void* allocate(void*, size_t size, size_t align, VkSystemAllocationScope) {
        ++allocations_on_this_thread;
        align = std::max(align, alignof(std::max_align_t));
        auto* raw = static_cast<unsigned char*>(std::malloc(size + align + sizeof(Header)));
        if (raw == nullptr) return nullptr;
        const uintptr_t first = reinterpret_cast<uintptr_t>(raw) + sizeof(Header);
        auto* p = reinterpret_cast<unsigned char*>((first + align - 1) / align * align);
        const Header h{size, static_cast<size_t>(p - raw)};
        std::memcpy(p - sizeof(Header), &h, sizeof(Header));
        return p;
    }
    static Header header(void* p) {
        Header h;
        std::memcpy(&h, static_cast<unsigned char*>(p) - sizeof(Header), sizeof(Header));
        return h;
    }
    static void release(void*, void* p) {
        if (p != nullptr) std::free(static_cast<unsigned char*>(p) - header(p).offset);
    }
    static void* reallocate(void* user, void* old, size_t size, size_t align, VkSystemAllocationScope scope) {
        if (size == 0) {
            release(user, old);
            return nullptr;
        }
        void* p = allocate(user, size, align, scope);
        if (p != nullptr && old != nullptr) {
            std::memcpy(p, old, std::min(size, header(old).size));
            release(user, old);
        }
        return p;
    }
    VkAllocationCallbacks callbacks() { return {this, allocate, reallocate, release, nullptr, nullptr}; }
};
thread_local uint64_t DriverAllocator::allocations_on_this_thread = 0;

struct VulkanBackend::Impl {
    DriverAllocator driver_allocator;  // before the device, which it outlives
    VkAllocationCallbacks driver_callbacks = driver_allocator.callbacks();
    VkInstance instance = VK_NULL_HANDLE;
    VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
    VkPhysicalDevice physical = VK_NULL_HANDLE;
    VkDevice device = VK_NULL_HANDLE;
    VkQueue queue = VK_NULL_HANDLE;
    uint32_t family = 0;
    std::string name;
    VkPhysicalDeviceMemoryProperties memory_props{};
    uint64_t max_binding_bytes = 0;  // maxStorageBufferRange: a shader sees at most this much of one buffer
    uint64_t binding_align = 1;      // minStorageBufferOffsetAlignment: where a window of a buffer may start
    uint64_t max_alloc_bytes = 0;    // maxMemoryAllocationSize: the largest buffer the device makes
    bool f64 = false;                // shaderFloat64, which the quantized matmul needs
    uint64_t heap_bytes = 0;         // device_local_bytes(): memory_capacity()
    PFN_vkCmdPushDescriptorSetKHR push_descriptors = nullptr;

    mutable std::mutex messages_mutex;  // the layer may call back from its own threads
    std::vector<std::string> messages;
    bool validation = false;

    VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
    VkPipelineLayout layout = VK_NULL_HANDLE;
    // Pipelines by shader name and specialisation constants, made on first use.
    std::map<std::pair<std::string, std::vector<uint32_t>>, VkPipeline> pipelines;
    std::map<std::string, VkShaderModule> modules;

    VkCommandPool pool = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;  // wait()'s
    uint64_t wait_timeout_ns = 0;
    // The command buffer ops record into: the open eager batch, or the capture's.
    VkCommandBuffer recording = VK_NULL_HANDLE;
    size_t recorded_nodes = 0;
    // Buffers the ops recorded since the last barrier read and wrote: the next op needs a barrier only when it
    // reads or writes what they wrote, or writes what they read (independent ops, as q/k/v, run without one).
    std::set<VkBuffer> read_since, written_since;
    std::vector<VkCommandBuffer> submitted;  // eager batches the queue may still run

    std::vector<std::unique_ptr<VkBuf>> buffers;
    std::vector<std::unique_ptr<VkBuf>> held;  // freed while a graph was alive: it may still refer to them
    VkBuf staging;
    void* staging_map = nullptr;
    size_t staging_bytes = 0;

    struct Graph {
        VkCommandBuffer cb = VK_NULL_HANDLE;
        size_t nodes = 0;
    };
    std::vector<Graph> graphs;
    int live_graphs = 0;

    // x quantized to Q8_0 blocks for a quantized matmul, grown by eager calls (a capture cannot allocate).
    Buffer* xq = nullptr;

    // RoPE frequency factors by value, one device buffer each, made by eager calls (a capture cannot upload).
    std::map<std::vector<float>, Buffer*> rope_factors;

    // Also after a constructor that failed half way: each object is destroyed only if it was made.
    ~Impl() {
        if (device != VK_NULL_HANDLE) {
            // Errors are ignored: nothing can be done about them in a destructor.
            vkDeviceWaitIdle(device);
            for (auto& [key, p] : pipelines) vkDestroyPipeline(device, p, nullptr);
            pipelines.clear();
            for (auto& [key, s] : modules) vkDestroyShaderModule(device, s, nullptr);
            modules.clear();
            for (auto& b : buffers) destroy_buffer(*b);
            for (auto& b : held) destroy_buffer(*b);
            buffers.clear();
            held.clear();
            if (staging_map != nullptr) destroy_buffer(staging);
            staging_map = nullptr;
            if (pool != VK_NULL_HANDLE) vkDestroyCommandPool(device, pool, nullptr);  // frees its command buffers
            if (fence != VK_NULL_HANDLE) vkDestroyFence(device, fence, nullptr);
            if (layout != VK_NULL_HANDLE) vkDestroyPipelineLayout(device, layout, nullptr);
            if (set_layout != VK_NULL_HANDLE) vkDestroyDescriptorSetLayout(device, set_layout, nullptr);
            vkDestroyDevice(device, &driver_callbacks);
            device = VK_NULL_HANDLE;
        }
        if (messenger != VK_NULL_HANDLE) {
            auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
                vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
            destroy(instance, messenger, nullptr);
            messenger = VK_NULL_HANDLE;
        }
        if (instance != VK_NULL_HANDLE) vkDestroyInstance(instance, nullptr);
        instance = VK_NULL_HANDLE;
    }
    Impl() = default;
    Impl(const Impl&) = delete;
    Impl& operator=(const Impl&) = delete;

    static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                     VkDebugUtilsMessageTypeFlagsEXT,
                                                     const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
        auto* self = static_cast<Impl*>(user);
        const char* level = severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "error" : "warning";
        std::lock_guard<std::mutex> lock(self->messages_mutex);
        self->messages.push_back(std::string(level) + ": " + (data->pMessage ? data->pMessage : ""));
        return VK_FALSE;
    }

    uint32_t memory_type(uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags fallback) const {
        for (VkMemoryPropertyFlags flags : {want, fallback})
            for (uint32_t i = 0; i < memory_props.memoryTypeCount; ++i)
                if ((bits & (1u << i)) != 0 && (memory_props.memoryTypes[i].propertyFlags & flags) == flags) return i;
        throw std::runtime_error("vulkan: no suitable memory type");
    }

    void make_buffer(VkBuf& b, size_t bytes, VkMemoryPropertyFlags want, VkMemoryPropertyFlags fallback) {
        VkBufferCreateInfo ci{};
        ci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
        // A Vulkan buffer cannot be empty, and vkCmdFillBuffer works in whole words.
        ci.size = (std::max<size_t>(bytes, 4) + 3) / 4 * 4;
        ci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
        ci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
        check(vkCreateBuffer(device, &ci, nullptr, &b.buffer), "create buffer");
        VkMemoryRequirements req{};
        vkGetBufferMemoryRequirements(device, b.buffer, &req);
        VkMemoryAllocateInfo ai{};
        ai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
        ai.allocationSize = req.size;
        ai.memoryTypeIndex = memory_type(req.memoryTypeBits, want, fallback);
        const VkResult r = vkAllocateMemory(device, &ai, nullptr, &b.memory);
        if (r != VK_SUCCESS) {
            vkDestroyBuffer(device, b.buffer, nullptr);
            b.buffer = VK_NULL_HANDLE;
            throw std::runtime_error("vulkan backend: cannot allocate " + std::to_string(bytes) + " bytes for '" +
                                     b.name + "' (VkResult " + std::to_string(r) + ")");
        }
        check(vkBindBufferMemory(device, b.buffer, b.memory, 0), "bind buffer memory");
    }

    void destroy_buffer(VkBuf& b) {
        vkDestroyBuffer(device, b.buffer, nullptr);
        vkFreeMemory(device, b.memory, nullptr);
    }

    VkCommandBuffer new_command_buffer(VkCommandBufferUsageFlags usage) {
        VkCommandBufferAllocateInfo ai{};
        ai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
        ai.commandPool = pool;
        ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        ai.commandBufferCount = 1;
        VkCommandBuffer cb = VK_NULL_HANDLE;
        check(vkAllocateCommandBuffers(device, &ai, &cb), "allocate command buffer");
        VkCommandBufferBeginInfo bi{};
        bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
        bi.flags = usage;
        check(vkBeginCommandBuffer(cb, &bi), "begin command buffer");
        return cb;
    }

    // Orders everything before it (earlier commands and earlier submissions to the queue) before everything after it.
    static void barrier(VkCommandBuffer cb) {
        VkMemoryBarrier mb{};
        mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
        mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
        mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                           VK_ACCESS_TRANSFER_WRITE_BIT;
        const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
        vkCmdPipelineBarrier(cb, stages, stages, 0, 1, &mb, 0, nullptr, 0, nullptr);
    }

    // A new command buffer to record ops into; its first barrier orders it after everything submitted before it.
    void begin_recording(VkCommandBufferUsageFlags usage) {
        recording = new_command_buffer(usage);
        barrier(recording);
        read_since.clear();
        written_since.clear();
        recorded_nodes = 0;
    }

    // The command buffer the next op (reading `reads`, writing `writes`) records into, after a barrier where it
    // depends on an op since the last one.
    VkCommandBuffer next_op(const std::vector<VkBuffer>& reads, const std::vector<VkBuffer>& writes) {
        if (recording == VK_NULL_HANDLE) begin_recording(VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
        bool hazard = false;
        for (VkBuffer b : reads) hazard = hazard || written_since.count(b) != 0;
        for (VkBuffer b : writes) hazard = hazard || written_since.count(b) != 0 || read_since.count(b) != 0;
        if (hazard) {
            barrier(recording);
            read_since.clear();
            written_since.clear();
        }
        read_since.insert(reads.begin(), reads.end());
        written_since.insert(writes.begin(), writes.end());
        ++recorded_nodes;
        return recording;
    }

    void submit(VkCommandBuffer cb) {
        VkSubmitInfo si{};
        si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
        si.commandBufferCount = 1;
        si.pCommandBuffers = &cb;
        check(vkQueueSubmit(queue, 1, &si, VK_NULL_HANDLE), "queue submit");
    }

    // Submits the open eager batch, without waiting for it.
    void flush() {
        if (recording == VK_NULL_HANDLE) return;
        check(vkEndCommandBuffer(recording), "end command buffer");
        submitted.push_back(recording);
        recording = VK_NULL_HANDLE;
        recorded_nodes = 0;
        submit(submitted.back());
    }

    // Submits the open batch and waits for the queue to run everything submitted: a fence after it all, waited at
    // most wait_timeout_ns, so that a lost or hung device is an error here, never a hang.
    void wait() {
        flush();
        check(vkResetFences(device, 1, &fence), "reset fence");
        check(vkQueueSubmit(queue, 0, nullptr, fence), "queue submit");
        const VkResult r = vkWaitForFences(device, 1, &fence, VK_TRUE, wait_timeout_ns);
        if (r == VK_TIMEOUT)
            throw std::runtime_error("Vulkan device '" + name + "' did not finish its work within " +
                                     std::to_string(wait_timeout_ns / 1000000) + " ms (hung or lost)");
        check(r, "wait for the queue");
        if (!submitted.empty())
            vkFreeCommandBuffers(device, pool, static_cast<uint32_t>(submitted.size()), submitted.data());
        submitted.clear();
    }

    // One transfer between bytes [at, at + n) of a tensor and the staging buffer, run to completion.
    void staged_copy(const Tensor& t, size_t at, size_t n, bool to_device) {
        flush();
        VkCommandBuffer cb = new_command_buffer(VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
        barrier(cb);
        const auto& b = static_cast<const VkBuf&>(*t.buf);
        VkBufferCopy region{0, t.offset + at, n};
        if (to_device) {
            vkCmdCopyBuffer(cb, staging.buffer, b.buffer, 1, &region);
        } else {
            std::swap(region.srcOffset, region.dstOffset);
            vkCmdCopyBuffer(cb, b.buffer, staging.buffer, 1, &region);
            // Makes the copy visible to the host's reads of the mapped staging memory.
            VkMemoryBarrier mb{};
            mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
            mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
            mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
            vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr,
                                 0, nullptr);
        }
        check(vkEndCommandBuffer(cb), "end command buffer");
        submitted.push_back(cb);
        submit(cb);
        wait();
    }

    void ensure_staging(size_t bytes) {
        if (bytes <= staging_bytes) return;
        if (staging_map != nullptr) {
            vkUnmapMemory(device, staging.memory);
            destroy_buffer(staging);
        }
        staging.name = "vulkan.staging";
        make_buffer(staging, bytes, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                    VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
        check(vkMapMemory(device, staging.memory, 0, VK_WHOLE_SIZE, 0, &staging_map), "map staging memory");
        staging_bytes = bytes;
    }

    VkPipeline pipeline(const std::string& shader, const std::vector<uint32_t>& spec) {
        const auto key = std::make_pair(shader, spec);
        if (auto it = pipelines.find(key); it != pipelines.end()) return it->second;
        VkShaderModule& module = modules[shader];
        if (module == VK_NULL_HANDLE) {
            const auto all = shaders();
            const auto code = std::find_if(all.begin(), all.end(), [&](const ShaderCode& s) { return shader == s.name; });
            if (code == all.end()) throw std::logic_error("vulkan: no shader '" + shader + "'");
            VkShaderModuleCreateInfo ci{};
            ci.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
            ci.codeSize = code->count * sizeof(uint32_t);
            ci.pCode = code->words;
            check(vkCreateShaderModule(device, &ci, nullptr, &module), "create shader module");
        }
        std::vector<VkSpecializationMapEntry> entries;
        for (uint32_t i = 0; i < spec.size(); ++i) entries.push_back({i, i * 4u, 4u});
        VkSpecializationInfo si{static_cast<uint32_t>(entries.size()), entries.data(), spec.size() * 4u, spec.data()};
        VkComputePipelineCreateInfo ci{};
        ci.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
        ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
        ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
        ci.stage.module = module;
        ci.stage.pName = "main";
        ci.stage.pSpecializationInfo = spec.empty() ? nullptr : &si;
        ci.layout = layout;
        VkPipeline p = VK_NULL_HANDLE;
        check(vkCreateComputePipelines(device, VK_NULL_HANDLE, 1, &ci, nullptr, &p), "create compute pipeline");
        pipelines.emplace(key, p);
        return p;
    }

    // A weight's rows in windows that each fit one binding: a single window (the whole buffer, skip = the tensor's
    // offset) when the buffer fits. A window starts at a row, aligned down to minStorageBufferOffsetAlignment, and
    // each row lies in one window, so a split dispatch forms every output from the same bytes in the same order as a
    // whole one (the results are the same bits).
    std::vector<WeightWindow> weight_windows(const Tensor& w, const char* op) const {
        if (w.offset % 2 != 0) throw std::invalid_argument("vulkan: tensor '" + w.name() + "' is not aligned for its shader");
        if (w.buf->bytes <= max_binding_bytes) return {{0, w.rows, Binding(w.buf), w.offset}};
        const uint64_t row = w.row_bytes();
        // Room for the alignment slack and the word the last row's bytes may end inside.
        const uint64_t fit = max_binding_bytes > binding_align + 4 ? (max_binding_bytes - binding_align - 4) / row : 0;
        if (fit == 0)
            throw std::runtime_error(std::string("vulkan ") + op + ": a row of '" + w.name() + "' (" +
                                     std::to_string(row) + " bytes) is more than '" + name + "' binds to a shader (" +
                                     std::to_string(max_binding_bytes) + ")");
        const uint64_t buffer_size = (std::max<uint64_t>(w.buf->bytes, 4) + 3) / 4 * 4;  // make_buffer's
        std::vector<WeightWindow> out;
        for (int64_t r0 = 0; r0 < w.rows; r0 += static_cast<int64_t>(fit)) {
            const int64_t rows = std::min<int64_t>(static_cast<int64_t>(fit), w.rows - r0);
            const uint64_t start = w.offset + static_cast<uint64_t>(r0) * row;
            const uint64_t offset = start / binding_align * binding_align;
            const uint64_t range =
                std::min(buffer_size - offset, (start - offset + static_cast<uint64_t>(rows) * row + 3) / 4 * 4);
            out.push_back({r0, rows, Binding(w.buf, offset, range), static_cast<size_t>(start - offset)});
        }
        return out;
    }

    // Records one dispatch of `shader` over groups (x, y, z) with its buffers bound in order (whole buffers, tensor
    // offsets in the push constants, so no offset needs the device's storage-buffer alignment; a weight larger than
    // a binding is bound in windows, see weight_windows); bit i of `written` says the shader writes binding i.
    template <typename Push>
    void dispatch(const std::string& shader, const std::vector<uint32_t>& spec, std::initializer_list<Binding> bufs,
                  uint32_t written, const Push& push, uint32_t x, uint32_t y = 1, uint32_t z = 1) {
        static_assert(sizeof(Push) <= kPushBytes && sizeof(Push) % 4 == 0);
        if (bufs.size() > kBindings) throw std::logic_error("vulkan: too many buffers for one dispatch");
        if (x == 0 || y == 0 || z == 0) return;
        std::vector<VkDescriptorBufferInfo> infos;
        std::vector<VkBuffer> reads, written_buffers;
        for (const Binding& b : bufs) {
            // A whole buffer past the limit cannot be bound: only the weight readers split their work by windows.
            if (b.range == VK_WHOLE_SIZE && b.buf->bytes > max_binding_bytes)
                throw std::runtime_error("vulkan " + shader + ": '" + b.buf->name + "' has " +
                                         std::to_string(b.buf->bytes) + " bytes, more than '" + name +
                                         "' binds to a shader (" + std::to_string(max_binding_bytes) +
                                         "); only the weights of embedding, matmul, matmuls and glu_matmul are bound "
                                         "in windows, not activations or KV caches");
            const VkBuffer vb = static_cast<const VkBuf*>(b.buf)->buffer;
            ((written >> infos.size()) & 1u ? written_buffers : reads).push_back(vb);
            infos.push_back({vb, b.offset, b.range});
        }
        VkPipeline p = pipeline(shader, spec);
        VkCommandBuffer cb = next_op(reads, written_buffers);
        std::vector<VkWriteDescriptorSet> writes;
        for (uint32_t i = 0; i < infos.size(); ++i) {
            VkWriteDescriptorSet w{};
            w.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
            w.dstBinding = i;
            w.descriptorCount = 1;
            w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
            w.pBufferInfo = &infos[i];
            writes.push_back(w);
        }
        vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p);
        push_descriptors(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, static_cast<uint32_t>(writes.size()),
                         writes.data());
        vkCmdPushConstants(cb, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(Push), &push);
        vkCmdDispatch(cb, x, y, z);
    }
};

namespace {

// A tensor's offset in elements of `unit` bytes, as the shaders index their arrays.
uint32_t at(const Tensor& t, size_t unit) {
    if (t.offset % unit != 0) throw std::invalid_argument("vulkan: tensor '" + t.name() + "' is not aligned for its shader");
    return static_cast<uint32_t>(t.offset / unit);
}
uint32_t words(const Tensor& t) { return at(t, 4); }
// Weights are indexed in 16-bit halves whatever their type (shaders/common.glsl: weight_at).
uint32_t halves(const Tensor& t) { return at(t, 2); }

uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }

// Rows of an op that takes one workgroup row (y) per tensor row.
uint32_t rows_of(int64_t rows, const char* op) {
    if (rows > 65535) throw std::invalid_argument(std::string("vulkan ") + op + ": more than 65535 rows in one call");
    return u32(rows);
}

// Workgroup counts for n items of groups of `size`, spread over x and y where one dimension's limit (65535, the
// minimum every device offers) is too small; the shaders recover the index as y * 65535 + x.
constexpr uint32_t kMaxGroups = 65535;
std::pair<uint32_t, uint32_t> groups(int64_t n, int64_t size) {
    const auto g = static_cast<uint32_t>((n + size - 1) / size);
    return g <= kMaxGroups ? std::make_pair(g, 1u) : std::make_pair(kMaxGroups, (g + kMaxGroups - 1) / kMaxGroups);
}

}  // namespace

VulkanBackend::VulkanBackend(const VulkanOptions& options) : impl_(std::make_unique<Impl>()) {
    Impl& m = *impl_;
    m.validation = options.validation || env_validation();
    m.instance = make_instance(m.validation);
    {
        if (m.validation) {
            VkDebugUtilsMessengerCreateInfoEXT ci{};
            ci.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
            ci.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
            ci.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                             VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
            ci.pfnUserCallback = Impl::on_message;
            ci.pUserData = &m;
            auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
                vkGetInstanceProcAddr(m.instance, "vkCreateDebugUtilsMessengerEXT"));
            if (create == nullptr) throw std::runtime_error("Vulkan validation: no VK_EXT_debug_utils");
            check(create(m.instance, &ci, nullptr, &m.messenger), "create debug messenger");
        }
        const auto devices = physical_devices(m.instance);
        if (devices.empty()) throw std::runtime_error("no Vulkan device: the loader found none");
        if (options.device < 0 || static_cast<size_t>(options.device) >= devices.size())
            throw std::runtime_error("no Vulkan device " + std::to_string(options.device) + " (there are " +
                                     std::to_string(devices.size()) + "; `tracelm devices` lists them)");
        m.physical = devices[static_cast<size_t>(options.device)];
        m.heap_bytes = device_local_bytes(m.physical);
        VkPhysicalDeviceProperties props{};
        vkGetPhysicalDeviceProperties(m.physical, &props);
        m.name = props.deviceName;
        m.max_binding_bytes = props.limits.maxStorageBufferRange;
        if (options.max_binding_bytes != 0) m.max_binding_bytes = std::min<uint64_t>(m.max_binding_bytes, options.max_binding_bytes);
        m.binding_align = std::max<uint64_t>(props.limits.minStorageBufferOffsetAlignment, 4);
        // maxMemoryAllocationSize (Vulkan 1.1): a buffer may be larger than a binding, not larger than this.
        VkPhysicalDeviceMaintenance3Properties m3{};
        m3.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES;
        VkPhysicalDeviceProperties2 props2{};
        props2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
        props2.pNext = &m3;
        vkGetPhysicalDeviceProperties2(m.physical, &props2);
        m.max_alloc_bytes = m3.maxMemoryAllocationSize;
        vkGetPhysicalDeviceMemoryProperties(m.physical, &m.memory_props);
        const int family = compute_family(m.physical);
        if (family < 0) throw std::runtime_error("Vulkan device '" + m.name + "' has no compute queue");
        if (props.limits.maxPerStageDescriptorStorageBuffers < kBindings)
            throw std::runtime_error("Vulkan device '" + m.name + "' binds fewer than " + std::to_string(kBindings) +
                                     " storage buffers per shader");
        if (!has_extension(m.physical, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME))
            throw std::runtime_error("Vulkan device '" + m.name + "' lacks " VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
        m.family = static_cast<uint32_t>(family);

        const float priority = 1.0f;
        VkDeviceQueueCreateInfo qi{};
        qi.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
        qi.queueFamilyIndex = m.family;
        qi.queueCount = 1;
        qi.pQueuePriorities = &priority;
        const char* ext = VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME;
        VkPhysicalDeviceFeatures supported{}, enabled{};
        vkGetPhysicalDeviceFeatures(m.physical, &supported);
        enabled.shaderFloat64 = supported.shaderFloat64;
        m.f64 = supported.shaderFloat64 == VK_TRUE;
        VkDeviceCreateInfo di{};
        di.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
        di.queueCreateInfoCount = 1;
        di.pQueueCreateInfos = &qi;
        di.enabledExtensionCount = 1;
        di.ppEnabledExtensionNames = &ext;
        di.pEnabledFeatures = &enabled;
        check(vkCreateDevice(m.physical, &di, &m.driver_callbacks, &m.device), "create device");
        vkGetDeviceQueue(m.device, m.family, 0, &m.queue);
        m.push_descriptors =
            reinterpret_cast<PFN_vkCmdPushDescriptorSetKHR>(vkGetDeviceProcAddr(m.device, "vkCmdPushDescriptorSetKHR"));

        VkDescriptorSetLayoutBinding bindings[kBindings]{};
        for (uint32_t i = 0; i < kBindings; ++i)
            bindings[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
        VkDescriptorSetLayoutCreateInfo li{};
        li.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
        li.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR;
        li.bindingCount = kBindings;
        li.pBindings = bindings;
        check(vkCreateDescriptorSetLayout(m.device, &li, nullptr, &m.set_layout), "create descriptor set layout");
        VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes};
        VkPipelineLayoutCreateInfo pi{};
        pi.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
        pi.setLayoutCount = 1;
        pi.pSetLayouts = &m.set_layout;
        pi.pushConstantRangeCount = 1;
        pi.pPushConstantRanges = &range;
        check(vkCreatePipelineLayout(m.device, &pi, nullptr, &m.layout), "create pipeline layout");
        VkCommandPoolCreateInfo ci{};
        ci.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
        ci.queueFamilyIndex = m.family;
        check(vkCreateCommandPool(m.device, &ci, nullptr, &m.pool), "create command pool");
        VkFenceCreateInfo fi{};
        fi.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
        check(vkCreateFence(m.device, &fi, nullptr, &m.fence), "create fence");
        m.wait_timeout_ns = static_cast<uint64_t>(options.wait_timeout_s * 1e9);
    }
}

VulkanBackend::~VulkanBackend() = default;

std::string VulkanBackend::device_name() const { return impl_->name; }
bool VulkanBackend::validation() const { return impl_->validation; }

uint64_t VulkanBackend::driver_allocations_on_this_thread() { return DriverAllocator::allocations_on_this_thread; }

std::vector<std::string> VulkanBackend::validation_messages() const {
    std::lock_guard<std::mutex> lock(impl_->messages_mutex);
    return impl_->messages;
}

// ---- memory ----

Buffer* VulkanBackend::do_alloc(size_t bytes, const std::string& name) {
    // A buffer may exceed what one binding shows a shader (weights are bound in windows; a shader given a whole
    // activation or KV buffer past the limit refuses in dispatch), not what the device allocates at once.
    if (bytes > impl_->max_alloc_bytes)
        throw std::runtime_error("vulkan backend: '" + name + "' needs " + std::to_string(bytes) + " bytes, more than '" +
                                 impl_->name + "' allocates at once (maxMemoryAllocationSize " +
                                 std::to_string(impl_->max_alloc_bytes) + ")");
    auto b = std::make_unique<VkBuf>();
    b->name = name;
    b->bytes = bytes;
    impl_->make_buffer(*b, bytes, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
    // Zeroed, as the interface promises; ordered before any later op by its barrier, so nothing waits here.
    vkCmdFillBuffer(impl_->next_op({}, {b->buffer}), b->buffer, 0, VK_WHOLE_SIZE, 0);
    impl_->buffers.push_back(std::move(b));
    return impl_->buffers.back().get();
}

void VulkanBackend::do_free(Buffer* b) {
    Impl& m = *impl_;
    auto it = std::find_if(m.buffers.begin(), m.buffers.end(), [&](const auto& p) { return p.get() == b; });
    if (it == m.buffers.end()) throw std::invalid_argument("vulkan backend: free of unknown buffer");
    if (m.live_graphs > 0) {
        m.held.push_back(std::move(*it));
    } else {
        m.wait();  // the queue may still use it
        m.destroy_buffer(**it);
    }
    m.buffers.erase(it);
}

void VulkanBackend::do_upload(const Tensor& dst, const void* src) {
    impl_->wait();  // the staging buffer may still be read by an earlier transfer
    impl_->ensure_staging(std::min(dst.nbytes(), kStagingBytes));
    for (size_t at = 0; at < dst.nbytes(); at += kStagingBytes) {
        const size_t n = std::min(kStagingBytes, dst.nbytes() - at);
        std::memcpy(impl_->staging_map, static_cast<const char*>(src) + at, n);
        impl_->staged_copy(dst, at, n, true);
    }
}

void VulkanBackend::do_download(const Tensor& src, void* dst) {
    impl_->wait();
    impl_->ensure_staging(std::min(src.nbytes(), kStagingBytes));
    for (size_t at = 0; at < src.nbytes(); at += kStagingBytes) {
        const size_t n = std::min(kStagingBytes, src.nbytes() - at);
        impl_->staged_copy(src, at, n, false);
        std::memcpy(static_cast<char*>(dst) + at, impl_->staging_map, n);
    }
}

void VulkanBackend::do_synchronize() { impl_->wait(); }

// ---- graphs ----

void VulkanBackend::do_begin_capture() {
    Impl& m = *impl_;
    m.flush();
    // Simultaneous use: a replay may be submitted while the previous one still runs (replay does not wait).
    m.begin_recording(VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT);
}

GraphId VulkanBackend::do_end_capture() {
    Impl& m = *impl_;
    check(vkEndCommandBuffer(m.recording), "end capture");
    m.graphs.push_back({m.recording, m.recorded_nodes});
    m.recording = VK_NULL_HANDLE;
    m.recorded_nodes = 0;
    ++m.live_graphs;
    return static_cast<GraphId>(m.graphs.size() - 1);
}

void VulkanBackend::do_replay(GraphId g) {
    Impl& m = *impl_;
    if (g < 0 || static_cast<size_t>(g) >= m.graphs.size() || m.graphs[static_cast<size_t>(g)].cb == VK_NULL_HANDLE)
        throw std::invalid_argument("replay of unknown graph");
    m.flush();
    m.submit(m.graphs[static_cast<size_t>(g)].cb);
}

void VulkanBackend::do_destroy_graph(GraphId g) {
    Impl& m = *impl_;
    if (g < 0 || static_cast<size_t>(g) >= m.graphs.size() || m.graphs[static_cast<size_t>(g)].cb == VK_NULL_HANDLE)
        throw std::invalid_argument("destroy of unknown graph");
    m.wait();  // it may still be running
    vkFreeCommandBuffers(m.device, m.pool, 1, &m.graphs[static_cast<size_t>(g)].cb);
    m.graphs[static_cast<size_t>(g)] = {};
    if (--m.live_graphs == 0) {
        for (auto& b : m.held) m.destroy_buffer(*b);
        m.held.clear();
    }
}

std::optional<size_t> VulkanBackend::memory_capacity() const { return static_cast<size_t>(impl_->heap_bytes); }

size_t VulkanBackend::graph_nodes(GraphId g) const { return impl_->graphs.at(static_cast<size_t>(g)).nodes; }

// ---- ops ----

void VulkanBackend::do_copy(const Tensor& dst, const Tensor& src) {
    if (dst.nbytes() == 0) return;
    VkBufferCopy region{src.offset, dst.offset, dst.nbytes()};
    const VkBuffer from = static_cast<const VkBuf*>(src.buf)->buffer, to = static_cast<const VkBuf*>(dst.buf)->buffer;
    vkCmdCopyBuffer(impl_->next_op({from}, {to}), from, to, 1, &region);
}

void VulkanBackend::do_add(const Tensor& a, const Tensor& b, const Tensor& out) {
    struct {
        uint32_t a, b, out, n;
    } push{words(a), words(b), words(out), u32(out.numel())};
    const auto [x, y] = groups(out.numel(), 256);
    impl_->dispatch("add", {}, {a.buf, b.buf, out.buf}, 0b100, push, x, y);
}

// A table past one binding is read in windows of rows (weight_windows); each window's dispatch writes the rows of
// the ids in it, and the first one the zero rows of ids outside the table.
void VulkanBackend::do_embedding(const Tensor& ids, const Tensor& table, float scale, const Tensor& out) {
    for (const WeightWindow& win : impl_->weight_windows(table, "embedding")) {
        struct {
            uint32_t ids, table, out, rows, cols, row_bytes;
            float scale;
            uint32_t row0, all_rows;
        } push{words(ids),  u32(static_cast<int64_t>(win.skip / 2)), words(out), u32(win.rows), u32(table.cols),
               u32(table.row_bytes()), scale, u32(win.row0), u32(table.rows)};
        impl_->dispatch("embedding", {weight_code(table.dtype)}, {ids.buf, win.binding, out.buf}, 0b100, push,
                        groups(out.cols, 256).first, rows_of(out.rows, "embedding"));
    }
}

void VulkanBackend::do_rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) {
    struct {
        uint32_t x, delta, w, out, cols;
        float eps;
    } push{words(x), 0, halves(w), words(out), u32(x.cols), eps};
    const auto [gx, gy] = groups(x.rows, 1);
    impl_->dispatch("rms_norm", {weight_code(w.dtype), 0}, {x.buf, x.buf, w.buf, out.buf}, 0b1000, push, gx, gy);
}

void VulkanBackend::do_add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps, const Tensor& out) {
    struct {
        uint32_t x, delta, w, out, cols;
        float eps;
    } push{words(x), words(delta), halves(w), words(out), u32(x.cols), eps};
    const auto [gx, gy] = groups(x.rows, 1);
    impl_->dispatch("rms_norm", {weight_code(w.dtype), 1}, {x.buf, delta.buf, w.buf, out.buf}, 0b1001, push, gx, gy);
}

// batch_rows picks ggml's summation order on the CPU (quant.h): the 32-element types have one, which matmul_q.comp
// follows; the K types two, both in matmul_qk.comp. The float weights' numbers are this backend's own.
void VulkanBackend::do_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out,
                              int64_t batch_rows) {
    if (dtype_is_quantized(w.dtype)) {
        quantized_matmul(x, w, bias, out, batch_rows);
        return;
    }
    // A weight past one binding is read in windows of rows (weight_windows): outputs n0 .. n0 + rows - 1 of each.
    for (const WeightWindow& win : impl_->weight_windows(w, "matmul")) {
        struct {
            uint32_t x, w, bias, y, T, K, N, has_bias, n0, rows;
        } push{words(x),   u32(static_cast<int64_t>(win.skip / 2)), bias ? words(*bias) : 0, words(out), u32(x.rows),
               u32(x.cols), u32(w.rows), bias ? 1u : 0u, u32(win.row0), u32(win.rows)};
        const auto [gx, gy] = groups(win.rows, 64);
        impl_->dispatch("matmul", {weight_code(w.dtype)}, {x.buf, win.binding, bias ? bias->buf : x.buf, out.buf},
                        0b1000, push, gx, gy);
    }
}

void VulkanBackend::quantized_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out,
                                     int64_t batch_rows) {
    Impl& m = *impl_;
    if (!m.f64)
        throw std::runtime_error("matmul: GGML block weights need shaderFloat64, which Vulkan device '" + m.name +
                                 "' lacks");
    const uint32_t type = weight_code(w.dtype);  // throws for the types without a shader
    // Activation blocks: Q8_0 / Q8_1 of 32 elements in 10 words, or (K types) Q8_K of 256 in 81 words.
    const bool k_type = dtype_block_elems(w.dtype) == 256;
    const int64_t blocks = x.rows * (x.cols / dtype_block_elems(w.dtype));
    const size_t need = static_cast<size_t>(blocks) * (k_type ? 81 : 10) * sizeof(uint32_t);
    if (m.xq == nullptr || m.xq->bytes < need) {
        if (capturing())
            throw std::logic_error("matmul: needs " + std::to_string(need) + " bytes of quantized activations that no "
                                   "eager call made; run the step eagerly before capturing it");
        free(m.xq);
        m.xq = alloc(need, "matmul.xq");
    }
    struct {
        uint32_t x, blocks;
    } qpush{words(x), u32(blocks)};
    const auto [qx, qy] = groups(blocks, 64);
    m.dispatch(k_type ? "quantize_q8_k" : "quantize_q8_0", {}, {x.buf, m.xq}, 0b10, qpush, qx, qy);
    const bool tiled = ggml_has_tiled_order(w.dtype) && batch_rows >= kGgmlTiledMinRows;
    const std::vector<uint32_t> spec = k_type ? std::vector<uint32_t>{type, tiled ? 1u : 0u} : std::vector<uint32_t>{type};
    // A weight past one binding is read in windows of rows (weight_windows): outputs n0 .. n0 + rows - 1 of each.
    for (const WeightWindow& win : m.weight_windows(w, "matmul")) {
        struct {
            uint32_t w, bias, y, K, N, has_bias, n0, rows;
        } push{u32(static_cast<int64_t>(win.skip)), bias ? words(*bias) : 0, words(out), u32(x.cols), u32(w.rows),
               bias ? 1u : 0u, u32(win.row0), u32(win.rows)};
        m.dispatch(k_type ? "matmul_qk" : "matmul_q", spec, {m.xq, win.binding, bias ? bias->buf : m.xq, out.buf},
                   0b1000, push, groups(win.rows, 64).first, rows_of(x.rows, "matmul"));
    }
}

void VulkanBackend::do_matmuls(const Tensor& x, std::span<const MatmulOut> outs, int64_t batch_rows) {
    for (const MatmulOut& o : outs) do_matmul(x, *o.w, o.bias, o.out, batch_rows);
}

void VulkanBackend::do_glu_matmul(const Tensor& gate, const Tensor& up, Activation act, const Tensor& w,
                                  const Tensor& out, int64_t batch_rows) {
    // gate is consumed (backend.h): the activation is formed in it, then multiplied.
    do_glu(gate, up, act, gate);
    do_matmul(gate, w, nullptr, out, batch_rows);
}

void VulkanBackend::do_glu(const Tensor& gate, const Tensor& up, Activation act, const Tensor& out) {
    struct {
        uint32_t gate, up, out, n;
    } push{words(gate), words(up), words(out), u32(out.numel())};
    const uint32_t code = act == Activation::Silu ? 0 : act == Activation::GeluTanh ? 1 : 2;
    const auto [gx, gy] = groups(out.numel(), 256);
    impl_->dispatch("glu", {code}, {gate.buf, up.buf, out.buf}, 0b100, push, gx, gy);
}

void VulkanBackend::rope(const Tensor& x, const Tensor& positions, int heads, int head_dim, const RopeSpec& rope,
                         float post_scale) {
    Impl& m = *impl_;
    const Buffer* factors = x.buf;  // bound but unread without factors
    if (!rope.factors.empty()) {
        std::vector<float> key(rope.factors.begin(), rope.factors.end());
        auto it = m.rope_factors.find(key);
        if (it == m.rope_factors.end()) {
            if (capturing())
                throw std::logic_error("rope_neox: these RoPE factors were not seen by an eager call; run the step "
                                       "eagerly before capturing it");
            Buffer* b = alloc(key.size() * sizeof(float), "rope.factors");
            upload(whole(b, DType::F32, 1, static_cast<int64_t>(key.size())), key.data());
            it = m.rope_factors.emplace(std::move(key), b).first;
        }
        factors = it->second;
    }
    struct {
        uint32_t x, pos, factors, heads, head_dim;
        float theta_scale, post_scale;
    } push{words(x), words(positions), 0, u32(heads), u32(head_dim), rope_theta_scale(rope.theta, head_dim), post_scale};
    const auto [gx, gy] = groups(x.rows, 1);
    m.dispatch("rope_neox", {rope.factors.empty() ? 0u : 1u}, {x.buf, positions.buf, factors}, 0b1, push, gx, gy);
}

void VulkanBackend::do_rope_neox(const Tensor& x, const Tensor& positions, int heads, int head_dim,
                                 const RopeSpec& rope, int head_stride) {
    if (head_stride != head_dim) not_implemented("rope_neox of part of each head");
    this->rope(x, positions, heads, head_dim, rope, 1.0f);
}

void VulkanBackend::do_kv_write(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const Tensor& k_cache,
                                const Tensor& v_cache) {
    const bool f16 = k_cache.dtype == DType::F16;
    if (f16 && k.cols % 2 != 0) throw std::invalid_argument("vulkan kv_write: an f16 cache row needs an even width");
    struct {
        uint32_t k, v, slots, kc, vc, cols, slot_count;
    } push{words(k), words(v), words(slot_mapping), words(k_cache), words(v_cache), u32(k.cols), u32(k_cache.rows)};
    impl_->dispatch("kv_write", {f16 ? 1u : 0u}, {k.buf, v.buf, slot_mapping.buf, k_cache.buf, v_cache.buf}, 0b11000, push,
                    groups(f16 ? k.cols / 2 : k.cols, 256).first, rows_of(k.rows, "kv_write"));
}

void VulkanBackend::do_qk_norm_rope_kv_write(const QkvPrologue& p) {
    if (p.q_norm != nullptr) {
        const Tensor qh = p.q.view(p.q.rows * p.heads, p.head_dim), kh = p.k.view(p.k.rows * p.kv_heads, p.head_dim);
        do_rms_norm(qh, *p.q_norm, p.eps, qh);
        do_rms_norm(kh, *p.k_norm, p.eps, kh);
    }
    rope(p.q, p.positions, p.heads, p.head_dim, p.rope, p.q_scale);
    rope(p.k, p.positions, p.kv_heads, p.head_dim, p.rope, 1.0f);
    do_kv_write(p.k, p.v, p.slot_mapping, p.k_cache, p.v_cache);
}

void VulkanBackend::do_argmax(const Tensor& logits, const Tensor& ids) {
    struct {
        uint32_t logits, ids, cols;
    } push{words(logits), words(ids), u32(logits.cols)};
    const auto [gx, gy] = groups(logits.rows, 1);
    impl_->dispatch("argmax", {}, {logits.buf, ids.buf}, 0b10, push, gx, gy);
}

void VulkanBackend::do_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                                 int heads, int kv_heads, int head_dim, float scale, const Tensor& out) {
    paged_attention(q, k_cache, v_cache, meta, nullptr, heads, kv_heads, head_dim, scale, out);
}


void VulkanBackend::do_sparse_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                        const AttentionMeta& meta, const Tensor& indices, int heads, int kv_heads,
                                        int head_dim, float scale, const Tensor& out) {
    paged_attention(q, k_cache, v_cache, meta, &indices, heads, kv_heads, head_dim, scale, out);
}

// One workgroup per row (dsa_topk.comp); the indices equal the CPU's (docs/dsa.md's rank order and tie rules).
void VulkanBackend::do_dsa_topk(const Tensor& scores, const Tensor& window_start, const Tensor& window_end,
                                const DsaTopkWorkspace&, const Tensor& indices) {
    struct {
        uint32_t scores, start, end, qsl, lens, idx, keys, topk, seqs;
    } push{words(scores), words(window_start), words(window_end), 0, 0, words(indices), u32(scores.cols),
           u32(indices.cols), 0};
    impl_->dispatch("dsa_topk", {0}, {scores.buf, window_start.buf, window_end.buf, scores.buf, scores.buf, indices.buf},
                    0b100000, push, rows_of(scores.rows, "dsa_topk"));
}

void VulkanBackend::do_dsa_topk_causal(const Tensor& scores, const AttentionMeta& meta, const DsaTopkWorkspace&,
                                       const Tensor& indices) {
    struct {
        uint32_t scores, start, end, qsl, lens, idx, keys, topk, seqs;
    } push{words(scores), 0, 0, words(meta.query_start_loc), words(meta.seq_lens), words(indices), u32(scores.cols),
           u32(indices.cols), u32(meta.num_seqs)};
    impl_->dispatch("dsa_topk", {1}, {scores.buf, scores.buf, scores.buf, meta.query_start_loc.buf, meta.seq_lens.buf,
                                      indices.buf},
                    0b100000, push, rows_of(scores.rows, "dsa_topk_causal"));
}

// DeepSeek's latent attention is not on this backend yet.
void VulkanBackend::do_cache_write(std::span<const Tensor>, const Tensor&, const Tensor&) {
    not_implemented("cache_write");
}
void VulkanBackend::do_mla_absorb(const Tensor&, const Tensor&, int, const Tensor&) { not_implemented("mla_absorb"); }
void VulkanBackend::do_mla_attention(const Tensor&, const Tensor&, const Tensor&, const AttentionMeta&, const Tensor*,
                                     int, float, const Tensor&) {
    not_implemented("mla_attention");
}

void VulkanBackend::paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                    const AttentionMeta& meta, const Tensor* indices, int heads, int kv_heads,
                                    int head_dim, float scale, const Tensor& out) {
    // f16 caches are read as f16 and summed in f32: this backend's own numbers, as the CUDA backend's (the CPU's
    // follow llama.cpp's, q and probabilities rounded to f16).
    const bool f16 = k_cache.dtype == DType::F16;
    const size_t unit = f16 ? 2 : 4;
    struct {
        uint32_t q, kc, vc, tables, lens, qsl, out;
        uint32_t seqs, max_blocks, block_size, heads, kv_heads, head_dim, window, slots;
        float scale;
        uint32_t indices, topk;
    } push{words(q), at(k_cache, unit), at(v_cache, unit), words(meta.block_tables), words(meta.seq_lens),
           words(meta.query_start_loc), words(out), u32(meta.num_seqs), u32(meta.block_tables.cols),
           u32(meta.block_size), u32(heads), u32(kv_heads), u32(head_dim), u32(meta.window), u32(k_cache.rows), scale,
           indices ? words(*indices) : 0, indices ? u32(indices->cols) : 0};
    impl_->dispatch("attention", {indices ? 1u : 0u, f16 ? 1u : 0u},
                    {q.buf, k_cache.buf, v_cache.buf, meta.block_tables.buf, meta.seq_lens.buf, meta.query_start_loc.buf,
                     out.buf, indices ? indices->buf : q.buf},
                    0b1000000, push, u32(heads), rows_of(q.rows, "attention"));
}

void VulkanBackend::do_gather_last(const Tensor& x, const Tensor& query_start_loc, const Tensor& out) {
    struct {
        uint32_t x, qsl, out, rows, cols;
    } push{words(x), words(query_start_loc), words(out), u32(x.rows), u32(x.cols)};
    impl_->dispatch("gather_last", {}, {x.buf, query_start_loc.buf, out.buf}, 0b100, push, groups(out.cols, 256).first,
                    rows_of(out.rows, "gather_last"));
}

namespace {
// decode_state.comp's push constants.
struct DecodePush {
    uint32_t sampled, ids, pos, slots, lens, tables, step, history;
    uint32_t seqs, max_blocks, block_size, history_rows;
};
}  // namespace

void VulkanBackend::do_advance_decode(const Tensor& sampled, const DecodeState& st) {
    const DecodePush push{words(sampled),         words(st.token_ids),    words(st.positions),
                          words(st.slot_mapping), words(st.seq_lens),     words(st.block_tables),
                          words(st.step),         words(st.history),      u32(st.token_ids.numel()),
                          u32(st.block_tables.cols), u32(st.block_size),  u32(st.history.rows)};
    // One workgroup: step is read by all its invocations before one of them advances it.
    impl_->dispatch("decode_state", {1},
                    {sampled.buf, st.token_ids.buf, st.positions.buf, st.slot_mapping.buf, st.seq_lens.buf,
                     st.block_tables.buf, st.step.buf, st.history.buf},
                    0b11011110, push, 1);
}

void VulkanBackend::do_kv_slots(const Tensor& positions, const Tensor& block_tables, int block_size,
                                const Tensor& slots) {
    // Unread bindings of the kv_slots variant are bound to `slots`.
    const DecodePush push{0, 0, words(positions), words(slots), 0, words(block_tables), 0, 0, u32(slots.numel()),
                          u32(block_tables.cols), u32(block_size), 0};
    const Buffer* s = slots.buf;
    impl_->dispatch("decode_state", {0}, {s, s, positions.buf, s, s, block_tables.buf, s, s}, 0b1000, push,
                    groups(slots.numel(), 64).first);
}

// sample.comp reads sampling::RowParams word by word, in its field order.
static_assert(sampling::kParamWords == 12 && offsetof(sampling::RowParams, forced) == 11 * 4);

void VulkanBackend::do_sample(const Tensor& logits, const SamplingIo& io, const Tensor& ids) {
    Impl& m = *impl_;
    // The draw is formed in f64, as on the CPU, so that seeded draws give the CPU's ids.
    if (!m.f64) throw std::runtime_error("sample: needs shaderFloat64, which Vulkan device '" + m.name + "' lacks");
    struct {
        uint32_t logits, params, counts, step, ids, logprobs, top_ids, vocab, step_offset, param_words, max_logprobs,
            count_mask;
    } push{words(logits),     words(io.params),  words(io.counts),    words(io.step),
           words(ids),        words(io.logprobs), words(io.top_ids),  u32(logits.cols),
           static_cast<uint32_t>(io.step_offset), u32(io.params.cols), u32(io.top_ids.cols),
           static_cast<uint32_t>(sampling::kCountMask)};
    const auto [gx, gy] = groups(logits.rows, 1);
    m.dispatch("sample", {},
               {logits.buf, io.params.buf, io.counts.buf, io.step.buf, ids.buf, io.logprobs.buf, io.top_ids.buf,
                io.ws.buffer},
               0b11110101, push, gx, gy);
}

void VulkanBackend::do_adjust_logits(const Tensor& logits, const LogitAdjustIo& io) {
    struct {
        uint32_t logits, flags, mask, bias_ids, bias_values, vocab, words, max_bias;
    } push{words(logits),  words(io.flags),       words(io.mask),    words(io.bias_ids), words(io.bias_values),
           u32(logits.cols), u32(io.mask.cols), u32(io.bias_ids.cols)};
    const auto [gx, gy] = groups(logits.rows, 1);
    impl_->dispatch("adjust_logits", {}, {logits.buf, io.flags.buf, io.mask.buf, io.bias_ids.buf, io.bias_values.buf},
                    0b1, push, gx, gy);
}

// sample.comp's per-row scratch: the selected ids, the same in rank order, the rank sort's buffer, their ranks.
size_t VulkanBackend::sampling_workspace_bytes(int64_t max_rows, int64_t vocab) const {
    return static_cast<size_t>(max_rows) * 4 * static_cast<size_t>(vocab) * sizeof(int32_t);
}

// Ops without a shader yet say so by name, before anything is recorded (tests/support/op_conformance.h skips them).
// capabilities() declares no MoE, so the model loader refuses MoE models.
void VulkanBackend::do_dsa_indexer(const Tensor&, const Tensor&, const Tensor&, int, const Tensor&) {
    not_implemented("dsa_indexer");
}
void VulkanBackend::do_moe_route(const Tensor&, const Tensor&, int64_t, bool, const Tensor&, const Tensor&,
                                 const Tensor&) {
    not_implemented("moe_route");
}
void VulkanBackend::do_moe_ffn(const Tensor&, const Tensor&, const Tensor&, const MoeExperts&, const Tensor&, int64_t) {
    not_implemented("moe_ffn");
}
void VulkanBackend::do_layer_norm(const Tensor&, const Tensor&, const Tensor&, float, const Tensor&) {
    not_implemented("layer_norm");
}
void VulkanBackend::do_dsa_indexer_paged(const Tensor&, const Tensor&, const Tensor&, const AttentionMeta&, int,
                                         const Tensor&) {
    not_implemented("dsa_indexer_paged");
}
void VulkanBackend::do_moe_route_grouped(const Tensor&, const Tensor&, const Tensor&, int, int, bool, float,
                                         const Tensor&, const Tensor&, const Tensor&) {
    not_implemented("moe_route_grouped");
}
// dsa_topk.comp keeps its state in shared memory, so the workspace holds nothing.
size_t VulkanBackend::dsa_topk_workspace_bytes(int64_t, int64_t) const { return 0; }

}  // namespace tracelm::vulkan
