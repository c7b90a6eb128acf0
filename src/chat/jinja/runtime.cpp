#include "chat/jinja/runtime.h"

#include "chat/jinja/error.h"

namespace tracelm::jinja {

std::tm Runtime::now() const {
    std::tm tm{};
    if (now_) {
        gmtime_r(&*now_, &tm);  // a fixed time is given in UTC, so a render does not depend on the machine
    } else {
        const std::time_t t = std::time(nullptr);
        localtime_r(&t, &tm);
    }
    return tm;
}

void Runtime::over(const char* what, uint64_t limit) const {
    throw Error(Error::Kind::Limit, "the template exceeded its limit of " + std::to_string(limit) + " " + what);
}

}  // namespace tracelm::jinja
