#define _GNU_SOURCE
#include <malloc.h>
#include "CGatehouseLinux.h"
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

const uint32_t GH_EPOLLIN = EPOLLIN;
const uint32_t GH_EPOLLOUT = EPOLLOUT;
const uint32_t GH_EPOLLERR = EPOLLERR;
const uint32_t GH_EPOLLHUP = EPOLLHUP;
const uint32_t GH_EPOLLRDHUP = EPOLLRDHUP;
const uint32_t GH_EPOLLET = EPOLLET;
const uint32_t GH_EPOLLONESHOT = EPOLLONESHOT;
const int GH_EPOLL_CTL_ADD = EPOLL_CTL_ADD;
const int GH_EPOLL_CTL_MOD = EPOLL_CTL_MOD;
const int GH_EPOLL_CTL_DEL = EPOLL_CTL_DEL;
const int GH_SOCK_NONBLOCK = SOCK_NONBLOCK;
const int GH_SOCK_CLOEXEC = SOCK_CLOEXEC;
const int GH_EFD_NONBLOCK = EFD_NONBLOCK;
const int GH_EFD_CLOEXEC = EFD_CLOEXEC;
const int GH_TFD_NONBLOCK = TFD_NONBLOCK;
const int GH_TFD_CLOEXEC = TFD_CLOEXEC;

int gh_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

int gh_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t data) {
  struct epoll_event ev;
  memset(&ev, 0, sizeof ev);
  ev.events = events;
  ev.data.u64 = data;
  return epoll_ctl(epfd, op, fd, &ev);
}

int gh_epoll_wait(int epfd, gh_epoll_event *out, int maxevents, int timeout_ms) {
  struct epoll_event evs[256];
  if (maxevents > 256) maxevents = 256;
  int n = epoll_wait(epfd, evs, maxevents, timeout_ms);
  for (int i = 0; i < n; i++) {
    out[i].events = evs[i].events;
    out[i].data = evs[i].data.u64;
  }
  return n;
}

int gh_eventfd(unsigned int initval, int flags) { return eventfd(initval, flags); }

int gh_timerfd_create(int flags) { return timerfd_create(CLOCK_MONOTONIC, flags); }

int gh_timerfd_set_relative(int fd, int64_t ns) {
  struct itimerspec spec;
  memset(&spec, 0, sizeof spec);
  if (ns > 0) {
    spec.it_value.tv_sec = ns / 1000000000;
    spec.it_value.tv_nsec = ns % 1000000000;
  }
  return timerfd_settime(fd, 0, &spec, NULL);
}

int gh_accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags) {
  return accept4(fd, addr, len, flags);
}

int gh_signalfd_for(const int *signals, int count) {
  sigset_t set;
  sigemptyset(&set);
  for (int i = 0; i < count; i++) sigaddset(&set, signals[i]);
  if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0) return -1;
  return signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}

ssize_t gh_signalfd_read(int fd, uint32_t *signo) {
  struct signalfd_siginfo info;
  ssize_t n = read(fd, &info, sizeof info);
  if (n == (ssize_t)sizeof info) *signo = info.ssi_signo;
  return n;
}

int gh_unblock_signals(const int *signals, int count) {
  sigset_t set;
  sigemptyset(&set);
  for (int i = 0; i < count; i++) sigaddset(&set, signals[i]);
  return pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

const int GH_TCP_NODELAY = TCP_NODELAY;
const int GH_IPPROTO_TCP = IPPROTO_TCP;
const int GH_SO_REUSEPORT = SO_REUSEPORT;
const int GH_MSG_NOSIGNAL = MSG_NOSIGNAL;
const int GH_MSG_PEEK = MSG_PEEK;

void gh_set_thread_name(const char *name) {
  char truncated[16];
  strncpy(truncated, name, sizeof truncated - 1);
  truncated[sizeof truncated - 1] = 0;
  pthread_setname_np(pthread_self(), truncated);
}

int gh_return_free_heap(void) { return malloc_trim(0); }

int gh_fix_mmap_threshold(int bytes) { return mallopt(M_MMAP_THRESHOLD, bytes); }
