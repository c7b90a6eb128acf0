// The backends this build knows, in one list: the CLI's --backend choice and the backend-parameterised
// op conformance tests (tests/support/op_conformance.h) both read it, so a new backend only adds an entry in registry.cpp.
//
// registry.cpp is not part of tracelm_core (which must not depend on CUDA): it is the tracelm_backends
// library, which links every backend that was built.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/backend.h"

namespace tracelm {

struct BackendOptions {
    int threads = 0;  // CPU worker threads; 0: all cores
    int device = 0;   // index of the device among the backend's devices (BackendInfo::devices; Vulkan has several)
};

struct BackendInfo {
    std::string name;
    // Empty when this process can make the backend; otherwise why not (not built, no device).
    std::string (*unavailable)();
    std::unique_ptr<Backend> (*make)(const BackendOptions&);
    // What it runs, known without making it (so without a device).
    const BackendCapabilities& (*capabilities)();
    // Its devices, one line each as BackendOptions::device numbers them ("0: llvmpipe (cpu, 31.3 GiB device-local)");
    // call only where available.
    std::vector<std::string> (*devices)();
};

// Every backend, built or not; "cpu" first (the reference).
const std::vector<BackendInfo>& backend_registry();
// The entry called `name`; std::runtime_error when there is none.
const BackendInfo& backend_info(const std::string& name);
// "cpu|cuda", for help texts.
std::string backend_names();
// The named backend; std::runtime_error with the reason when it is unknown or unavailable here.
std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& options = {});

}  // namespace tracelm
