// The GPT-2 byte <-> unicode mapping used by byte-level BPE: every byte gets a printable
// character (printable Latin-1 bytes map to themselves, the other 68 to U+0100..U+0143), so that
// vocabulary files can store arbitrary byte strings as JSON text.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tracelm::tokenizer_detail {

// Maps raw bytes to their byte-level text (UTF-8 encoded).
std::string byte_level_encode(std::string_view bytes);

// Maps byte-level text back to raw bytes; nullopt when `text` is not valid UTF-8 or holds a
// character outside the 256-character alphabet.
std::optional<std::string> byte_level_decode(std::string_view text);

}  // namespace tracelm::tokenizer_detail
