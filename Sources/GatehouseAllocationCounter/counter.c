// Counts heap allocations of the process it is preloaded into (LD_PRELOAD), for the
// allocation tests: every malloc, calloc, realloc, posix_memalign, aligned_alloc and
// memalign adds one to a 64-bit counter kept in the file named by GATEHOUSE_ALLOCATION_COUNTER
// (mapped shared, so the test process reads it while the gateway runs). The allocations
// themselves are glibc's own (__libc_*): nothing changes but the count.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *pointer, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);

static _Atomic uint64_t fallback;
static _Atomic uint64_t *counter = &fallback;

// Maps the counter file at load time, before the gateway's first allocation of interest.
// open, ftruncate and mmap do not allocate, so this cannot recurse.
__attribute__((constructor)) static void map_counter(void) {
  const char *path = getenv("GATEHOUSE_ALLOCATION_COUNTER");
  if (path == NULL) return;
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  if (ftruncate(fd, sizeof(uint64_t)) == 0) {
    void *mapped = mmap(NULL, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mapped != MAP_FAILED) counter = (_Atomic uint64_t *)mapped;
  }
  close(fd);
}

static inline void count(void) { atomic_fetch_add_explicit(counter, 1, memory_order_relaxed); }

void *malloc(size_t size) {
  count();
  return __libc_malloc(size);
}

void *calloc(size_t count_, size_t size) {
  count();
  return __libc_calloc(count_, size);
}

void *realloc(void *pointer, size_t size) {
  count();
  return __libc_realloc(pointer, size);
}

int posix_memalign(void **out, size_t alignment, size_t size) {
  if (alignment % sizeof(void *) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
  count();
  void *pointer = __libc_memalign(alignment, size);
  if (pointer == NULL) return ENOMEM;
  *out = pointer;
  return 0;
}

void *aligned_alloc(size_t alignment, size_t size) {
  count();
  return __libc_memalign(alignment, size);
}

void *memalign(size_t alignment, size_t size) {
  count();
  return __libc_memalign(alignment, size);
}
