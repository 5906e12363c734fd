#ifndef CGATEHOUSE_CARES_SHIM_H
#define CGATEHOUSE_CARES_SHIM_H
// c-ares (Debian 12: 1.18.1) for Swift: GatehouseResolver drives its sockets and timeouts
// from an EventLoop (ARES_OPT_SOCK_STATE_CB, ares_process_fd, ares_timeout) and asks with
// ares_getaddrinfo, whose nodes carry TTLs. Nothing newer than 1.18 is used.
#include <ares.h>
#endif
