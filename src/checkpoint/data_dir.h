// tracelm's data files (the Qwen3 tokenizer that random checkpoints carry, the llama.cpp bench script), found
// relative to the running executable, so that neither an installed binary nor the build tree depends on where
// the sources are.
#pragma once

#include <string>

namespace tracelm {

// The path of `name` inside the data directory: $TRACELM_DATA_DIR if set, else <exe dir>/../share/tracelm (an
// installed binary), else <exe dir>/share/tracelm (the build tree, where CMake copies the files). Throws
// std::runtime_error naming the places looked at when none holds `name`.
std::string data_path(const std::string& name);

// data_path("qwen3-tokenizer").
std::string default_tokenizer_dir();

}  // namespace tracelm
