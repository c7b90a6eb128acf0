// libFuzzer harness for the safetensors reader: any input either opens or throws std::runtime_error, and
// every tensor's data lies inside the file. SafetensorsFile only opens paths, so the input goes into an
// in-memory file (memfd) opened through /proc/self/fd.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "formats/safetensors.h"

namespace {
volatile unsigned char g_sink;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const int fd = memfd_create("fuzz.safetensors", MFD_CLOEXEC);
    if (fd < 0) __builtin_trap();
    for (size_t done = 0; done < size;) {
        const ssize_t n = write(fd, data + done, size - done);
        if (n <= 0) __builtin_trap();
        done += static_cast<size_t>(n);
    }
    try {
        const tracelm::SafetensorsFile f("/proc/self/fd/" + std::to_string(fd));
        for (const tracelm::TensorInfo& t : f.tensors()) {
            const auto* p = static_cast<const unsigned char*>(t.data);
            unsigned char acc = 0;
            for (size_t i = 0; i < t.bytes; ++i) acc ^= p[i];  // faults if the data is outside the mapping
            g_sink = acc;
            (void)t.numel();
            if (f.find(t.name) != &t) __builtin_trap();
        }
    } catch (const std::runtime_error&) {
    }
    close(fd);
    return 0;
}
