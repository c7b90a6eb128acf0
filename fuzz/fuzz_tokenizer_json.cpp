// libFuzzer harness for loading a tokenizer.json from text: any input either loads or throws
// std::runtime_error; a loaded tokenizer then encodes and decodes a fixed text without crashing.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const tracelm::Tokenizer tok =
            tracelm::Tokenizer::from_json_text(std::string(reinterpret_cast<const char*>(data), size));
        const std::string text = "Hello, world! 123 <|im_end|> caf\xc3\xa9 \xe2\x9c\x93\xff  tabs\t\n";
        const std::vector<int32_t> ids = tok.encode(text);
        (void)tok.decode(ids);
        (void)tok.decode({-1, 0, 1, tok.vocab_size(), 1 << 30}, true);
        tracelm::StreamDecoder stream(tok);
        for (int32_t id : ids) (void)stream.push(id);
        (void)stream.flush();
        for (int32_t id = -1; id <= 4; ++id) (void)tok.token_text(id);
    } catch (const std::runtime_error&) {
    }
    return 0;
}
