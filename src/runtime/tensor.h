// Device buffers and tensor views over them.
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "runtime/dtype.h"

namespace tracelm {

// A block of device memory owned by a Backend. Its address never changes for its lifetime, which is
// what lets a captured graph refer to it.
struct Buffer {
    void* data = nullptr;  // device address (host address on the CPU backend)
    size_t bytes = 0;
    std::string name;
};

// A strided-by-rows view: `rows x cols` elements (row-major, contiguous rows of `cols`), or a flat
// vector when rows == 1. Every model op works on such 2-D views; heads are folded into columns.
struct Tensor {
    Buffer* buf = nullptr;
    size_t offset = 0;  // bytes from buf->data
    DType dtype = DType::F32;
    int64_t rows = 0;
    int64_t cols = 0;

    int64_t numel() const { return rows * cols; }
    size_t row_bytes() const { return dtype_row_bytes(dtype, cols); }
    size_t nbytes() const { return static_cast<size_t>(rows) * row_bytes(); }
    const std::string& name() const { return buf->name; }

    template <typename T>
    T* ptr() const {
        return reinterpret_cast<T*>(static_cast<char*>(buf->data) + offset);
    }
    void* raw() const { return static_cast<char*>(buf->data) + offset; }

    // Rows [r0, r0+n) of this view.
    Tensor slice_rows(int64_t r0, int64_t n) const {
        if (r0 < 0 || n < 0 || r0 + n > rows) throw std::out_of_range("slice_rows out of range on '" + name() + "'");
        Tensor t = *this;
        t.offset += static_cast<size_t>(r0) * row_bytes();
        t.rows = n;
        return t;
    }
    // Same memory seen as rows x cols (must hold the same element count).
    Tensor view(int64_t r, int64_t c) const {
        if (r * c != numel() || !dtype_row_ok(dtype, c))
            throw std::invalid_argument("view changes element count or splits a block of '" + name() + "'");
        Tensor t = *this;
        t.rows = r;
        t.cols = c;
        return t;
    }
};

inline Tensor whole(Buffer* b, DType dt, int64_t rows, int64_t cols) {
    Tensor t;
    t.buf = b;
    t.dtype = dt;
    t.rows = rows;
    t.cols = cols;
    if (!dtype_row_ok(dt, cols)) throw std::invalid_argument("row of '" + b->name + "' is not whole blocks");
    if (t.nbytes() > b->bytes) throw std::invalid_argument("tensor larger than buffer '" + b->name + "'");
    return t;
}

}  // namespace tracelm
