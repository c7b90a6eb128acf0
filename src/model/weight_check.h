// A weight file may hold NaN or infinity (a broken conversion, or a file made to misbehave); such a
// model would decode garbage forever, so loading refuses it. One pass over the bytes, cheap next to
// reading them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "runtime/dtype.h"

namespace tracelm {

// The index of the first element (plain types) or block (quantized types, whose only floats are their
// f16 scales and minimums) holding a NaN or an infinity; nullopt when every value is finite.
std::optional<int64_t> first_non_finite(DType dtype, const void* data, size_t bytes);

}  // namespace tracelm
