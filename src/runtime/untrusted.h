// One policy for input from strangers: model folders and GGUF files from anywhere, the CLI's input files,
// and later the server's request bodies. Limits are named constants (docs/security.md lists them); every
// violation is a std::runtime_error whose message names the limit, and every string taken from such input
// is escaped before it reaches a terminal or a log.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tracelm::untrusted {

// Containers nested deeper than this are refused while parsing, before anything recurses over them. Real
// tokenizer.json, config.json and index files nest under 10 levels.
constexpr int kMaxJsonDepth = 64;
// tokenizer.json (the largest real ones are ~35 MB) and the CLI's JSON input files.
constexpr size_t kMaxJsonFileBytes = size_t{256} << 20;
// config.json, tokenizer_config.json, model.safetensors.index.json.
constexpr size_t kMaxSmallJsonFileBytes = size_t{16} << 20;
// Strings quoted in messages are cut after this many bytes, with their length stated.
constexpr size_t kMaxQuotedBytes = 200;

// `s` made safe for a terminal: control bytes (NUL, ESC, BEL, DEL, C1 controls), backslashes and bytes
// that are not valid UTF-8 are written as \xNN; printable UTF-8 is kept. Longer than max_bytes, the text
// is cut there and "...(N bytes)" appended.
std::string escape(std::string_view s, size_t max_bytes = kMaxQuotedBytes);

// What `path` is, for messages: "a regular file", "a directory", "a FIFO", "a character device",
// "a block device", "a socket", "a dangling symbolic link", "missing", or "inaccessible (<reason>)".
std::string describe_path(const std::string& path);

// "'<path>' does not exist" or "'<path>' is a FIFO", followed by ", not <expected>": the message for a
// path that is neither of the kinds a command accepts.
std::string wrong_kind(const std::string& path, std::string_view expected);

// Opens a regular file for reading without ever blocking (a FIFO is refused before it is opened, and the
// open itself cannot block either). fd < 0 on failure, with `error` saying why ("not a regular file: it
// is a FIFO", "cannot open: it does not exist", "cannot open: <reason>").
struct OpenedFile {
    int fd = -1;
    uint64_t bytes = 0;
    std::string error;
};
OpenedFile open_regular_file(const std::string& path);

// The whole of a regular file of 1 to max_bytes bytes; throws "<path>: <problem>" otherwise (an empty file
// says it is empty, a larger one names the limit).
std::string read_regular_file(const std::string& path, size_t max_bytes);

// Counts container nesting for SAX handlers: enter() is false (and error() set) past kMaxJsonDepth.
class DepthGuard {
   public:
    bool enter();
    void leave() { --depth_; }
    static std::string error();

   private:
    int depth_ = 0;
};

// For parser callbacks (nlohmann::json::parse): true when a container opens `depth` levels deep (the number
// of containers around it) at or past kMaxJsonDepth.
bool too_deep(int depth, nlohmann::json::parse_event_t event);

// Parses JSON with the depth limit checked as containers open (so neither the parser nor anything that
// later recurses over the value can overflow the stack). `on_event` runs for every event as in
// nlohmann::json::parse. Throws std::runtime_error "invalid JSON: ..." or the depth message.
nlohmann::json parse_json(std::string_view text, const nlohmann::json::parser_callback_t& on_event = nullptr);
// The same, with each object's keys kept in the order of the text (as Python's json.loads keeps them): request
// bodies whose messages and tools a chat template prints. ordered_json finds a key by a linear search, so parsing an
// object of n members costs n^2 / 2 comparisons (a 1 MiB body of one object: about 15 s of CPU): an object with
// more than kMaxOrderedMembers members is refused ("JSON object with more than 1024 members (the limit)").
inline constexpr size_t kMaxOrderedMembers = 1024;
nlohmann::ordered_json parse_ordered_json(std::string_view text);

}  // namespace tracelm::untrusted
