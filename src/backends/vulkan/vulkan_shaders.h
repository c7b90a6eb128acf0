// The SPIR-V of shaders/*.comp, compiled by glslc at build time into a generated vulkan_shaders.cpp
// (CMakeLists.txt), so the binary needs no shader files at run time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tracelm::vulkan {

struct ShaderCode {
    const char* name;  // the .comp file's name without extension
    const uint32_t* words;
    size_t count;
};

std::span<const ShaderCode> shaders();

}  // namespace tracelm::vulkan
