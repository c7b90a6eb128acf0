#include "backends/vulkan/capabilities.h"

namespace tracelm::vulkan {

const BackendCapabilities& capabilities() {
    static const BackendCapabilities caps{
        {DType::F32, DType::BF16, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
         DType::Q4_K, DType::Q5_K, DType::Q6_K},
        {DType::F32, DType::F16},
        kMaxHeadDim};
    return caps;
}

}  // namespace tracelm::vulkan
