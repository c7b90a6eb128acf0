// Standard output that fails loudly: a full disk, a closed pipe or a closed descriptor makes the command
// fail with a message and a non-zero exit instead of reporting success after losing output.
#pragma once

namespace tracelm::cli {

// Makes output errors visible: SIGPIPE is ignored (a closed pipe then shows as EPIPE on write), and a
// closed stdin/stdout/stderr is held by a descriptor that fails every transfer, so no file the command
// opens later takes its number and receives the output by mistake.
void guard_standard_streams();

// Flushes std::cout and stdout; throws std::runtime_error naming the failure when output was lost. Writers
// flush through this rather than with std::flush, so that the reason (errno) is still the flush's.
void check_stdout();

}  // namespace tracelm::cli
