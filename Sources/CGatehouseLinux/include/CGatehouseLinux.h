#ifndef CGATEHOUSE_LINUX_H
#define CGATEHOUSE_LINUX_H
// Linux system calls that the Swift Glibc module does not expose: epoll, eventfd, timerfd,
// accept4, signalfd. `struct epoll_event` is packed on x86_64, which Swift cannot import as a
// normal struct, so events cross the boundary through gh_epoll_event instead.
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <signal.h>

typedef struct gh_epoll_event {
  uint32_t events;
  uint64_t data;
} gh_epoll_event;

extern const uint32_t GH_EPOLLIN;
extern const uint32_t GH_EPOLLOUT;
extern const uint32_t GH_EPOLLERR;
extern const uint32_t GH_EPOLLHUP;
extern const uint32_t GH_EPOLLRDHUP;
extern const uint32_t GH_EPOLLET;
extern const uint32_t GH_EPOLLONESHOT;
extern const int GH_EPOLL_CTL_ADD;
extern const int GH_EPOLL_CTL_MOD;
extern const int GH_EPOLL_CTL_DEL;
extern const int GH_SOCK_NONBLOCK;
extern const int GH_SOCK_CLOEXEC;
extern const int GH_EFD_NONBLOCK;
extern const int GH_EFD_CLOEXEC;
extern const int GH_TFD_NONBLOCK;
extern const int GH_TFD_CLOEXEC;

int gh_epoll_create(void);
int gh_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t data);
// Waits and copies up to maxevents events into `out`; returns the count or -1 with errno.
int gh_epoll_wait(int epfd, gh_epoll_event *out, int maxevents, int timeout_ms);

int gh_eventfd(unsigned int initval, int flags);
int gh_timerfd_create(int flags);
// Arms a one-shot relative timer of `ns` nanoseconds (0 disarms).
int gh_timerfd_set_relative(int fd, int64_t ns);
int gh_accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags);
// Blocks the given signal in the calling thread and returns a signalfd for it.
int gh_signalfd_for(const int *signals, int count);
// Reads one signalfd_siginfo from a signalfd and stores its signal number; returns read()'s result.
ssize_t gh_signalfd_read(int fd, uint32_t *signo);
// Undoes gh_signalfd_for's blocking in the calling thread (tests and tools that hand signals back).
int gh_unblock_signals(const int *signals, int count);
// Names the calling thread (truncated to the kernel's 15 characters), for top -H and gdb.
void gh_set_thread_name(const char *name);

// How many bytes the peer has acknowledged on a TCP socket (tcp_info), or -1.
int64_t gh_tcp_bytes_acked(int fd);

// Socket constants that live in headers the Glibc module does not reliably export.
extern const int GH_TCP_NODELAY;
extern const int GH_IPPROTO_TCP;
extern const int GH_SO_REUSEPORT;
extern const int GH_MSG_NOSIGNAL;
extern const int GH_MSG_PEEK;

/// Asks glibc to hand freed heap pages back to the kernel (malloc_trim(0)); returns
/// whether any were.
int gh_return_free_heap(void);

/// Fixes glibc's mmap threshold at `bytes` (mallopt M_MMAP_THRESHOLD), which also turns off
/// its dynamic raising; returns whether glibc took it.
int gh_fix_mmap_threshold(int bytes);
#endif
