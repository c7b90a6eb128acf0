#include "runtime/untrusted.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace tracelm::untrusted {

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 when the bytes there are not one.
size_t utf8_length(std::string_view s, size_t i) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const unsigned char c = b(0);
    size_t n = 0;
    uint32_t cp = 0;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2, cp = c & 0x1fu;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3, cp = c & 0x0fu;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4, cp = c & 0x07u;
    } else {
        return 0;
    }
    if (i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k) {
        if ((b(k) & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (b(k) & 0x3fu);
    }
    const bool overlong = (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000);
    const bool bad = overlong || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff;
    // C1 controls (U+0080..U+009F) include CSI, which some terminals obey like ESC [.
    const bool c1 = cp >= 0x80 && cp <= 0x9f;
    return bad || c1 ? 0 : n;
}

void append_hex(std::string& out, unsigned char c) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "\\x%02x", c);
    out += buf;
}

std::string errno_text(int e) { return std::strerror(e); }

}  // namespace

std::string escape(std::string_view s, size_t max_bytes) {
    std::string out;
    size_t i = 0;
    while (i < s.size() && i < max_bytes) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            out += static_cast<char>(c);
            ++i;
        } else if (const size_t n = c >= 0x80 ? utf8_length(s, i) : 0; n > 0) {
            out.append(s.substr(i, n));
            i += n;
        } else {
            append_hex(out, c);
            ++i;
        }
    }
    if (i < s.size()) out += "...(" + std::to_string(s.size()) + " bytes)";
    return out;
}

std::string describe_path(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        const int e = errno;
        if (e == ENOENT || e == ENOTDIR) {
            struct stat link {};
            return ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode) ? "a dangling symbolic link" : "missing";
        }
        return "inaccessible (" + errno_text(e) + ")";
    }
    if (S_ISREG(st.st_mode)) return "a regular file";
    if (S_ISDIR(st.st_mode)) return "a directory";
    if (S_ISFIFO(st.st_mode)) return "a FIFO";
    if (S_ISCHR(st.st_mode)) return "a character device";
    if (S_ISBLK(st.st_mode)) return "a block device";
    if (S_ISSOCK(st.st_mode)) return "a socket";
    return "not a regular file";
}

std::string wrong_kind(const std::string& path, std::string_view expected) {
    const std::string what = describe_path(path);
    const std::string quoted = "'" + escape(path) + "'";
    if (what == "missing") return quoted + " does not exist (expected " + std::string(expected) + ")";
    return quoted + " is " + what + ", not " + std::string(expected);
}

OpenedFile open_regular_file(const std::string& path) {
    OpenedFile f;
    // Checked before opening: opening a FIFO for reading blocks until a writer comes.
    if (const std::string what = describe_path(path); what != "a regular file") {
        f.error = what == "missing" ? "cannot open: it does not exist" : "not a regular file: it is " + what;
        return f;
    }
    // O_NONBLOCK in case the path was swapped for a FIFO since; fstat then refuses it.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        f.error = "cannot open: " + errno_text(errno);
        return f;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        f.error = "not a regular file";
        return f;
    }
    f.fd = fd;
    f.bytes = static_cast<uint64_t>(st.st_size);
    return f;
}

std::string read_regular_file(const std::string& path, size_t max_bytes) {
    const auto fail = [&](const std::string& problem) { throw std::runtime_error(path + ": " + problem); };
    OpenedFile f = open_regular_file(path);
    if (f.fd < 0) fail(f.error);
    if (f.bytes == 0 || f.bytes > max_bytes) {
        ::close(f.fd);
        if (f.bytes == 0) fail("the file is empty");
        fail("the file has " + std::to_string(f.bytes) + " bytes, over the limit of " + std::to_string(max_bytes) +
             " bytes for this file");
    }
    std::string text(static_cast<size_t>(f.bytes), '\0');
    size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = ::read(f.fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int e = errno;
            ::close(f.fd);
            fail(n < 0 ? "read error: " + errno_text(e) : "the file shrank while it was read");
        }
        done += static_cast<size_t>(n);
    }
    ::close(f.fd);
    return text;
}

bool DepthGuard::enter() { return ++depth_ <= kMaxJsonDepth; }

std::string DepthGuard::error() {
    return "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels (the limit)";
}

bool too_deep(int depth, nlohmann::json::parse_event_t event) {
    using E = nlohmann::json::parse_event_t;
    return (event == E::object_start || event == E::array_start) && depth >= kMaxJsonDepth;
}

nlohmann::json parse_json(std::string_view text, const nlohmann::json::parser_callback_t& on_event) {
    using nlohmann::json;
    const json::parser_callback_t check = [&](int depth, json::parse_event_t ev, json& parsed) {
        if (too_deep(depth, ev)) throw std::runtime_error(DepthGuard::error());
        return on_event ? on_event(depth, ev, parsed) : true;
    };
    try {
        return json::parse(text.begin(), text.end(), check);
    } catch (const json::exception& e) {
        throw std::runtime_error(std::string("invalid JSON: ") + e.what());
    }
}

nlohmann::ordered_json parse_ordered_json(std::string_view text) {
    using nlohmann::ordered_json;
    using E = ordered_json::parse_event_t;
    // Members so far of each object being parsed, innermost last (keys only occur in the innermost open object).
    std::vector<size_t> members;
    const ordered_json::parser_callback_t check = [&](int depth, E ev, ordered_json&) {
        if (too_deep(depth, ev)) throw std::runtime_error(DepthGuard::error());
        if (ev == E::object_start) {
            members.push_back(0);
        } else if (ev == E::object_end) {
            members.pop_back();
        } else if (ev == E::key && ++members.back() > kMaxOrderedMembers) {
            throw std::runtime_error("JSON object with more than " + std::to_string(kMaxOrderedMembers) +
                                     " members (the limit)");
        }
        return true;
    };
    try {
        return ordered_json::parse(text.begin(), text.end(), check);
    } catch (const ordered_json::exception& e) {
        throw std::runtime_error(std::string("invalid JSON: ") + e.what());
    }
}

}  // namespace tracelm::untrusted
