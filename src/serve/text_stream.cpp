#include "serve/text_stream.h"

#include <algorithm>
#include <stdexcept>

namespace tracelm::serve {

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop, std::vector<int32_t> keep_special)
    : tokenizer_(tokenizer),
      decoder_(tokenizer, /*skip_special=*/false),
      stop_(std::move(stop)),
      keep_special_(std::move(keep_special)) {
    for (const std::string& s : stop_)
        if (s.empty()) throw std::invalid_argument("TextStream: empty stop string");
}

std::string TextStream::push(int32_t id) {
    if (stopped_) return {};
    if (tokenizer_.is_special(id) && std::find(keep_special_.begin(), keep_special_.end(), id) == keep_special_.end())
        return release(false);
    const std::string text = decoder_.push(id);
    for (const unsigned char c : text) decoded_chars_ += (c & 0xC0) != 0x80;  // lead bytes count characters
    pending_ += text;
    return release(false);
}

std::string TextStream::finish() {
    if (stopped_) return {};
    pending_ += decoder_.flush();
    return release(true);
}

std::string TextStream::release(bool at_end) {
    // The earliest stop string in the unsent text (the sent text holds none: a match is found as soon as it is
    // complete, and the held-back tail always reaches back to any partial one).
    size_t cut = std::string::npos;
    for (const std::string& s : stop_) cut = std::min(cut, pending_.find(s));
    if (cut != std::string::npos) {
        stopped_ = true;
        std::string out = pending_.substr(0, cut);
        pending_.clear();
        return out;
    }
    // Hold back the longest tail that is a proper prefix of a stop string. Stop strings are valid UTF-8, so such a
    // tail starts on a character boundary.
    size_t hold = 0;
    if (!at_end) {
        for (const std::string& s : stop_) {
            for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k) {
                if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
                    hold = k;
                    break;
                }
            }
        }
    }
    std::string out = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
    return out;
}

}  // namespace tracelm::serve
