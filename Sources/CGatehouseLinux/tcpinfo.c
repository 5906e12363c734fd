// Kept apart from linux.c: <linux/tcp.h> (which has the whole struct tcp_info) and glibc's
// <netinet/tcp.h> (which linux.c needs) declare the same names and cannot be included together.
#include "CGatehouseLinux.h"
#include <linux/tcp.h>
#include <stddef.h>
#include <netinet/in.h>
#include <sys/socket.h>

int64_t gh_tcp_bytes_acked(int fd) {
  struct tcp_info info;
  socklen_t length = sizeof(info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return -1;
  // Kernels before 4.1 return a shorter struct without the field.
  if (length < offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof(info.tcpi_bytes_acked)) return -1;
  return (int64_t)info.tcpi_bytes_acked;
}
