#include "cli/output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>

namespace tracelm::cli {

void guard_standard_streams() {
    std::signal(SIGPIPE, SIG_IGN);
    for (const int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) {
        if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        // /dev/null opened for the wrong direction: reads from a closed stdin and writes to a closed stdout
        // fail with EBADF, as they did before. open() returns the lowest free number, which is `fd`.
        const int held = ::open("/dev/null", fd == STDIN_FILENO ? O_WRONLY : O_RDONLY);
        if (held >= 0 && held != fd) ::close(held);
    }
}

void check_stdout() {
    if (std::cout && !std::ferror(stdout)) {
        errno = 0;  // so that the reason below is this flush's
        std::cout.flush();
        if (std::cout && std::fflush(stdout) == 0) return;
    }
    const int e = errno;
    throw std::runtime_error(std::string("cannot write to standard output") +
                             (e != 0 ? std::string(": ") + std::strerror(e) : std::string()));
}

}  // namespace tracelm::cli
