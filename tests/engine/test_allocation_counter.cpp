// Counts every allocation the test process makes, on every thread, through testing::heap_allocations() (and each
// thread's own through testing::thread_heap_allocations()):
// malloc, calloc, realloc, aligned_alloc, posix_memalign, memalign, valloc, pvalloc (and so every operator new,
// aligned or not, which libstdc++ builds on them) and mmap (under ThreadSanitizer neither mmap nor aligned_alloc and
// posix_memalign: see below).
//
// A plain build defines those functions here: the executable's definitions come first in symbol lookup, so the
// shared libraries (libstdc++ included) call them too; each counts and forwards to glibc's __libc_* entry points
// (mmap to the system call). Under AddressSanitizer or ThreadSanitizer, whose runtimes own the heap, the heap
// functions are left to the sanitizer and counted through its allocation hook instead.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "support/test_support.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TRACELM_SANITIZED_HEAP 1
// From the sanitizers' <sanitizer/allocator_interface.h>, which Debian's GCC does not install.
extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void*, size_t),
                                                         void (*free_hook)(const volatile void*));
#endif

namespace {
void count_one() {
    tracelm::testing::heap_allocations().fetch_add(1, std::memory_order_relaxed);
    ++tracelm::testing::thread_heap_allocations();
}
}  // namespace

#ifdef TRACELM_SANITIZED_HEAP
namespace {
void on_sanitizer_malloc(const volatile void*, size_t) { count_one(); }
void on_sanitizer_free(const volatile void*) {}
const int kHooksInstalled = __sanitizer_install_malloc_and_free_hooks(on_sanitizer_malloc, on_sanitizer_free);
}  // namespace
#else
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);

void* malloc(size_t n) {
    count_one();
    return __libc_malloc(n);
}
void* calloc(size_t n, size_t size) {
    count_one();
    return __libc_calloc(n, size);
}
void* realloc(void* p, size_t n) {
    count_one();
    return __libc_realloc(p, n);
}
void* memalign(size_t alignment, size_t n) {
    count_one();
    return __libc_memalign(alignment, n);
}
void* aligned_alloc(size_t alignment, size_t n) {
    count_one();
    return __libc_memalign(alignment, n);
}
int posix_memalign(void** out, size_t alignment, size_t n) {
    count_one();
    if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
    void* p = __libc_memalign(alignment, n);
    if (p == nullptr) return ENOMEM;
    *out = p;
    return 0;
}
void* valloc(size_t n) {
    count_one();
    return __libc_memalign(static_cast<size_t>(sysconf(_SC_PAGESIZE)), n);
}
void* pvalloc(size_t n) {
    count_one();
    const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return __libc_memalign(page, (n + page - 1) / page * page);
}
}  // extern "C"
#endif

// mmap is counted under AddressSanitizer too, by a direct system call (no runtime bookkeeping is needed for the
// program's own mappings); not under ThreadSanitizer, whose runtime calls mmap through its interceptor before it is
// initialised, where this instrumented code cannot run yet.
#ifndef __SANITIZE_THREAD__
#define TRACELM_COUNTS_MMAP 1
extern "C" {
void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
    count_one();
    return reinterpret_cast<void*>(syscall(SYS_mmap, addr, len, prot, flags, fd, off));
}
void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off_t off) { return mmap(addr, len, prot, flags, fd, off); }
}  // extern "C"
#endif

namespace tracelm {
namespace {

// Each allocation path, called through a volatile pointer so that the compiler cannot elide the call.
template <class F>
uint64_t allocations_made_by(F f) {
    const uint64_t before = testing::heap_allocations().load();
    f();
    return testing::heap_allocations().load() - before;
}

TEST(AllocationCounter, SeesEveryAllocationPath) {
    void* (*volatile m)(size_t) = std::malloc;
    void* (*volatile c)(size_t, size_t) = std::calloc;
    void* (*volatile r)(void*, size_t) = std::realloc;
    void* (*volatile a)(size_t, size_t) = std::aligned_alloc;
    int (*volatile pm)(void**, size_t, size_t) = posix_memalign;
    void (*volatile f)(void*) = std::free;
    EXPECT_EQ(allocations_made_by([&] { f(m(100)); }), 1u);
    EXPECT_EQ(allocations_made_by([&] { f(c(10, 10)); }), 1u);
    EXPECT_EQ(allocations_made_by([&] { f(r(nullptr, 100)); }), 1u);
    // ThreadSanitizer's allocation hook misses these two (its own aligned new is seen).
#ifndef __SANITIZE_THREAD__
    EXPECT_EQ(allocations_made_by([&] { f(a(64, 128)); }), 1u);
    EXPECT_EQ(allocations_made_by([&] {
                  void* p = nullptr;
                  ASSERT_EQ(pm(&p, 64, 128), 0);
                  f(p);
              }),
              1u);
#else
    (void)a;
    (void)pm;
#endif
    void* (*volatile nw)(size_t) = ::operator new;
    void* (*volatile nwa)(size_t) = ::operator new[];
    void* (*volatile nwal)(size_t, std::align_val_t) = ::operator new;
    void* (*volatile nwnt)(size_t, const std::nothrow_t&) noexcept = ::operator new;
    EXPECT_EQ(allocations_made_by([&] { ::operator delete(nw(100)); }), 1u);
    EXPECT_EQ(allocations_made_by([&] { ::operator delete[](nwa(100)); }), 1u);
    EXPECT_EQ(allocations_made_by([&] { ::operator delete(nwal(100, std::align_val_t{256}), std::align_val_t{256}); }),
              1u);
    EXPECT_EQ(allocations_made_by([&] { ::operator delete(nwnt(100, std::nothrow)); }), 1u);
#ifdef TRACELM_COUNTS_MMAP
    EXPECT_EQ(allocations_made_by([&] {
                  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                  ASSERT_NE(p, MAP_FAILED);
                  munmap(p, 4096);
              }),
              1u);
#endif
#ifndef TRACELM_SANITIZED_HEAP
    void* (*volatile ma)(size_t, size_t) = memalign;
    EXPECT_EQ(allocations_made_by([&] { f(ma(64, 128)); }), 1u);
#else
    EXPECT_EQ(kHooksInstalled, 1);
#endif
}

}  // namespace
}  // namespace tracelm
